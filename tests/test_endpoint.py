"""The endpoint beyond the cluster (SERVE_EXPOSURE=internal with a certificate and a hosted zone, tests/conftest.py
ENDPOINT): the load balancer controller and its scoped role (evaluated by the IAM simulator), the Ingress (scheme,
listener, TLS policy, sources, timeouts, health check, subnets), the API keys (a secret generated at deploy, mounted
by the CSI driver on every Ray pod, the auth ingress in the serve config), the NetworkPolicy of the load balancer, and
objects that strict Kubernetes validation, KubeRay's CRD and Ray's own schemas accept."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from k8s_constructs.endpoint import HEALTH_PATH, KEYS_FILE, TLS_POLICY, module_config_map
from k8s_constructs.serve_config import (
    API_KEYS_DIR,
    AUTH_INGRESS_CLASS,
    AUTH_MODULE_DIR,
    GUARD_INGRESS_CLASS,
    INGRESS_MODULE_FILES,
    graceful_shutdown_timeout_s,
)
from settings.endpoint import idle_timeout_s
from stacks.addons import aws_load_balancer_controller as lbc
from tests.conftest import CERTIFICATE_ARN, ENDPOINT, Synth, settings_for
from tests.iam_documents import Resolver
from tests.iam_simulator import Request, decisions
from tests.test_serving import deployed_manifest
from tests.validators import crd_errors, ray_serve_errors

ALLOWED, DENIED = "Allowed", "ImplicitlyDenied"


def _objects(synth: Synth, kind: str) -> list[dict[str, Any]]:
    return [o for o in deployed_manifest(synth) if o["kind"] == kind]


def _application(synth: Synth) -> dict[str, Any]:
    (service,) = _objects(synth, "RayService")
    application: dict[str, Any] = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"][0]
    return application


def test_the_controller_is_installed_with_its_pinned_chart_on_the_system_nodes(
    endpoint_synth: Synth, default_synth: Synth
) -> None:
    releases = {
        r["Properties"]["Release"]: r["Properties"]
        for r in endpoint_synth.resources("system", "Custom::AWSCDK-EKS-HelmChart").values()
    }
    props = releases["aws-load-balancer-controller"]
    assert (props["Chart"], props["Version"], props["Repository"]) == (
        "aws-load-balancer-controller",
        "3.5.0",
        "https://aws.github.io/eks-charts",
    )
    resolved = json.loads(Resolver(endpoint_synth.templates, "sa-east-1").resolve(props["Values"], "system"))
    assert resolved["vpcId"] != lbc.deploy_values.__name__ and resolved["vpcId"]  # the network stack's VPC, imported
    assert resolved["image"] == {
        "repository": "602401143452.dkr.ecr.sa-east-1.amazonaws.com/amazon/aws-load-balancer-controller",
        "tag": "v3.5.0",
    }
    assert resolved["nodeSelector"] == {"role": "system"} and resolved["enableServiceMutatorWebhook"] is False
    # Only the serving namespace's Ingress gets a load balancer; no WAF or Shield.
    assert resolved["watchNamespace"] == "inference"
    assert (resolved["enableWaf"], resolved["enableWafv2"], resolved["enableShield"]) == (False, False, False)
    assert "aws-load-balancer-controller" not in {
        r["Properties"]["Release"] for r in default_synth.resources("system", "Custom::AWSCDK-EKS-HelmChart").values()
    }


def _controller_policy(synth: Synth) -> dict[str, Any]:
    resources = synth.templates["system"]["Resources"]
    (association,) = [
        a
        for a in synth.resources("system", "AWS::EKS::PodIdentityAssociation").values()
        if a["Properties"]["ServiceAccount"] == lbc.SERVICE_ACCOUNT
    ]
    role_id = association["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    (policy,) = [
        v
        for v in resources.values()
        if v["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in v["Properties"]["Roles"]
    ]
    document: dict[str, Any] = Resolver(synth.templates, synth.settings.region).resolve(
        policy["Properties"]["PolicyDocument"], "system"
    )
    return document


def test_the_controllers_role_is_its_published_policy_narrowed_to_this_cluster(endpoint_synth: Synth) -> None:
    """Evaluated by the IAM simulator: it changes and deletes only load balancers, target groups and security groups
    tagged with this cluster and creates them only so tagged; the ARNs the published policy spells out are this
    Region's and account's (its `*` resources stay `*`, limited by the tag)."""
    document = _controller_policy(endpoint_synth)
    published = json.loads(lbc.PUBLISHED_POLICY.read_text())
    # The published actions but WAF's and Shield's (the chart values turn them off; the role cannot touch a web ACL).
    assert sorted(
        a for s in document["Statement"] for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    ) == sorted(
        a
        for s in published["Statement"]
        for a in s["Action"]
        if a.split(":")[0] not in ("shield", "wafv2", "waf-regional") and a != "elasticloadbalancing:SetWebAcl"
    )
    assert any(a.startswith("wafv2:") for s in published["Statement"] for a in s["Action"])
    ours, theirs = (
        {"aws:ResourceTag/elbv2.k8s.aws/cluster": "ray-llm-multinode"},
        {"aws:ResourceTag/elbv2.k8s.aws/cluster": "prod"},
    )
    lb = (
        "arn:aws:elasticloadbalancing:sa-east-1:123456789012:loadbalancer/app/"
        "k8s-inferenc-rayllmse-0a1b2c3d4e/0123456789abcdef"
    )
    sg = "arn:aws:ec2:sa-east-1:123456789012:security-group/sg-0123456789abcdef0"
    # Another application's target group (tagged for another cluster, or not at all): no targets in or out of it.
    target_group = "arn:aws:elasticloadbalancing:sa-east-1:123456789012:targetgroup/k8s-other-app/0123456789abcdef"
    sg_elsewhere = sg.replace("sa-east-1", "us-east-1")
    create_tags = {"aws:RequestTag/elbv2.k8s.aws/cluster": "ray-llm-multinode"}
    tag_new_group = {**create_tags, "ec2:CreateAction": "CreateSecurityGroup"}
    got = decisions(
        [
            Request("elasticloadbalancing:DeleteLoadBalancer", lb, ours),
            Request("elasticloadbalancing:DeleteLoadBalancer", lb, theirs),
            Request("elasticloadbalancing:DeleteLoadBalancer", lb, {}),
            Request("ec2:CreateTags", sg, tag_new_group),
            Request("ec2:CreateTags", sg_elsewhere, tag_new_group),
            Request("ec2:DeleteSecurityGroup", sg, ours),
            Request("ec2:DeleteSecurityGroup", sg, theirs),
            Request("elasticloadbalancing:CreateLoadBalancer", lb, create_tags),
            Request("elasticloadbalancing:CreateLoadBalancer", lb, {"aws:RequestTag/elbv2.k8s.aws/cluster": "prod"}),
            Request("ec2:DescribeSubnets", "*"),
            Request("elasticloadbalancing:RegisterTargets", target_group, ours),
            Request("elasticloadbalancing:RegisterTargets", target_group, theirs),
            Request("elasticloadbalancing:DeregisterTargets", target_group, theirs),
            Request("elasticloadbalancing:DeregisterTargets", target_group, {}),
            Request("ec2:TerminateInstances", "arn:aws:ec2:sa-east-1:123456789012:instance/i-1"),
            Request("wafv2:AssociateWebACL", lb),
            Request("shield:DeleteProtection", "arn:aws:shield::123456789012:protection/p-1"),
        ],
        identity_policy=document,
    )
    assert got == [
        ALLOWED,
        DENIED,
        DENIED,
        ALLOWED,
        DENIED,
        ALLOWED,
        DENIED,
        ALLOWED,
        DENIED,
        ALLOWED,
        ALLOWED,
        DENIED,
        DENIED,
        DENIED,
        DENIED,
        DENIED,
        DENIED,
    ]


def test_the_ingress_is_an_https_only_load_balancer_for_the_allowed_sources(endpoint_synth: Synth) -> None:
    (ingress,) = _objects(endpoint_synth, "Ingress")
    annotations = ingress["metadata"]["annotations"]
    settings = endpoint_synth.settings
    assert annotations["alb.ingress.kubernetes.io/scheme"] == "internal"
    assert annotations["alb.ingress.kubernetes.io/target-type"] == "ip"
    assert json.loads(annotations["alb.ingress.kubernetes.io/listen-ports"]) == [
        {"HTTPS": 443}
    ]  # no plain HTTP listener
    assert annotations["alb.ingress.kubernetes.io/certificate-arn"] == CERTIFICATE_ARN
    assert annotations["alb.ingress.kubernetes.io/ssl-policy"] == TLS_POLICY
    assert annotations["alb.ingress.kubernetes.io/inbound-cidrs"] == settings.vpc_cidr  # internal's default: the VPC
    assert annotations["alb.ingress.kubernetes.io/healthcheck-path"] == HEALTH_PATH == "/-/healthz"
    # Named, so that the controller's listener and rule changes are limited to it: the cluster and a digest.
    assert annotations["alb.ingress.kubernetes.io/load-balancer-name"] == "ray-llm-multinode-142296d0"
    attributes = dict(
        a.split("=") for a in annotations["alb.ingress.kubernetes.io/load-balancer-attributes"].split(",")
    )
    # MAX_MODEL_LEN 4096 tokens at the slowest decode (80 ms a token: 328 s, Serve's drain of decode and the ingress),
    # plus a minute of queueing: a non-streaming answer sends nothing until its end.
    assert (
        attributes["idle_timeout.timeout_seconds"]
        == str(idle_timeout_s(4096))
        == str(graceful_shutdown_timeout_s(4096) + 60)
        == "388"
    )
    assert (
        annotations["alb.ingress.kubernetes.io/target-group-attributes"] == "deregistration_delay.timeout_seconds=388"
    )
    # The public subnets, whatever the scheme (the network stack's, imported).
    subnets = annotations["alb.ingress.kubernetes.io/subnets"].split(",")
    network = endpoint_synth.templates["network"]["Resources"]
    public = sorted(
        k
        for k, r in network.items()
        if r["Type"] == "AWS::EC2::Subnet" and r["Properties"]["MapPublicIpOnLaunch"] is False and "public" in k
    )
    assert sorted(subnets) == public
    (rule,) = ingress["spec"]["rules"]
    assert ingress["spec"]["ingressClassName"] == "alb" and rule["host"] == "llm.example.com"
    # Only the API leaves the cluster (every other path: the controller's fixed 404); with keys, /v1 reaches the
    # Serve Service only with a bearer token, and without one the load balancer answers 401 itself (in this order: the
    # controller gives the rules the paths' order).
    assert rule["http"]["paths"] == [
        {
            "path": "/v1",
            "pathType": "Prefix",
            "backend": {"service": {"name": settings.serve_service_name, "port": {"number": 8000}}},
        },
        {
            "path": "/v1",
            "pathType": "Prefix",
            "backend": {"service": {"name": "missing-api-key", "port": {"name": "use-annotation"}}},
        },
    ]
    assert json.loads(annotations[f"alb.ingress.kubernetes.io/conditions.{settings.serve_service_name}"]) == [
        {"field": "http-header", "httpHeaderConfig": {"httpHeaderName": "Authorization", "values": ["Bearer *"]}}
    ]
    action = json.loads(annotations["alb.ingress.kubernetes.io/actions.missing-api-key"])
    assert action["type"] == "fixed-response" and action["fixedResponseConfig"]["statusCode"] == "401"
    assert json.loads(action["fixedResponseConfig"]["messageBody"])["error"]["code"] == "invalid_api_key"
    # ALB's limit on a fixed response's body: 1024 characters.
    assert len(action["fixedResponseConfig"]["messageBody"]) <= 1024


def test_internet_facing_and_plain_http_internal_listeners() -> None:
    from k8s_constructs.endpoint import ingress_annotations

    public = settings_for(
        {**ENDPOINT, "SERVE_EXPOSURE": "internet-facing", "SERVE_ALLOWED_CIDRS": "203.0.113.0/24,198.51.100.7/32"}
    )
    annotations = ingress_annotations(public, ("subnet-a", "subnet-b"))
    assert annotations["alb.ingress.kubernetes.io/scheme"] == "internet-facing"
    assert annotations["alb.ingress.kubernetes.io/inbound-cidrs"] == "203.0.113.0/24,198.51.100.7/32"
    plain = settings_for({"SERVE_EXPOSURE": "internal", "SERVE_CERTIFICATE_ARN": "none"})
    annotations = ingress_annotations(plain, ("subnet-a", "subnet-b"))
    assert json.loads(annotations["alb.ingress.kubernetes.io/listen-ports"]) == [{"HTTP": 80}]
    assert "alb.ingress.kubernetes.io/certificate-arn" not in annotations and plain.serve_endpoint.api_keys


def test_the_public_subnets_the_network_policy_names_are_the_network_stacks(endpoint_synth: Synth) -> None:
    from settings.addressing import public_subnet_cidrs

    settings = endpoint_synth.settings
    network = endpoint_synth.templates["network"]["Resources"]
    public = [
        r["Properties"]["CidrBlock"] for k, r in network.items() if r["Type"] == "AWS::EC2::Subnet" and "public" in k
    ]
    private = [
        r["Properties"]["CidrBlock"] for k, r in network.items() if r["Type"] == "AWS::EC2::Subnet" and "private" in k
    ]
    expected = public_subnet_cidrs(settings.vpc_cidr, len(settings.availability_zones))
    assert sorted(public) == sorted(expected)
    assert not any(
        ipaddress.ip_network(p).overlaps(ipaddress.ip_network(q)) for p in expected for q in private
    )  # no pod there
    (policy,) = [
        p for p in _objects(endpoint_synth, "NetworkPolicy") if p["metadata"]["name"] == "load-balancer-to-serve"
    ]
    assert policy["spec"]["ingress"] == [
        {"from": [{"ipBlock": {"cidr": c}}], "ports": [{"port": 8000, "protocol": "TCP"}]} for c in expected
    ]


def test_the_api_keys_come_from_a_secret_generated_at_deploy_and_mounted_on_every_ray_pod(
    endpoint_synth: Synth,
) -> None:
    (secret,) = endpoint_synth.resources("serving", "AWS::SecretsManager::Secret").values()
    generator = secret["Properties"]["GenerateSecretString"]
    assert (generator["SecretStringTemplate"], generator["GenerateStringKey"], generator["PasswordLength"]) == (
        "{}",
        "default",
        48,
    )
    assert "SecretString" not in secret["Properties"]
    (provider,) = _objects(endpoint_synth, "SecretProviderClass")
    (entry,) = yaml.safe_load(provider["spec"]["parameters"]["objects"])
    assert entry["objectAlias"] == KEYS_FILE and entry["objectName"].startswith(
        "arn:aws:secretsmanager:sa-east-1:123456789012:secret:ApiKeys"
    )
    assert provider["spec"]["parameters"]["usePodIdentity"] == "true" and "secretObjects" not in provider["spec"]
    (module,) = _objects(endpoint_synth, "ConfigMap")
    assert module["data"] == {m.name: m.read_text() for m in INGRESS_MODULE_FILES}
    (service,) = _objects(endpoint_synth, "RayService")
    cluster = service["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]["template"]["spec"], *(g["template"]["spec"] for g in cluster["workerGroupSpecs"])]
    for pod in pods:
        mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert {AUTH_MODULE_DIR, API_KEYS_DIR} <= mounts
        assert pod["serviceAccountName"] in ("ray-llm-head", "ray-llm-worker")
    # Both service accounts' roles may read the secret (and the head's nothing else).
    associations = {
        a["Properties"]["ServiceAccount"]
        for a in endpoint_synth.resources("serving", "AWS::EKS::PodIdentityAssociation").values()
    }
    assert associations == {"ray-llm-head", "ray-llm-worker"}


def test_the_serve_config_names_the_auth_ingress_with_two_replicas_that_reserve_no_cpu(endpoint_synth: Synth) -> None:
    application = _application(endpoint_synth)
    args = application["args"]
    assert args["ingress_cls_config"] == {
        "ingress_cls": AUTH_INGRESS_CLASS,
        "ingress_extra_kwargs": {"api_keys_dir": API_KEYS_DIR},
    }
    # Two CPU-free replicas, draining their streams as decode does (graceful_shutdown_timeout_s).
    drain = graceful_shutdown_timeout_s(endpoint_synth.settings.max_model_len)
    assert args["ingress_deployment_config"] == {
        "num_replicas": 2,
        "ray_actor_options": {"num_cpus": 0},
        "graceful_shutdown_timeout_s": drain,
    }
    assert application["runtime_env"] == {"env_vars": {"PYTHONPATH": f"{AUTH_MODULE_DIR}:${{PYTHONPATH}}"}}
    (service,) = _objects(endpoint_synth, "RayService")
    assert ray_serve_errors(yaml.safe_load(service["spec"]["serveConfigV2"])) == []
    assert crd_errors(service) == []


def test_the_new_objects_pass_strict_kubernetes_validation(endpoint_synth: Synth) -> None:
    version = endpoint_synth.settings.kubernetes_version
    for kind in ("Ingress", "ConfigMap", "ServiceAccount", "NetworkPolicy"):
        for obj in _objects(endpoint_synth, kind):
            kubernetes_validate.validate(obj, version, strict=True)


def test_the_default_configuration_has_none_of_it(default_synth: Synth) -> None:
    objects = deployed_manifest(default_synth)
    assert not {o["kind"] for o in objects} & {"Ingress", "SecretProviderClass"}
    # Only the ingress modules' ConfigMap: every configuration's ingress is the PD guard (tests/test_serve_pd_guard.py).
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"] == [
        module_config_map(default_synth.settings.ray_service_name)
    ]
    assert _application(default_synth)["args"]["ingress_cls_config"] == {"ingress_cls": GUARD_INGRESS_CLASS}
    assert not default_synth.resources("serving", "AWS::SecretsManager::Secret")


def test_cdk_nag_has_nothing_unacknowledged(endpoint_synth: Synth) -> None:
    assert endpoint_synth.nag_error == ""


# --- connectivity, computed by nca (network-config-analyzer, as tests/test_security.py) -------------------------------

LOAD_BALANCER_ADDRESS = "10.0.1.37/32"  # in the second AZ's public /24 (settings.addressing.public_subnet_cidrs)


def test_the_load_balancer_reaches_the_serve_port_and_nothing_else(endpoint_synth: Synth, tmp_path: Path) -> None:
    from tests.test_security import (
        DECODE,
        FORBIDS,
        HEAD,
        NODE_ADDRESS,
        OUTSIDE_ADDRESS,
        PERMITS,
        PREFILL,
        _address_flow,
        _nca,
        _world,
    )

    directory = tmp_path / "resources"
    directory.mkdir()
    (directory / "world.yaml").write_text(
        yaml.safe_dump_all(_world(deployed_manifest(endpoint_synth), endpoint_synth.settings))
    )
    ns = endpoint_synth.settings.namespace
    queries = {}
    for name, to in (("lb-to-head", HEAD), ("lb-to-prefill", PREFILL), ("lb-to-decode", DECODE)):
        queries[f"{name}-serve"] = (PERMITS, (to, LOAD_BALANCER_ADDRESS, 8000))
    for port in (8265, 6379, 8080, 10001, 20000):
        queries[f"lb-to-head-{port}"] = (FORBIDS, (HEAD, LOAD_BALANCER_ADDRESS, port))
    # A pod's or node's address (the private subnets) and one outside the VPC still do not reach the Serve port.
    for name, address in (("node-subnet", NODE_ADDRESS), ("outside", OUTSIDE_ADDRESS)):
        queries[f"{name}-to-head-serve"] = (FORBIDS, (HEAD, address, 8000))
    verdicts = _nca(
        directory, {name: (query, _address_flow(name, ns, *flow)) for name, (query, flow) in queries.items()}, tmp_path
    )
    assert len(verdicts) == 10
    for verdict in verdicts.values():
        assert verdict.holds, verdict.output


def test_with_elastic_capacity_the_ingress_reserves_no_cpu_without_keys() -> None:
    from k8s_constructs.serve_config import pd_application

    settings = settings_for({"DECODE_MAX_REPLICAS": "2"})
    (application,) = pd_application(settings).to_serve_config()["applications"]
    assert application["args"]["ingress_deployment_config"] == {
        "num_replicas": 2,
        "ray_actor_options": {"num_cpus": 0},
        "graceful_shutdown_timeout_s": graceful_shutdown_timeout_s(settings.max_model_len),
    }
    assert application["args"]["ingress_cls_config"] == {"ingress_cls": GUARD_INGRESS_CLASS}  # the PD guard, no keys
    assert ray_serve_errors({"applications": [application]}) == []
