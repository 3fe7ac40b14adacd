"""GCS_FAULT_TOLERANCE=redis, synthesized: an encrypted ElastiCache store reachable only from the nodes, its token in
Secrets Manager and nowhere else, the head reading it with its own Pod Identity, and the RayCluster's options in
the form KubeRay 1.7 and Ray 2.58 take (tests/test_gcs_fault_tolerance.py runs that form on a real Ray and Redis)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from k8s_constructs import gcs_ft
from k8s_constructs.endpoint import AUTH_MODULE_VOLUME
from k8s_constructs.serve_config import INGRESS_MODULE_DIR
from tests.conftest import Synth
from tests.iam_documents import Resolver
from tests.iam_simulator import Request, decisions
from tests.test_serving import deployed_manifest
from tests.validators import crd_errors, kuberay_cluster_errors

ALLOWED, DENIED = "Allowed", "ImplicitlyDenied"


def _objects(synth: Synth) -> list[dict[str, Any]]:
    return deployed_manifest(synth)


def _rayservice(synth: Synth) -> dict[str, Any]:
    (rs,) = [o for o in _objects(synth) if o["kind"] == "RayService"]
    return rs


def test_the_store_is_encrypted_replicated_and_reachable_only_from_the_nodes(gcs_synth: Synth) -> None:
    (group,) = gcs_synth.resources("system", "AWS::ElastiCache::ReplicationGroup").values()
    props = group["Properties"]
    assert (props["Engine"], props["EngineVersion"], props["CacheNodeType"]) == ("valkey", "8.1", "cache.t4g.micro")
    assert (
        props["AtRestEncryptionEnabled"]
        and props["TransitEncryptionEnabled"]
        and props["TransitEncryptionMode"] == "required"
    )
    assert props["NumCacheClusters"] == 2 and props["MultiAZEnabled"] and props["AutomaticFailoverEnabled"]
    assert group["DeletionPolicy"] == "Delete" and props["SnapshotRetentionLimit"] == 0
    # The token: a dynamic reference to the generated secret, resolved by CloudFormation, never a value.
    token = json.dumps(props["AuthToken"])
    assert "{{resolve:secretsmanager:" in token
    (secret,) = gcs_synth.resources("system", "AWS::SecretsManager::Secret").values()
    assert (
        "SecretString" not in secret["Properties"]
        and secret["Properties"]["GenerateSecretString"]["PasswordLength"] == 64
    )
    (subnets,) = gcs_synth.resources("system", "AWS::ElastiCache::SubnetGroup").values()
    assert len(subnets["Properties"]["SubnetIds"]) == len(gcs_synth.settings.availability_zones)
    # Its security group: the port from the cluster security group (every node carries it), no egress.
    (sg_id,) = [sg["Fn::GetAtt"][0] for sg in props["SecurityGroupIds"]]
    sg = gcs_synth.templates["system"]["Resources"][sg_id]["Properties"]
    (ingress,) = sg["SecurityGroupIngress"]
    assert (ingress["FromPort"], ingress["ToPort"], ingress["IpProtocol"]) == (
        6379,
        6379,
        "tcp",
    ) and "SourceSecurityGroupId" in ingress
    assert (
        "CidrIp" not in ingress and sg["SecurityGroupEgress"][0]["CidrIp"] == "255.255.255.255/32"
    )  # CDK's "no egress" rule


def test_no_literal_secret_in_any_template_or_manifest(gcs_synth: Synth) -> None:
    texts = [p.read_text() for p in Path(gcs_synth.outdir).glob("*.template.json")]
    for text in texts:
        template = json.loads(text)
        for resource in template["Resources"].values():
            props = resource.get("Properties", {})
            assert "SecretString" not in props, resource
            assert "AuthToken" not in props or "{{resolve:secretsmanager:" in json.dumps(props["AuthToken"])
    for obj in _objects(gcs_synth):
        assert obj["kind"] != "Secret"
        if obj["kind"] == "RayService":
            password = obj["spec"]["rayClusterConfig"]["gcsFaultToleranceOptions"]["redisPassword"]
            assert "value" not in password and password["valueFrom"] == {
                "secretKeyRef": {"name": "gcs-store", "key": "password"}
            }


def test_the_raycluster_takes_the_store_as_kuberay_and_ray_do(gcs_synth: Synth) -> None:
    rs = _rayservice(gcs_synth)
    assert crd_errors(rs) == []
    cluster = rs["spec"]["rayClusterConfig"]
    assert kuberay_cluster_errors(cluster) == []
    address = cluster["gcsFaultToleranceOptions"]["redisAddress"]
    assert address.startswith("rediss://") and address.endswith(":6379")
    head = cluster["headGroupSpec"]["template"]["spec"]
    assert head["serviceAccountName"] == "ray-llm-head"
    (container,) = head["containers"]
    assert {"name": "RAY_REDIS_CA_CERT", "value": f"{gcs_ft.CA_MOUNT}/amazon-root-cas.pem"} in container["env"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    # Beside the ingress modules, which every Ray pod mounts.
    assert mounts == {
        "gcs-store-ca": gcs_ft.CA_MOUNT,
        "gcs-store-secret": gcs_ft.SECRET_MOUNT,
        AUTH_MODULE_VOLUME: INGRESS_MODULE_DIR,
    }
    volumes = {v["name"]: v for v in head["volumes"]}
    assert volumes["gcs-store-secret"]["csi"]["volumeAttributes"] == {"secretProviderClass": "gcs-store"}
    assert volumes["gcs-store-ca"]["configMap"] == {"name": "gcs-store-ca"}


def test_the_head_objects_outlive_the_rayservice_for_kuberays_cleanup_job(gcs_synth: Synth) -> None:
    manifests = {k: v for k, v in gcs_synth.resources("serving", "Custom::AWSCDK-EKS-KubernetesResource").items()}
    resolver = Resolver(gcs_synth.templates, gcs_synth.settings.region)
    namespace = [
        json.loads(resolver.resolve(v["Properties"]["Manifest"], "serving"))
        for k, v in manifests.items()
        if k.startswith("Namespace")
    ]
    assert namespace, manifests.keys()
    kinds = {(o["kind"], o["metadata"]["name"]) for o in namespace[0]}
    assert {
        ("ServiceAccount", "ray-llm-head"),
        ("SecretProviderClass", "gcs-store"),
        ("ConfigMap", "gcs-store-ca"),
    } <= kinds
    for obj in namespace[0]:
        if obj["kind"] in ("ServiceAccount", "ConfigMap"):
            kubernetes_validate.validate(obj, "1.35", strict=True)
    (ca,) = [o for o in namespace[0] if o["kind"] == "ConfigMap"]
    assert ca["data"]["amazon-root-cas.pem"].count("BEGIN CERTIFICATE") == 4


def test_the_heads_identity_reads_the_stores_token_and_nothing_else(gcs_synth: Synth) -> None:
    (association,) = [
        a
        for a in gcs_synth.resources("serving", "AWS::EKS::PodIdentityAssociation").values()
        if a["Properties"]["ServiceAccount"] == "ray-llm-head"
    ]
    role_id = association["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    resources = gcs_synth.templates["serving"]["Resources"]
    (policy,) = [
        v
        for v in resources.values()
        if v["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in v["Properties"]["Roles"]
    ]
    document = Resolver(gcs_synth.templates, gcs_synth.settings.region).resolve(
        policy["Properties"]["PolicyDocument"], "serving"
    )
    token = json.dumps(document).split("arn:aws:secretsmanager:")[1].split('"')[0]
    token_arn = f"arn:aws:secretsmanager:{token}"
    got = decisions(
        [
            Request("secretsmanager:GetSecretValue", token_arn),
            Request(
                "secretsmanager:GetSecretValue",
                "arn:aws:secretsmanager:sa-east-1:123456789012:secret:prod/hf-token-AbCdEf",
            ),
            Request("secretsmanager:PutSecretValue", token_arn),
            Request(
                "elasticache:ModifyReplicationGroup", "arn:aws:elasticache:sa-east-1:123456789012:replicationgroup:x"
            ),
        ],
        identity_policy=document,
    )
    assert got == [ALLOWED, DENIED, DENIED, DENIED]
    # The Secrets Store CSI provider comes with the store too (it mounts the token on the head's node).
    charts = {r["Properties"]["Chart"] for r in gcs_synth.resources("serving", "Custom::AWSCDK-EKS-HelmChart").values()}
    assert "secrets-store-csi-driver-provider-aws" in charts


def test_the_default_synth_has_none_of_it(default_synth: Synth) -> None:
    assert not default_synth.resources("system", "AWS::ElastiCache::ReplicationGroup")
    assert not default_synth.resources("system", "AWS::SecretsManager::Secret")
    cluster = _rayservice(default_synth)["spec"]["rayClusterConfig"]
    assert (
        "gcsFaultToleranceOptions" not in cluster
        and "serviceAccountName" not in cluster["headGroupSpec"]["template"]["spec"]
    )


@pytest.mark.parametrize("value", ["cache.t4g", "t4g.micro", "cache.T4G.micro"])
def test_a_bad_store_type_is_one_line(value: str) -> None:
    from settings import SettingError
    from tests.conftest import settings_for

    with pytest.raises(
        SettingError, match=r"GCS_STORE_NODE_TYPE=.* is not allowed: an ElastiCache node type, cache\.FAMILY\.SIZE"
    ):
        settings_for({"GCS_FAULT_TOLERANCE": "redis", "GCS_STORE_NODE_TYPE": value})


# --- the preflight (botocore's Stubber: moto 5.2.5 has neither ElastiCache call) --------------------------------------


def _stubbed(offerings: list[dict[str, Any]], versions: list[dict[str, Any]]) -> Any:
    import boto3
    from botocore.stub import Stubber

    client = boto3.client("elasticache", region_name="sa-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_response(
        "describe_reserved_cache_nodes_offerings",
        {"ReservedCacheNodesOfferings": offerings},
        {"CacheNodeType": "cache.t4g.micro", "MaxRecords": 20},
    )
    stub.add_response(
        "describe_cache_engine_versions",
        {"CacheEngineVersions": versions},
        {"Engine": "valkey", "EngineVersion": "8.1"},
    )
    stub.activate()
    return client


def test_the_preflight_wants_the_store_type_and_version_offered_in_the_region() -> None:
    from preflight.gcs_store_checks import check_gcs_store

    offering = [{"ReservedCacheNodesOfferingId": "x", "CacheNodeType": "cache.t4g.micro"}]
    version = [{"Engine": "valkey", "EngineVersion": "8.1"}]
    args = {"node_type": "cache.t4g.micro", "engine": "valkey", "engine_version": "8.1", "region": "sa-east-1"}
    assert check_gcs_store(_stubbed(offering, version), **args).ok
    missing_type = check_gcs_store(_stubbed([], version), **args)
    assert (
        not missing_type.ok
        and "offers no cache.t4g.micro in sa-east-1" in missing_type.detail
        and "GCS_STORE_NODE_TYPE" in missing_type.fix
    )
    missing_version = check_gcs_store(_stubbed(offering, []), **args)
    assert not missing_version.ok and "no valkey 8.1" in missing_version.detail
    assert check_gcs_store(
        None, node_type="", engine="valkey", engine_version="8.1", region="sa-east-1"
    ).ok  # off: nothing asked


# --- system nodes that can lose one (SYSTEM_NODE_COUNT >= 2) ----------------------------------------------------------


def test_two_system_nodes_spread_coredns_and_the_operator_over_azs() -> None:
    from tests.day2_helpers import synth

    settings, templates = synth(SYSTEM_NODE_COUNT="2")
    system = templates["system"]["Resources"]
    (nodegroup,) = [r for r in system.values() if r["Type"] == "AWS::EKS::Nodegroup"]
    assert nodegroup["Properties"]["ScalingConfig"]["MinSize"] == 2 and len(nodegroup["Properties"]["Subnets"]) == len(
        settings.availability_zones
    )
    (coredns,) = [
        r for r in system.values() if r["Type"] == "AWS::EKS::Addon" and r["Properties"]["AddonName"] == "coredns"
    ]
    affinity = json.loads(coredns["Properties"]["ConfigurationValues"])["affinity"]
    zone_terms = [
        t
        for t in affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        if t["podAffinityTerm"]["topologyKey"] == "topology.kubernetes.io/zone"
    ]
    assert zone_terms and zone_terms[0]["podAffinityTerm"]["labelSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    (operator,) = [
        r
        for r in system.values()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"]["Chart"] == "kuberay-operator"
    ]
    values = json.loads(operator["Properties"]["Values"])
    assert values["replicas"] == 2 and "podAntiAffinity" in values["affinity"]
    (budget,) = [
        json.loads(r["Properties"]["Manifest"])
        for k, r in system.items()
        if k.startswith("KubeRayOperatorDisruptionBudget") and "Manifest" in r["Properties"]
    ]
    kubernetes_validate.validate(budget[0], "1.35", strict=True)
    assert budget[0]["spec"] == {
        "minAvailable": 1,
        "selector": {"matchLabels": {"app.kubernetes.io/name": "kuberay-operator"}},
    }
    # One system node: as before (the add-on's defaults, one operator, no budget that would block a drain).
    _, one = synth()
    assert not [k for k in one["system"]["Resources"] if k.startswith("KubeRayOperatorDisruptionBudget")]


# --- make verify ---------------------------------------------------------------------------------------------------


def test_verify_wants_kuberays_ft_annotation_and_the_gcs_on_the_store() -> None:
    from tests.conftest import settings_for
    from tools.verify_steps import check_gcs_store

    settings = settings_for({"GCS_FAULT_TOLERANCE": "redis"})
    head = {"metadata": {"name": "ray-llm-head-x", "annotations": {"ray.io/ft-enabled": "true"}}}
    # The line Ray 2.58's GCS logs at start, as the local failover test's head wrote it.
    persist = (
        "[2026-12-01 12:24:51,560 I 3884 3884] (gcs_server) gcs_server.cc:179: GCS storage type is"
        " StorageType::REDIS_PERSIST"
    )
    memory = persist.replace("REDIS_PERSIST", "IN_MEMORY")
    assert check_gcs_store(settings, head, persist).ok
    assert not check_gcs_store(settings, head, memory).ok
    assert not check_gcs_store(settings, {"metadata": {"annotations": {"ray.io/ft-enabled": "false"}}}, persist).ok
    missing = check_gcs_store(settings, None, "")
    assert not missing.ok and "kubectl logs" in missing.look_closer


def test_the_fault_tolerance_page_states_kuberays_reconnect_timeout_and_its_redis_username() -> None:
    """docs/fault-tolerance.md against KubeRay 1.7: with gcsFaultToleranceOptions the workers wait 600 s for the GCS
    (pod.go; the constant is declared once in gcs_ft), not Ray's 60 s; and KubeRay's CRD has redisUsername, so a user
    name is not the reason against ElastiCache Serverless."""
    from tests.conftest import REPO

    text = (REPO / "docs" / "fault-tolerance.md").read_text()
    assert f"{gcs_ft.KUBERAY_WORKER_RECONNECT_TIMEOUT_S} s" in text and "reconnect within 60 s" not in text
    assert "60 s reconnect timeout they exit" not in text
    crd = (REPO / "schemas" / "kuberay" / "ray.io_rayservices.yaml").read_text()
    assert "redisUsername:" in crd and "redisUsername" in text and "one password" not in text
