"""The endpoint's AWS edge (tests/conftest.py ENDPOINT: internal, a certificate, a hosted zone, access logs): the alias
record of SERVE_HOSTNAME and the read-back it follows, the access logs' bucket (its policy evaluated by the IAM
simulator), and the controller's listener, rule and security-group rights narrowed to its own load balancer and VPC."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import aws_iam as iam

from k8s_constructs.endpoint import ACCESS_LOG_PREFIX, ingress_name, load_balancer_name
from settings.endpoint import parse_endpoint
from settings.errors import SettingError
from settings.load_balancer_zones import APPLICATION_LOAD_BALANCER_ZONES
from stacks.serve_endpoint import LOG_DELIVERY_SERVICE, log_delivery_principal
from tests.conftest import ENDPOINT, PINNED, Synth, settings_for, synthesize
from tests.iam_documents import ACCOUNT, Resolver
from tests.iam_simulator import Request, decisions
from tests.test_endpoint import _controller_policy, _objects

ALLOWED, DENIED, EXPLICITLY_DENIED = "Allowed", "ImplicitlyDenied", "ExplicitlyDenied"
READ_BACK = "Custom::AWSCDK-EKS-KubernetesObjectValue"
MANIFEST = "Custom::AWSCDK-EKS-KubernetesResource"
ATTRIBUTES = "alb.ingress.kubernetes.io/load-balancer-attributes"


def _endpoint_manifest(synth: Synth) -> tuple[str, dict[str, Any]]:
    resources = synth.templates["serving"]["Resources"]
    ((logical_id, manifest),) = [(k, r) for k, r in resources.items() if r["Type"] == MANIFEST and "Endpoint" in k]
    return logical_id, manifest


def _read_back(synth: Synth) -> dict[str, Any]:
    (reader,) = synth.resources("serving", READ_BACK).values()
    properties: dict[str, Any] = reader["Properties"]
    return properties


def test_the_dns_record_is_an_alias_of_the_load_balancer_the_controller_made(endpoint_synth: Synth) -> None:
    (record,) = endpoint_synth.resources("serving", "AWS::Route53::RecordSet").values()
    props = record["Properties"]
    assert (props["HostedZoneId"], props["Name"], props["Type"]) == ("Z0123456789ABCDEFGHIJ", "llm.example.com.", "A")
    assert "TTL" not in props and "ResourceRecords" not in props
    # The DNS name the controller wrote into the Ingress's status, in sa-east-1's load balancer zone.
    resources = endpoint_synth.templates["serving"]["Resources"]
    reader = next(k for k, r in resources.items() if r["Type"] == READ_BACK)
    target = {"DNSName": {"Fn::GetAtt": [reader, "Value"]}, "HostedZoneId": "Z2P70J7HTTTPLU"}
    alias = {**target, "EvaluateTargetHealth": False}
    assert props["AliasTarget"] == alias
    read_back = _read_back(endpoint_synth)
    assert (read_back["ObjectType"], read_back["ObjectName"]) == ("ingress", "ray-llm-serve-internal")
    assert read_back["JsonPath"] == ".status.loadBalancer.ingress[0].hostname"
    # Read after the Ingress is applied.
    assert resources[reader]["DependsOn"] == [_endpoint_manifest(endpoint_synth)[0]]


def test_the_zone_table_covers_the_regions_settings_accept_or_refuses_the_record() -> None:
    from settings.parsers import known_regions

    assert all(re.fullmatch(r"Z[A-Z0-9]{8,31}", zone) for zone in APPLICATION_LOAD_BALANCER_ZONES.values())
    assert set(APPLICATION_LOAD_BALANCER_ZONES) <= set(known_regions())
    missing = sorted(set(known_regions()) - set(APPLICATION_LOAD_BALANCER_ZONES))
    assert missing  # Regions AWS's table has no row for yet: a record there is refused before any deploy
    raw = {k: PINNED[k] for k in PINNED if k.startswith("SERVE_")} | ENDPOINT
    raw["SERVE_CERTIFICATE_ARN"] = raw["SERVE_CERTIFICATE_ARN"].replace("sa-east-1", missing[0])
    with pytest.raises(SettingError, match=f"SERVE_HOSTED_ZONE_ID.*empty in REGION={missing[0]}"):
        parse_endpoint(raw, region=missing[0], vpc_cidr="10.0.0.0/16")
    # Without a zone the endpoint is fine there (the name is pointed at the load balancer by hand).
    assert parse_endpoint(raw | {"SERVE_HOSTED_ZONE_ID": ""}, region=missing[0], vpc_cidr="10.0.0.0/16").exposed


def test_an_apex_name_gets_its_alias_record(tmp_path: Path) -> None:
    apex = {**ENDPOINT, "SERVE_HOSTNAME": "example.com", "SERVE_ACCESS_LOGS": "off"}
    synth = synthesize(settings_for(apex), tmp_path)
    (record,) = synth.resources("serving", "AWS::Route53::RecordSet").values()
    assert (record["Properties"]["Name"], record["Properties"]["Type"]) == ("example.com.", "A")


def test_the_read_back_follows_every_change_of_the_ingress_only(endpoint_synth: Synth, tmp_path: Path) -> None:
    """A changed Ingress gets its DNS name read again (CloudFormation updates the read-back when a property changes);
    a new scheme, which makes the controller replace the load balancer, is a new Ingress whose status is empty until
    the new load balancer exists, so the read never returns the old one's name."""
    base = _read_back(endpoint_synth)
    changes = {
        "public": {"SERVE_EXPOSURE": "internet-facing", "SERVE_ALLOWED_CIDRS": "203.0.113.0/24"},
        "cidrs": {"SERVE_ALLOWED_CIDRS": "10.0.0.0/16,192.168.0.0/24"},
        "unrelated": {"HF_TOKEN_SECRET_NAME": "prod/hf-token"},
    }
    got = {}
    for name, change in changes.items():
        synth = synthesize(settings_for({**ENDPOINT, **change}), tmp_path / name)
        got[name] = _read_back(synth)
    assert got["public"]["ObjectName"] == "ray-llm-serve-internet-facing" != base["ObjectName"]
    assert got["public"]["IngressDigest"] != base["IngressDigest"]
    assert got["cidrs"]["IngressDigest"] != base["IngressDigest"] and got["cidrs"]["ObjectName"] == base["ObjectName"]
    assert got["unrelated"] == base


def test_one_ingress_and_one_load_balancer_name_per_scheme() -> None:
    internal = settings_for(ENDPOINT)
    public = settings_for({**ENDPOINT, "SERVE_EXPOSURE": "internet-facing", "SERVE_ALLOWED_CIDRS": "203.0.113.0/24"})
    assert (ingress_name(internal), ingress_name(public)) == ("ray-llm-serve-internal", "ray-llm-serve-internet-facing")
    assert load_balancer_name(internal) != load_balancer_name(public)
    # The ALB's rules: at most 32 characters, letters, digits and hyphens, no leading or trailing hyphen, never
    # "internal-" first; for every cluster name CLUSTER_NAME accepts (a DNS label up to 40).
    for cluster in ("ray-llm-multinode", "a" * 40, "internal", "internal-prod", "x" * 22 + "-" + "y" * 17):
        name = load_balancer_name(settings_for({**ENDPOINT, "CLUSTER_NAME": cluster}))
        assert re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?", name) and not name.startswith("internal-"), name


# --- SERVE_ACCESS_LOGS ------------------------------------------------------------------------------------------------


def test_the_access_logs_go_to_a_bucket_of_the_serving_stack(endpoint_synth: Synth) -> None:
    (bucket_id,) = endpoint_synth.resources("serving", "AWS::S3::Bucket")
    bucket = endpoint_synth.templates["serving"]["Resources"][bucket_id]
    props = bucket["Properties"]
    (encryption,) = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert encryption == {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}  # SSE-S3
    blocks = ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets")
    assert props["PublicAccessBlockConfiguration"] == dict.fromkeys(blocks, True)
    assert props["LifecycleConfiguration"]["Rules"] == [
        {"AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}, "ExpirationInDays": 30, "Status": "Enabled"}
    ]
    # Deleted with the stack, emptied first (aws-cdk-lib's custom resource, after the Ingress and so the load balancer).
    assert bucket["DeletionPolicy"] == "Delete"
    assert len(endpoint_synth.resources("serving", "Custom::S3AutoDeleteObjects")) == 1
    (ingress,) = _objects(endpoint_synth, "Ingress")
    attributes = dict(a.split("=") for a in ingress["metadata"]["annotations"][ATTRIBUTES].split(","))
    assert (attributes["access_logs.s3.enabled"], attributes["access_logs.s3.prefix"]) == ("true", ACCESS_LOG_PREFIX)
    _, manifest = _endpoint_manifest(endpoint_synth)
    assert {"Ref": bucket_id} in manifest["Properties"]["Manifest"]["Fn::Join"][1]  # the bucket's name, at deploy
    (policy_id,) = endpoint_synth.resources("serving", "AWS::S3::BucketPolicy")
    assert {bucket_id, policy_id} <= set(manifest["DependsOn"])  # ELB checks it may write when the logs turn on


def test_only_the_load_balancer_may_write_the_logs_and_only_over_tls(endpoint_synth: Synth) -> None:
    (policy,) = endpoint_synth.resources("serving", "AWS::S3::BucketPolicy").values()
    resolver = Resolver(endpoint_synth.templates, "sa-east-1")
    document = resolver.resolve(policy["Properties"]["PolicyDocument"], "serving")
    (bucket_id,) = endpoint_synth.resources("serving", "AWS::S3::Bucket")
    logs = f"arn:aws:s3:::{bucket_id}/{ACCESS_LOG_PREFIX}/AWSLogs/{ACCOUNT}/elasticloadbalancing/sa-east-1/x.log.gz"
    elb = "arn:aws:iam::507241528517:root"  # sa-east-1's Elastic Load Balancing account (aws-cdk-lib's region facts)
    tls = {"aws:SecureTransport": "true", "s3:TlsVersion": "1.3"}
    # The delivering principal's own side allows the write: the bucket policy decides.
    theirs = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:PutObject", "Resource": "*"}]}
    got = decisions(
        [
            Request("s3:PutObject", logs, tls, principal=elb),
            Request("s3:PutObject", f"arn:aws:s3:::{bucket_id}/elsewhere/x", tls, principal=elb),
            Request("s3:PutObject", logs.replace(ACCOUNT, "210987654321"), tls, principal=elb),
            Request("s3:PutObject", logs, {"aws:SecureTransport": "false"}, principal=elb),
            Request("s3:PutObject", logs, tls, principal="arn:aws:iam::111122223333:root"),
        ],
        identity_policy=theirs,
        resource_policy=document,
    )
    assert got == [ALLOWED, DENIED, DENIED, EXPLICITLY_DENIED, DENIED]
    anonymous = decisions([Request("s3:GetObject", logs, tls, principal="anonymous")], resource_policy=document)
    assert anonymous == [DENIED]


def test_the_log_writer_is_the_regions_documented_principal() -> None:
    """Regions opened before August 2022 name their ELB account; newer ones the log delivery service principal."""
    old = log_delivery_principal("sa-east-1")
    assert isinstance(old, iam.AccountPrincipal) and old.account_id == "507241528517"
    new = log_delivery_principal("ap-southeast-5")
    assert isinstance(new, iam.ServicePrincipal) and new.service == LOG_DELIVERY_SERVICE


def test_no_access_logs_no_bucket(tmp_path: Path) -> None:
    synth = synthesize(settings_for({**ENDPOINT, "SERVE_ACCESS_LOGS": "off"}), tmp_path)
    assert not synth.resources("serving", "AWS::S3::Bucket")
    assert not synth.resources("serving", "Custom::S3AutoDeleteObjects")
    (ingress,) = _objects(synth, "Ingress")
    # Off said explicitly: the controller only changes the attributes the annotation names
    # (defaultLoadBalancerAttributeReconciler diffs desired against current), so dropping the key would leave logs on.
    attributes = dict(a.split("=") for a in ingress["metadata"]["annotations"][ATTRIBUTES].split(","))
    assert attributes["access_logs.s3.enabled"] == "false"
    assert not {"access_logs.s3.bucket", "access_logs.s3.prefix"} & set(attributes)


# --- the controller's role: listeners, rules and security-group rules -------------------------------------------


def test_the_controller_changes_listeners_and_rules_of_its_own_load_balancer_only(endpoint_synth: Synth) -> None:
    document = _controller_policy(endpoint_synth)
    arn = "arn:aws:elasticloadbalancing:sa-east-1:123456789012"
    ours = load_balancer_name(endpoint_synth.settings)
    lb = f"{arn}:loadbalancer/app/{ours}/0123456789abcdef"
    other = f"{arn}:loadbalancer/app/k8s-other-0a1b2c3d4e/0123456789abcdef"
    listener = f"{arn}:listener/app/{ours}/0123456789abcdef/fedcba9876543210"
    rule = f"{arn}:listener-rule/app/{ours}/0123/4567/89ab"
    elsewhere = listener.replace(ours, "k8s-other-0a1b2c3d4e")
    actions = [
        ("elasticloadbalancing:CreateListener", lb, other),
        ("elasticloadbalancing:DeleteListener", listener, elsewhere),
        ("elasticloadbalancing:ModifyListener", listener, elsewhere),
        ("elasticloadbalancing:AddListenerCertificates", listener, elsewhere),
        ("elasticloadbalancing:CreateRule", listener, elsewhere),
        ("elasticloadbalancing:ModifyRule", rule, rule.replace(ours, "other")),
        ("elasticloadbalancing:DeleteRule", rule, rule.replace(ours, "other")),
        ("elasticloadbalancing:SetRulePriorities", rule, rule.replace(ours, "other")),
    ]
    requests = [Request(action, resource) for action, own, foreign in actions for resource in (own, foreign)]
    assert decisions(requests, identity_policy=document) == [ALLOWED, DENIED] * len(actions)
    # Tags: on its own listeners and rules without a condition (as published for every listener), on load balancers
    # only with this cluster's tag (it cannot drop the tag that scopes it). Read from the document: the simulator
    # finds no resource type for AddTags/RemoveTags on these ARNs ("no.resource.types").
    unconditioned = {
        r
        for st in document["Statement"]
        if "Condition" not in st and "elasticloadbalancing:RemoveTags" in st["Action"]
        for r in ([st["Resource"]] if isinstance(st["Resource"], str) else st["Resource"])
    }
    assert unconditioned == {f"{arn}:listener/app/{ours}/*", f"{arn}:listener-rule/app/{ours}/*"}
    # The WAF association's ELB permission is gone with WAF.
    assert decisions([Request("elasticloadbalancing:SetWebAcl", "*")], identity_policy=document) == [DENIED]


def test_the_controller_adds_security_group_rules_in_this_vpc_only(endpoint_synth: Synth) -> None:
    document = _controller_policy(endpoint_synth)
    (vpc_id,) = endpoint_synth.resources("network", "AWS::EC2::VPC")  # what the Resolver makes of the VPC's Ref
    nodes = "arn:aws:ec2:sa-east-1:123456789012:security-group/sg-0123456789abcdef0"
    here = {"ec2:Vpc": f"arn:aws:ec2:sa-east-1:123456789012:vpc/{vpc_id}"}
    there = {"ec2:Vpc": "arn:aws:ec2:sa-east-1:123456789012:vpc/vpc-other"}
    actions = ("ec2:AuthorizeSecurityGroupIngress", "ec2:RevokeSecurityGroupIngress")
    requests = [Request(action, nodes, vpc) for action in actions for vpc in (here, there)]
    assert decisions(requests, identity_policy=document) == [ALLOWED, DENIED, ALLOWED, DENIED]
    # Its own (tagged) groups still as published; one of another cluster in another VPC not.
    tagged = {"aws:ResourceTag/elbv2.k8s.aws/cluster": "ray-llm-multinode", **there}
    assert decisions([Request(actions[0], nodes, tagged)], identity_policy=document) == [ALLOWED]
    other = {"aws:ResourceTag/elbv2.k8s.aws/cluster": "prod", **there}
    assert decisions([Request("ec2:RevokeSecurityGroupIngress", nodes, other)], identity_policy=document) == [DENIED]


def test_the_policy_document_is_plain_json(endpoint_synth: Synth) -> None:
    """No unresolved intrinsic left in the narrowed statements (the simulator would read them as literal text)."""
    assert "Fn::" not in json.dumps(_controller_policy(endpoint_synth))


def test_checkov_skips_of_the_exposed_endpoint_are_few_and_give_reasons(endpoint_synth: Synth) -> None:
    """Beyond aws-cdk-lib's Lambdas (tests/test_security.py): the log bucket's own logging and versioning, the keys'
    AWS managed key, and the controller's published create actions; `make checkov` runs the checks themselves."""
    skipped: dict[str, list[str]] = {}
    for part in ("system", "serving"):
        for resource in endpoint_synth.templates[part]["Resources"].values():
            skips = resource.get("Metadata", {}).get("checkov", {}).get("skip", [])
            assert all(len(s["comment"]) > 40 for s in skips)
            if skips and resource["Type"] != "AWS::Lambda::Function":
                skipped[resource["Type"]] = sorted(s["id"] for s in skips)
    assert skipped == {
        "AWS::S3::Bucket": ["CKV_AWS_18", "CKV_AWS_21"],
        "AWS::SecretsManager::Secret": ["CKV_AWS_149"],
        "AWS::IAM::Policy": ["CKV_AWS_111"],
    }
