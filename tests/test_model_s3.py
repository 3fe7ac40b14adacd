"""Weights from S3: MODEL_SOURCE=s3://BUCKET/PREFIX, the workers' read-only Pod Identity on exactly that prefix,
the mirror Job's writer role, and the VPC's S3 gateway endpoint.

What decides here is other people's code: Ray 2.58's LLMConfig, and an IAM evaluator (@cloud-copilot/iam-simulate)
on the synthesized policies. Who reads the mirror (Ray's own S3 downloader with Pod Identity's credentials, the
preflight, `make lookup`), against moto's S3: tests/test_model_s3_readers.py.
"""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam

from k8s_constructs.serve_config import pd_application
from settings import SettingError
from settings.model_source import S3Prefix
from stacks import model_access
from stacks.network_stack import s3_endpoint_statements
from tests.conftest import Synth, settings_for
from tests.iam_documents import ACCOUNT, Resolver
from tests.iam_simulator import Request, decisions
from tests.test_serving import deployed_manifest
from tests.validators import ray_serve_errors

SOURCE = "s3://example-models/qwen3.5-9b"
BUCKET, PREFIX = "example-models", "qwen3.5-9b"
ALLOWED, DENIED = "Allowed", "ImplicitlyDenied"


def _objects(synth: Synth, kind: str) -> list[dict[str, Any]]:
    return [o for o in deployed_manifest(synth) if o["kind"] == kind]


def _role_policy(synth: Synth, role_id: str) -> dict[str, Any]:
    """The role's identity policy, its intrinsics resolved to this account's ARNs."""
    resources = synth.templates["serving"]["Resources"]
    (policy,) = [
        v
        for v in resources.values()
        if v["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in v["Properties"]["Roles"]
    ]
    resolved: dict[str, Any] = Resolver(synth.templates, synth.settings.region).resolve(
        policy["Properties"]["PolicyDocument"], "serving"
    )
    return resolved


def _association(synth: Synth, service_account: str) -> dict[str, Any]:
    (association,) = [
        a
        for a in synth.resources("serving", "AWS::EKS::PodIdentityAssociation").values()
        if a["Properties"]["ServiceAccount"] == service_account
    ]
    return association


# --- the synth ------------------------------------------------------------------------------------------------


def test_both_phases_load_from_the_prefix_and_ray_accepts_it(s3_synth: Synth) -> None:
    (rs,) = _objects(s3_synth, "RayService")
    import yaml

    serve = yaml.safe_load(rs["spec"]["serveConfigV2"])
    assert ray_serve_errors(serve) == []
    from ray.llm._internal.common.utils.cloud_utils import CloudMirrorConfig
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig

    for phase in ("prefill_config", "decode_config"):
        config = serve["applications"][0]["args"][phase]
        assert config["model_loading_config"] == {"model_id": "qwen3.5-9b", "model_source": {"bucket_uri": SOURCE}}
        parsed = LLMConfig.model_validate(config)
        assert isinstance(parsed.model_loading_config.model_source, CloudMirrorConfig)
        assert parsed.model_loading_config.model_source.storage_type == "s3"


def test_the_workers_run_under_their_service_account_with_the_region(s3_synth: Synth) -> None:
    accounts = {a["metadata"]["name"]: a for a in _objects(s3_synth, "ServiceAccount")}
    assert accounts["ray-llm-worker"]["metadata"] == {"name": "ray-llm-worker", "namespace": "inference"}
    (rs,) = _objects(s3_synth, "RayService")
    cluster = rs["spec"]["rayClusterConfig"]
    for group in cluster["workerGroupSpecs"]:
        spec = group["template"]["spec"]
        assert spec["serviceAccountName"] == "ray-llm-worker" and spec["automountServiceAccountToken"] is False
        env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
        assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == s3_synth.settings.region
        assert "HF_TOKEN" not in env
    # The head runs no engine and downloads nothing: not the workers' identity (here it has the GCS store's own).
    assert cluster["headGroupSpec"]["template"]["spec"].get("serviceAccountName") != "ray-llm-worker"
    association = _association(s3_synth, "ray-llm-worker")
    assert association["Properties"]["Namespace"] == "inference"
    # No Hub token: the workers' role reads no secret (the Secrets Store provider here is the GCS store's).
    role_id = association["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    assert "secretsmanager" not in json.dumps(_role_policy(s3_synth, role_id))


def test_the_default_synth_has_the_s3_gateway_endpoint_on_every_private_route_table(default_synth: Synth) -> None:
    network = default_synth.templates["network"]["Resources"]
    (endpoint,) = default_synth.resources("network", "AWS::EC2::VPCEndpoint").values()
    props = endpoint["Properties"]
    assert props["VpcEndpointType"] == "Gateway" and props["ServiceName"] == {
        "Fn::Join": ["", ["com.amazonaws.", {"Ref": "AWS::Region"}, ".s3"]]
    }
    private_tables = {
        a["Properties"]["RouteTableId"]["Ref"]
        for a in network.values()
        if a["Type"] == "AWS::EC2::SubnetRouteTableAssociation" and "private" in a["Properties"]["SubnetId"]["Ref"]
    }
    assert len(private_tables) == len(default_synth.settings.availability_zones)
    assert {t["Ref"] for t in props["RouteTableIds"]} == private_tables
    # The default synth reads the weights from the Hub: no S3 role, no service account.
    assert not default_synth.resources("serving", "AWS::EKS::PodIdentityAssociation")


# --- the policies, evaluated -----------------------------------------------------------------------------------


def _reads(bucket: str = BUCKET, prefix: str = PREFIX) -> list[tuple[Request, str]]:
    """Requests and the decision a read-only role of exactly s3://bucket/prefix must get."""
    obj = f"arn:aws:s3:::{bucket}/{prefix}"
    return [
        (Request("s3:GetObject", f"{obj}/model-00001-of-00004.safetensors"), ALLOWED),
        (Request("s3:GetObject", f"{obj}/hash"), ALLOWED),
        (Request("s3:ListBucket", f"arn:aws:s3:::{bucket}", {"s3:prefix": f"{prefix}/"}), ALLOWED),
        # Neighbours: a prefix that only starts the same, its parent, another bucket, a listing of all.
        (Request("s3:GetObject", f"{obj}-old/config.json"), DENIED),
        (Request("s3:GetObject", f"arn:aws:s3:::{bucket}/other/config.json"), DENIED),
        (Request("s3:GetObject", f"arn:aws:s3:::{bucket}-2/{prefix}/config.json"), DENIED),
        (Request("s3:ListBucket", f"arn:aws:s3:::{bucket}", {"s3:prefix": f"{prefix}-old/"}), DENIED),
        (Request("s3:ListBucket", f"arn:aws:s3:::{bucket}", {"s3:prefix": ""}), DENIED),
        (Request("s3:ListAllMyBuckets", "*"), DENIED),
    ]


def _writes(bucket: str = BUCKET, prefix: str = PREFIX) -> list[Request]:
    obj = f"arn:aws:s3:::{bucket}/{prefix}"
    return [
        Request("s3:PutObject", f"{obj}/config.json"),
        Request("s3:DeleteObject", f"{obj}/config.json"),
        Request("s3:PutObjectAcl", f"{obj}/config.json"),
        Request("s3:PutBucketPolicy", f"arn:aws:s3:::{bucket}"),
    ]


def test_the_workers_read_exactly_the_prefix_and_write_nothing(s3_synth: Synth) -> None:
    role_id = _association(s3_synth, "ray-llm-worker")["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    policy = _role_policy(s3_synth, role_id)
    requests, expected = zip(*_reads(), strict=True)
    assert decisions(requests, identity_policy=policy) == list(expected)
    assert decisions(_writes(), identity_policy=policy) == [DENIED] * len(_writes())


def test_the_mirror_job_writes_only_the_prefix(s3_synth: Synth) -> None:
    association = _association(s3_synth, model_access.MIRROR_SERVICE_ACCOUNT)
    assert association["Properties"]["Namespace"] == "inference"
    policy = _role_policy(s3_synth, association["Properties"]["RoleArn"]["Fn::GetAtt"][0])
    obj = f"arn:aws:s3:::{BUCKET}/{PREFIX}"
    allowed = [
        Request("s3:PutObject", f"{obj}/config.json"),
        Request("s3:AbortMultipartUpload", f"{obj}/model.safetensors"),
        Request("s3:GetObject", f"{obj}/hash"),
    ]
    denied = [
        # A finished mirror is never rewritten: the Job deletes nothing, not even `hash`.
        Request("s3:DeleteObject", f"{obj}/hash"),
        Request("s3:PutObject", f"{obj}-old/config.json"),
        Request("s3:PutObject", f"arn:aws:s3:::{BUCKET}/config.json"),
        Request("s3:DeleteObject", f"{obj}/config.json"),
        Request("s3:DeleteObject", f"{obj}-old/hash"),
        Request("s3:PutObjectAcl", f"{obj}/config.json"),
    ]
    assert decisions(allowed + denied, identity_policy=policy) == [ALLOWED] * len(allowed) + [DENIED] * len(denied)


def _statements_document(statements: list[iam.PolicyStatement]) -> dict[str, Any]:
    """Statements rendered by CloudFormation's rules in a throwaway stack (account and Region of the tests)."""
    app = cdk.App()
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(account=ACCOUNT, region="us-east-2"))
    document: dict[str, Any] = stack.resolve(iam.PolicyDocument(statements=statements).to_json())
    return Resolver({"probe": {"Resources": {}}}, "us-east-2").resolve(document, "probe")


# KMS takes identity policies into account only when the key policy lets the account's IAM decide (the default).
DEFAULT_KEY_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}, "Action": "kms:*", "Resource": "*"}
    ],
}


def test_a_kms_encrypted_bucket_adds_decrypt_through_s3_only() -> None:
    key = "arn:aws:kms:us-east-2:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    reader = _statements_document(model_access.reader_statements(S3Prefix(BUCKET, PREFIX), key))
    via_s3 = {"kms:ViaService": "s3.us-east-2.amazonaws.com"}
    got = decisions(
        [
            Request("kms:Decrypt", key, via_s3),
            Request("kms:Decrypt", key, {"kms:ViaService": "secretsmanager.us-east-2.amazonaws.com"}),
            Request("kms:Decrypt", key.replace("1234abcd", "99999999")),
            Request("kms:GenerateDataKey", key, via_s3),
        ],
        identity_policy=reader,
        resource_policy=DEFAULT_KEY_POLICY,
    )
    assert got == [ALLOWED, DENIED, DENIED, DENIED]
    writer = _statements_document(model_access.writer_statements(S3Prefix(BUCKET, PREFIX), key))
    assert decisions(
        [Request("kms:GenerateDataKey", key, via_s3)], identity_policy=writer, resource_policy=DEFAULT_KEY_POLICY
    ) == [ALLOWED]


def test_the_endpoint_policy_reads_anything_but_lets_only_this_account_write() -> None:
    document = _statements_document(s3_endpoint_statements("us-east-2"))
    ours = {"aws:PrincipalAccount": ACCOUNT}
    foreign, foreign_account = "arn:aws:iam::999999999999:role/attacker", "999999999999"
    allow_all = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    # This account's principals (the nodes, the pods' roles): the endpoint decides alone (same account).
    same = decisions(
        [
            Request("s3:GetObject", f"arn:aws:s3:::{BUCKET}/{PREFIX}/config.json", ours),
            Request("s3:PutObject", f"arn:aws:s3:::{BUCKET}/{PREFIX}/x", ours),
        ],
        resource_policy=document,
    )
    assert same == [ALLOWED, ALLOWED]
    # Others' principals (ECR's and CloudFormation's presigned URLs; an intruder's keys) whose own policies allow
    # everything: with the endpoint as the resource of this account, only its policy can admit them.
    other = {"aws:PrincipalAccount": foreign_account}
    cross = [
        Request("s3:GetObject", "arn:aws:s3:::prod-us-east-2-starport-layer-bucket/layer", other, foreign),
        Request(
            "s3:GetObject", "arn:aws:s3:::prod-registry-k8s-io-us-east-2/containers/images/sha256:abc", other, foreign
        ),
        Request("s3:PutObject", "arn:aws:s3:::cloudformation-custom-resource-response-useast2/r", other, foreign),
        Request("s3:PutObject", "arn:aws:s3:::cloudformation-waitcondition-us-east-2/r", other, foreign),
        Request("s3:PutObject", "arn:aws:s3:::exfiltration-bucket/data", other, foreign),
        # A bucket an attacker could name like CloudFormation's, and CloudFormation's of another Region.
        Request("s3:PutObject", "arn:aws:s3:::cloudformation-custom-resource-response-evil/r", other, foreign),
        Request("s3:PutObject", "arn:aws:s3:::cloudformation-custom-resource-response-euwest1/r", other, foreign),
        Request("s3:DeleteObject", f"arn:aws:s3:::{BUCKET}/{PREFIX}/config.json", other, foreign),
    ]
    assert decisions(cross, identity_policy=allow_all, resource_policy=document) == [ALLOWED] * 4 + [DENIED] * 4


def test_an_anonymous_read_passes_the_endpoint() -> None:
    # registry.k8s.io redirects image layers to a public bucket in the Region: an unsigned GET.
    document = _statements_document(s3_endpoint_statements("us-east-2"))
    anonymous = Request("s3:GetObject", "arn:aws:s3:::prod-registry-k8s-io-us-east-2/layer", principal="anonymous")
    assert decisions([anonymous], resource_policy=document) == [ALLOWED]


# --- settings ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("s3://Example-Models/qwen", "BUCKET 3-63 lowercase"),
        ("s3://ex/qwen", "BUCKET 3-63 lowercase"),
        ("s3://192.168.1.10/qwen", "not an IP address"),
        ("s3://my..bucket/qwen", "BUCKET 3-63 lowercase"),
        ("s3://xn--bucket/qwen", "not starting with"),
        ("s3://models-s3alias/qwen", "not starting with"),
        ("s3://example-models", "PREFIX a key prefix"),
        ("s3://example-models/", "PREFIX a key prefix"),
        ("s3://example-models/qwen*", "no '*'"),
        ("s3://example-models/qwen/./other", "PREFIX a key prefix"),
        ("s3://example-models/qwen/" + ".." + "/x", "PREFIX a key prefix"),
        ("s3://example-models/a//b", "PREFIX a key prefix"),
        ("s3://example-models/${aws:username}", "PREFIX a key prefix"),
        ("https://huggingface.co/Qwen/Qwen3.5-9B", "ORG/NAME, or s3://BUCKET/PREFIX"),
    ],
)
def test_a_bad_s3_source_is_one_line_naming_it(value: str, fragment: str) -> None:
    with pytest.raises(SettingError) as error:
        settings_for({"MODEL_SOURCE": value})
    message = str(error.value)
    assert (
        message.startswith(f"MODEL_SOURCE={value!r} is not allowed: ") and fragment in message and "\n" not in message
    )


def test_an_s3_source_is_normalised_and_the_kms_key_needs_it() -> None:
    settings = settings_for({"MODEL_SOURCE": "s3://example-models/org/qwen3.5-9b/"})
    assert settings.model_source == "s3://example-models/org/qwen3.5-9b"
    assert settings.model_s3 == S3Prefix("example-models", "org/qwen3.5-9b")
    assert settings.model_s3.object_arn("aws") == "arn:aws:s3:::example-models/org/qwen3.5-9b/*"
    key = "arn:aws:kms:sa-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    assert settings_for({"MODEL_SOURCE": SOURCE, "MODEL_SOURCE_KMS_KEY_ARN": key}).model_source_kms_key_arn == key
    with pytest.raises(SettingError, match="empty unless MODEL_SOURCE is s3://"):
        settings_for({"MODEL_SOURCE_KMS_KEY_ARN": key})
    multi_region = "arn:aws:kms:sa-east-1:123456789012:key/mrk-1234abcd12ab34cd56ef1234567890ab"
    assert (
        settings_for({"MODEL_SOURCE": SOURCE, "MODEL_SOURCE_KMS_KEY_ARN": multi_region}).model_source_kms_key_arn
        == multi_region
    )
    with pytest.raises(SettingError, match="at most 768 bytes"):
        settings_for({"MODEL_SOURCE": "s3://example-models/" + "a" * 800})
    with pytest.raises(SettingError, match="not an alias"):
        settings_for({"MODEL_SOURCE": SOURCE, "MODEL_SOURCE_KMS_KEY_ARN": "alias/models"})


def test_a_hub_source_keeps_its_serve_config() -> None:
    config = pd_application(settings_for()).to_serve_config()["applications"][0]["args"]["prefill_config"]
    assert config["model_loading_config"] == {"model_id": "qwen3.5-9b", "model_source": "Qwen/Qwen3.5-9B"}
