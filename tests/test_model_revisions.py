"""A new revision without downtime: MODEL_NEXT_SOURCE names the prefix `make mirror-model` fills next, beside the
served MODEL_SOURCE. Set, it moves the mirror Job's writer role to that prefix and nothing else: the GPUs see the
same serve config and the same read role; then the switch is a MODEL_SOURCE change (serveConfigV2 in place).

What decides here is other people's code: an IAM evaluator on the synthesized policies, the deployment planner's
reading of CloudFormation's schemas, moto's S3, and Ray 2.58's own code-version function for the switch."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from moto import mock_aws

from settings import SettingError
from settings.model_source import S3Prefix
from stacks import model_access
from tests.conftest import FEATURES, Synth, settings_for
from tests.day2_helpers import PARTS, synth
from tests.iam_documents import Resolver
from tests.iam_simulator import Request, decisions

BUCKET, SERVED, NEXT = "example-models", "qwen3.5-9b", "qwen3.5-9b-0426"
SOURCE, NEXT_SOURCE = f"s3://{BUCKET}/{SERVED}", f"s3://{BUCKET}/{NEXT}"
ALLOWED, DENIED = "Allowed", "ImplicitlyDenied"
assert FEATURES["MODEL_SOURCE"] == SOURCE  # the shared features synth is the "before" of these tests


# --- the setting ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"MODEL_SOURCE": SOURCE, "MODEL_NEXT_SOURCE": SOURCE + "/"}, f"a prefix other than MODEL_SOURCE's ({SOURCE})"),
        ({"MODEL_SOURCE": SOURCE, "MODEL_NEXT_SOURCE": f"{SOURCE}/new"}, "neither inside the other"),
        ({"MODEL_SOURCE": f"{SOURCE}/old", "MODEL_NEXT_SOURCE": SOURCE}, "neither inside the other"),
        ({"MODEL_SOURCE": SOURCE, "MODEL_NEXT_SOURCE": f"s3://other-models/{NEXT}"}, "in MODEL_SOURCE's bucket"),
        ({"MODEL_SOURCE": SOURCE, "MODEL_NEXT_SOURCE": "Qwen/Qwen3.5-9B"}, f"s3://{BUCKET}/PREFIX, a prefix of its"),
        ({"MODEL_SOURCE": SOURCE, "MODEL_NEXT_SOURCE": f"s3://{BUCKET}/q*"}, "the mirror Job may write exactly"),
        ({"MODEL_NEXT_SOURCE": NEXT_SOURCE}, "empty unless MODEL_SOURCE is s3://BUCKET/PREFIX"),
    ],
)
def test_a_bad_next_source_is_one_line_naming_it(env: dict[str, str], fragment: str) -> None:
    with pytest.raises(SettingError) as error:
        settings_for(env)
    message, value = str(error.value), env["MODEL_NEXT_SOURCE"]
    assert message.startswith(f"MODEL_NEXT_SOURCE={value!r} is not allowed: ") and "\n" not in message
    assert fragment in message


def test_the_next_source_is_normalised_and_names_what_the_mirror_writes() -> None:
    settings = settings_for({"MODEL_SOURCE": SOURCE, "MODEL_NEXT_SOURCE": NEXT_SOURCE + "/"})
    assert settings.model_next_source == NEXT_SOURCE and settings.mirror_s3 == S3Prefix(BUCKET, NEXT)
    assert settings.model_s3 == S3Prefix(BUCKET, SERVED)  # what the engines read is MODEL_SOURCE's alone
    assert settings_for({"MODEL_SOURCE": SOURCE}).mirror_s3 == S3Prefix(BUCKET, SERVED)
    assert settings_for().model_next_source == "" and settings_for().mirror_s3 is None


# --- the synth: the mirror role moves, nothing the GPUs see does -------------------------------------------------


def _next_templates() -> dict[str, dict[str, Any]]:
    return synth(**FEATURES, MODEL_NEXT_SOURCE=NEXT_SOURCE)[1]


def test_only_the_mirror_role_differs_from_the_synth_without_it(s3_synth: Synth) -> None:
    """The before is the shared features synth (its cdk-nag metadata included): every other resource of every
    stack is byte-for-byte the same, so the RayService manifest (serveConfigV2) and the workers' role are too."""
    after = _next_templates()
    changed = {
        (part, logical_id)
        for part in PARTS
        for logical_id in s3_synth.templates[part]["Resources"].keys() | after[part]["Resources"].keys()
        if s3_synth.templates[part]["Resources"].get(logical_id) != after[part]["Resources"].get(logical_id)
    }
    resources = after["serving"]["Resources"]
    roles = {k: v["Properties"] for k, v in resources.items() if v["Type"] == "AWS::IAM::Role"}
    (role,) = [k for k, props in roles.items() if "model-mirror" in props["Description"]]
    policies = {k: v["Properties"] for k, v in resources.items() if v["Type"] == "AWS::IAM::Policy"}
    (policy,) = [k for k, props in policies.items() if {"Ref": role} in props["Roles"]]
    assert changed == {("serving", role), ("serving", policy)}
    assert roles[role]["Description"].endswith(f"make mirror-model writes {NEXT_SOURCE}")
    for part, template in after.items():
        assert template.get("Outputs") == s3_synth.templates[part].get("Outputs")


def _mirror_policy(templates: dict[str, dict[str, Any]], region: str) -> dict[str, Any]:
    by_type = [(v["Type"], v["Properties"]) for v in templates["serving"]["Resources"].values()]
    associations = [p for t, p in by_type if t == "AWS::EKS::PodIdentityAssociation"]
    (association,) = [p for p in associations if p["ServiceAccount"] == "model-mirror"]
    role = association["RoleArn"]["Fn::GetAtt"][0]
    (policy,) = [p for t, p in by_type if t == "AWS::IAM::Policy" and {"Ref": role} in p["Roles"]]
    document: dict[str, Any] = Resolver(templates, region).resolve(policy["PolicyDocument"], "serving")
    return document


def test_the_mirror_role_writes_the_next_prefix_and_not_the_served_one(s3_synth: Synth) -> None:
    policy = _mirror_policy(_next_templates(), s3_synth.settings.region)
    served, following = f"arn:aws:s3:::{BUCKET}/{SERVED}", f"arn:aws:s3:::{BUCKET}/{NEXT}"
    allowed = [
        Request("s3:PutObject", f"{following}/config.json"),
        Request("s3:AbortMultipartUpload", f"{following}/model.safetensors"),
        Request("s3:GetObject", f"{following}/hash"),
        Request("s3:ListBucket", f"arn:aws:s3:::{BUCKET}", {"s3:prefix": f"{NEXT}/"}),
    ]
    denied = [
        # Least privilege: while the next revision is filled, the served prefix is not writable at all.
        Request("s3:PutObject", f"{served}/config.json"),
        Request("s3:PutObject", f"{served}/hash"),
        Request("s3:AbortMultipartUpload", f"{served}/model.safetensors"),
        Request("s3:GetObject", f"{served}/hash"),
        Request("s3:ListBucket", f"arn:aws:s3:::{BUCKET}", {"s3:prefix": f"{SERVED}/"}),
        Request("s3:DeleteObject", f"{following}/hash"),
        Request("s3:PutObject", f"{following}-x/config.json"),
    ]
    assert decisions(allowed + denied, identity_policy=policy) == [ALLOWED] * len(allowed) + [DENIED] * len(denied)
    # Without it, the same role writes MODEL_SOURCE's prefix (the first fill, GPUs parked).
    before = _mirror_policy(s3_synth.templates, s3_synth.settings.region)
    writes = [Request("s3:PutObject", f"{served}/hash"), Request("s3:PutObject", f"{following}/hash")]
    assert decisions(writes, identity_policy=before) == [ALLOWED, DENIED]


def test_a_kms_key_covers_the_next_prefix_too() -> None:
    """Same bucket, same key: the writer's statements on the next prefix carry MODEL_SOURCE_KMS_KEY_ARN."""
    key = "arn:aws:kms:sa-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    settings = settings_for({"MODEL_SOURCE": SOURCE, "MODEL_NEXT_SOURCE": NEXT_SOURCE, "MODEL_SOURCE_KMS_KEY_ARN": key})
    target = settings.mirror_s3
    assert target is not None
    statements = [s.to_json() for s in model_access.writer_statements(target, settings.model_source_kms_key_arn)]
    assert [s["Resource"] for s in statements if "kms:GenerateDataKey" in s["Action"]] == [key]


# --- the tool ---------------------------------------------------------------------------------------------------


def test_the_tool_fills_the_next_prefix_and_says_so_first() -> None:
    from tests.test_model_mirror import REPO
    from tests.test_model_mirror_job import ClusterKubectl
    from tools import mirror_model

    served = settings_for({"MODEL_SOURCE": SOURCE})
    settings = settings_for({"MODEL_SOURCE": SOURCE, "MODEL_NEXT_SOURCE": NEXT_SOURCE})
    props = mirror_model.mirror_props(settings, REPO, "0123abc")
    assert props.destination == NEXT_SOURCE and mirror_model.mirror_props(served, REPO, "main").destination == SOURCE
    first = f"mirror-model: writing MODEL_NEXT_SOURCE={NEXT_SOURCE} (the next revision)"
    assert mirror_model.target_line(settings).startswith(first)
    assert mirror_model.target_line(served) == f"mirror-model: writing MODEL_SOURCE={SOURCE}"
    # The deployed RayService reads MODEL_SOURCE while its workers run: the check does not stop the next prefix.
    from k8s_constructs.ray_service import build_rayservice_chart

    deployed = build_rayservice_chart(settings).serve_config_yaml
    assert mirror_model.served_now(settings, SOURCE, ClusterKubectl(deployed, ["pod/ray-llm-decode-x"]))
    assert not mirror_model.served_now(settings, props.destination, ClusterKubectl(deployed, ["pod/ray-llm-decode-x"]))
    # ...and the serve config the GPUs get is the one without MODEL_NEXT_SOURCE.
    assert deployed == build_rayservice_chart(served).serve_config_yaml


# --- the preflight, on moto's S3 -----------------------------------------------------------------------------------


def test_the_preflight_reports_the_next_prefix() -> None:
    from preflight.model_bucket import check_s3_model_source

    served, following = S3Prefix(BUCKET, SERVED), S3Prefix(BUCKET, NEXT)
    with mock_aws():
        s3 = boto3.client("s3", region_name="sa-east-1")
        s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "sa-east-1"})
        s3.put_object(Bucket=BUCKET, Key=f"{SERVED}/hash", Body=b"c0ffee1234567890")
        empty = check_s3_model_source(s3, served, region="sa-east-1", gpu_nodes=2, next_source=following)
        assert empty.ok and not empty.warning and "commit c0ffee123456" in empty.detail
        assert f"MODEL_NEXT_SOURCE {NEXT_SOURCE}: no finished mirror yet" in empty.detail
        s3.put_object(Bucket=BUCKET, Key=f"{NEXT}/hash", Body=b"0426abcdef012345")
        ready = check_s3_model_source(s3, served, region="sa-east-1", gpu_nodes=2, next_source=following)
        assert f"(commit 0426abcdef01), ready to switch to (MODEL_SOURCE={NEXT_SOURCE}" in ready.detail
        # The served prefix decides the verdict: an empty one still fails, whatever the next holds.
        s3.delete_object(Bucket=BUCKET, Key=f"{SERVED}/hash")
        assert not check_s3_model_source(s3, served, region="sa-east-1", gpu_nodes=2, next_source=following).ok


def test_the_ci_deploy_role_may_read_the_next_prefix_for_the_preflight() -> None:
    from aws_cdk import Environment
    from aws_cdk.assertions import Template

    from settings.ci_access import load_ci_access_settings
    from stacks.application import new_app
    from stacks.ci_access_stack import CiAccessStack
    from tests.pinned import PINNED

    env = {"GITHUB_REPOSITORY": "octo-org/ray-llm", "MODEL_SOURCE": SOURCE, "MODEL_NEXT_SOURCE": NEXT_SOURCE}
    settings = load_ci_access_settings(env, {}, PINNED)
    account = Environment(account="123456789012", region=settings.region)
    stack = CiAccessStack(new_app(), settings.stack_name, settings=settings, env=account)
    statements = [
        s
        for r in Template.from_stack(stack).to_json()["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
    ]
    by_sid = {s.get("Sid"): s for s in statements}
    assert by_sid["ListTheModelPrefix"]["Condition"] == {"StringLike": {"s3:prefix": [f"{SERVED}/*", f"{NEXT}/*"]}}
    objects = [f"arn:aws:s3:::{BUCKET}/{SERVED}/*", f"arn:aws:s3:::{BUCKET}/{NEXT}/*"]
    assert by_sid["ReadTheModelPrefix"]["Resource"] == objects


# --- the switch, in Ray 2.58's own code ----------------------------------------------------------------------------


def test_the_switch_gives_every_deployment_of_the_app_a_new_version_and_rolls_them_stop_first() -> None:
    """What `MODEL_SOURCE=<next> make deploy` asks of Serve (serve/_private/application_state.py, deploy_utils.py):
    the application's code version hashes its args, and every deployment of the app (ingress, decode, prefill) is
    deployed with that one version, so all three roll at once; each stops at most max(1, 20 % of its replicas) old
    replicas before starting new ones (deployment_state.py, rolling_update_percentage)."""
    from ray.serve._private.config import DeploymentConfig
    from ray.serve._private.deploy_utils import get_app_code_version
    from ray.serve.schema import ServeDeploySchema

    from k8s_constructs.serve_config import pd_application

    def version(model_source: str) -> str:
        config = pd_application(settings_for({"MODEL_SOURCE": model_source})).to_serve_config()
        (app,) = ServeDeploySchema.model_validate(config).applications
        return get_app_code_version(app)

    assert version(SOURCE) == version(SOURCE) != version(NEXT_SOURCE)
    assert DeploymentConfig().rolling_update_percentage == 0.2
