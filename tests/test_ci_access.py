"""The CI access stack (ci_app.py): GitHub OIDC trust, least-privilege CI roles, cfn-lint, cdk-nag (its settings and
ci_app.py run as the CDK CLI runs it: tests/test_ci_access_settings.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import cfnlint
import pytest
from aws_cdk import Environment
from aws_cdk.assertions import Match, Template

from preflight.registry import read_only_actions
from settings.ci_access import load_ci_access_settings
from stacks.application import new_app
from stacks.ci_access_stack import DEPLOY_READ_ONLY_UNSCOPED, PROMQL_QUERY_ACTIONS, SCOPED_READS, CiAccessStack
from tests.ci_access_synth import (
    ACCOUNT,
    EXISTING_PROVIDER,
    REPOSITORY,
    CiSynth,
    _as_list,
    _render,
    _synthesize,
    _trust,
)
from tests.pinned import PINNED


@pytest.fixture(scope="module")
def ci(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CiSynth]:
    yield _synthesize({"GITHUB_REPOSITORY": REPOSITORY}, tmp_path_factory.mktemp("ci_access"))


@pytest.fixture(scope="module")
def ci_existing_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CiSynth]:
    env = {"GITHUB_REPOSITORY": REPOSITORY, "GITHUB_OIDC_PROVIDER_ARN": EXISTING_PROVIDER}
    yield _synthesize(env, tmp_path_factory.mktemp("ci_access_existing"))


# --- the stack --------------------------------------------------------------------------------------


def test_creates_the_github_oidc_provider_natively(ci: CiSynth) -> None:
    template = ci.template
    template.resource_count_is("AWS::IAM::OIDCProvider", 1)
    template.has_resource_properties(
        "AWS::IAM::OIDCProvider",
        {"Url": "https://token.actions.githubusercontent.com", "ClientIdList": Match.exact(["sts.amazonaws.com"])},
    )
    # The native resource: no Lambda-backed custom resource, nothing else than IAM in the stack.
    assert {r["Type"] for r in ci.template_json["Resources"].values()} == {
        "AWS::IAM::OIDCProvider",
        "AWS::IAM::Role",
        "AWS::IAM::Policy",
    }
    assert ci.stack.stack_name == "ray-llm-multinode-ci-access"
    assert "Parameters" not in ci.template_json  # CLI credentials: no bootstrap version check


def test_diff_role_trusts_only_pull_requests_of_the_repository(ci: CiSynth) -> None:
    provider = {"Ref": next(iter(ci.resources("AWS::IAM::OIDCProvider")))}
    ci.template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "RoleName": "ray-llm-multinode-ci-diff-sa-east-1",
            "AssumeRolePolicyDocument": Match.object_equals(_trust("repo:octo-org/ray-llm:pull_request", provider)),
            "MaxSessionDuration": 3600,
        },
    )


def test_deploy_role_trusts_only_the_deploy_and_destroy_environments(ci: CiSynth) -> None:
    provider = {"Ref": next(iter(ci.resources("AWS::IAM::OIDCProvider")))}
    subjects = ["repo:octo-org/ray-llm:environment:deploy", "repo:octo-org/ray-llm:environment:destroy"]
    ci.template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "RoleName": "ray-llm-multinode-ci-deploy-sa-east-1",
            "AssumeRolePolicyDocument": Match.object_equals(_trust(subjects, provider)),
            # The workflows ask for role-duration-seconds: 7200.
            "MaxSessionDuration": 7200,
        },
    )


def test_the_park_role_trusts_only_the_schedule_environment(ci: CiSynth) -> None:
    provider = {"Ref": next(iter(ci.resources("AWS::IAM::OIDCProvider")))}
    ci.template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "RoleName": "ray-llm-multinode-ci-park-sa-east-1",
            "AssumeRolePolicyDocument": Match.object_equals(
                _trust("repo:octo-org/ray-llm:environment:schedule", provider)
            ),
            "MaxSessionDuration": 3600,
        },
    )


def test_the_park_role_may_only_scale_the_gpu_nodegroup_and_read_the_gpu_stack(ci: CiSynth) -> None:
    """A job no one approves: nothing but the GPU nodegroup's scaling (tools/park_schedule.py's calls) and the
    GPU stack's outputs, the count a reviewed deploy approved."""
    granted = {
        (action, _render(resource))
        for statement in ci.statements_of(ci.settings.schedule_role_name)
        for action in _as_list(statement["Action"])
        for resource in _as_list(statement["Resource"])
    }
    nodegroup = f"arn:aws:eks:sa-east-1:{ACCOUNT}:nodegroup/ray-llm-multinode/gpu-workers/*"
    assert granted == {
        ("eks:DescribeNodegroup", nodegroup),
        ("eks:UpdateNodegroupConfig", nodegroup),
        ("eks:DescribeUpdate", nodegroup),
        ("eks:DescribeUpdate", f"arn:aws:eks:sa-east-1:{ACCOUNT}:cluster/ray-llm-multinode"),
        ("cloudformation:DescribeStacks", f"arn:aws:cloudformation:sa-east-1:{ACCOUNT}:stack/ray-llm-multinode-gpu/*"),
    }
    assert ci.template_json["Outputs"]["ParkRoleArn"]["Value"] == {
        "Fn::GetAtt": [ci.role_id(ci.settings.schedule_role_name), "Arn"]
    }


def test_the_park_role_follows_gpu_nodegroup_name(tmp_path: Path) -> None:
    ci = _synthesize({"GITHUB_REPOSITORY": REPOSITORY, "GPU_NODEGROUP_NAME": "gpu-b"}, tmp_path)
    resources = {_render(r) for s in ci.statements_of(ci.settings.schedule_role_name) for r in _as_list(s["Resource"])}
    assert f"arn:aws:eks:sa-east-1:{ACCOUNT}:nodegroup/ray-llm-multinode/gpu-b/*" in resources


def _cdk_role(kind: str) -> str:
    return f"arn:aws:iam::{ACCOUNT}:role/cdk-hnb659fds-{kind}-role-{ACCOUNT}-sa-east-1"


def _assumable(ci: CiSynth, role_name: str) -> set[str]:
    return {
        _render(resource)
        for statement in ci.statements_of(role_name)
        if "sts:AssumeRole" in _as_list(statement["Action"])
        for resource in _as_list(statement["Resource"])
    }


def test_deploy_role_may_assume_exactly_the_four_cdk_bootstrap_roles(ci: CiSynth) -> None:
    expected = {_cdk_role(kind) for kind in ("deploy", "file-publishing", "image-publishing", "lookup")}
    assert _assumable(ci, ci.settings.deploy_role_name) == expected


def test_diff_role_may_assume_exactly_the_lookup_role(ci: CiSynth) -> None:
    assert _assumable(ci, ci.settings.diff_role_name) == {_cdk_role("lookup")}


def test_an_s3_model_source_lets_the_deploy_role_read_that_bucket_and_prefix_only() -> None:
    settings = load_ci_access_settings(
        {"GITHUB_REPOSITORY": "octo-org/ray-llm", "MODEL_SOURCE": "s3://example-models/qwen"}, {}, PINNED
    )
    stack = CiAccessStack(
        new_app(),
        settings.stack_name,
        settings=settings,
        env=Environment(account="123456789012", region=settings.region),
    )
    resources = Template.from_stack(stack).to_json()["Resources"].values()
    statements = [
        s for r in resources if r["Type"] == "AWS::IAM::Policy" for s in r["Properties"]["PolicyDocument"]["Statement"]
    ]
    model = {s["Sid"]: s for s in statements if s.get("Sid", "").startswith("ReadTheModel")}
    model.update({s["Sid"]: s for s in statements if s.get("Sid") == "ListTheModelPrefix"})
    assert (model["ReadTheModelBucketRegion"]["Action"], model["ReadTheModelBucketRegion"]["Resource"]) == (
        "s3:GetBucketLocation",
        "arn:aws:s3:::example-models",
    )
    assert model["ListTheModelPrefix"]["Condition"] == {"StringLike": {"s3:prefix": ["qwen/*"]}}
    assert (model["ReadTheModelPrefix"]["Action"], model["ReadTheModelPrefix"]["Resource"]) == (
        "s3:GetObject",
        "arn:aws:s3:::example-models/qwen/*",
    )


def test_deploy_role_has_exactly_the_read_only_calls_it_needs(ci: CiSynth) -> None:
    statements = ci.statements_of(ci.settings.deploy_role_name)
    actions = {a for s in statements for a in _as_list(s["Action"])}
    # Without HF_TOKEN_SECRET_NAME there is no secret for the preflight to read, with a Hub MODEL_SOURCE no bucket.
    scoped = set(SCOPED_READS) - {
        "secretsmanager:GetSecretValue",
        "s3:GetBucketLocation",
        "s3:GetObject",
        "s3:ListBucket",
    }
    assert (
        actions - set(PROMQL_QUERY_ACTIONS) == {"sts:AssumeRole", *DEPLOY_READ_ONLY_UNSCOPED, *scoped}
        and set(PROMQL_QUERY_ACTIONS) <= actions
    )
    # Exactly what the preflight checks and the leftovers check declare they call (preflight/registry.py).
    assert set(read_only_actions()) == set(DEPLOY_READ_ONLY_UNSCOPED) | set(SCOPED_READS)
    assert all(
        a.split(":")[1].startswith(("Describe", "Get", "List", "BatchGet")) for a in actions - {"sts:AssumeRole"}
    )
    # The scoped ones name this cluster and these stacks, not "*".
    by_action = {
        a: {_render(r) for r in _as_list(s["Resource"])}
        for s in statements
        for a in _as_list(s["Action"])
        if a in scoped
    }
    assert by_action["eks:DescribeCluster"] == {f"arn:aws:eks:sa-east-1:{ACCOUNT}:cluster/ray-llm-multinode"}
    assert by_action["eks:DescribeNodegroup"] == {f"arn:aws:eks:sa-east-1:{ACCOUNT}:nodegroup/ray-llm-multinode/*/*"}
    assert by_action["cloudformation:DescribeStacks"] == {
        f"arn:aws:cloudformation:sa-east-1:{ACCOUNT}:stack/ray-llm-multinode-*/*",
        f"arn:aws:cloudformation:sa-east-1:{ACCOUNT}:stack/CDKToolkit/*",
    }
    assert by_action["servicequotas:GetServiceQuota"] == {f"arn:aws:servicequotas:sa-east-1:{ACCOUNT}:ec2/*"}
    assert by_action["cloudwatch:GetDataset"] == {f"arn:aws:cloudwatch:sa-east-1:{ACCOUNT}:dataset/default"}
    # The preflight's admin-principals check: this account's roles and users, read only.
    assert by_action["iam:GetRole"] == {f"arn:aws:iam::{ACCOUNT}:role/*"} and by_action["iam:GetUser"] == {
        f"arn:aws:iam::{ACCOUNT}:user/*"
    }


@cache
def _authorization_reference() -> dict[str, Any]:
    """cfn-lint's copy of the Service Authorization Reference (2 MB: read once, not once per action)."""
    path = Path(cfnlint.__file__).parent / "data" / "AdditionalSpecs" / "Policies.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _resource_types(action: str) -> list[str]:
    """The resource types an IAM action can be scoped to, from cfn-lint's copy of the Service Authorization
    Reference."""
    policies = _authorization_reference()
    service, name = action.split(":")
    resources: list[str] = policies[service]["Actions"][name.lower()].get("Resources", [])
    return resources


def test_resource_star_only_where_no_resource_level_permission_exists(ci: CiSynth) -> None:
    for role_name in (ci.settings.deploy_role_name, ci.settings.diff_role_name, ci.settings.schedule_role_name):
        for statement in ci.statements_of(role_name):
            actions = _as_list(statement["Action"])
            for action in actions:
                _resource_types(action)  # every action exists
            if "*" in _as_list(statement["Resource"]):
                # PromQL's reads: AWS documents the actions, not a resource they are authorized against.
                scopable = [a for a in actions if _resource_types(a) and a not in PROMQL_QUERY_ACTIONS]
                assert scopable == [], f"{role_name}: {scopable} can be scoped to a resource"


def test_diff_role_only_reads_the_cluster_stacks(ci: CiSynth) -> None:
    statements = ci.statements_of(ci.settings.diff_role_name)
    for statement in statements:
        actions = _as_list(statement["Action"])
        resources = {_render(r) for r in _as_list(statement["Resource"])}
        if actions == ["sts:AssumeRole"]:
            continue
        assert all(
            a.startswith("cloudformation:") and a.split(":")[1].startswith(("Describe", "Get", "List")) for a in actions
        )
        if resources == {"*"}:
            assert actions == ["cloudformation:ListStacks"]  # no resource-level permission exists for it
        else:
            assert resources == {f"arn:aws:cloudformation:sa-east-1:{ACCOUNT}:stack/ray-llm-multinode-*/*"}


def test_no_wildcard_action_and_no_managed_policy(ci: CiSynth) -> None:
    for name in (ci.settings.deploy_role_name, ci.settings.diff_role_name, ci.settings.schedule_role_name):
        statements = ci.statements_of(name)
        assert statements
        for statement in statements:
            assert statement["Effect"] == "Allow" and "NotAction" not in statement and "NotResource" not in statement
            assert not any("*" in action for action in _as_list(statement["Action"])), statement
    for role in ci.resources("AWS::IAM::Role").values():
        assert "ManagedPolicyArns" not in role["Properties"]  # no AdministratorAccess, nor any other
    assert "AdministratorAccess" not in json.dumps(ci.template_json)
    assert not ci.resources("AWS::IAM::ManagedPolicy")


def test_outputs_the_role_and_provider_arns(ci: CiSynth) -> None:
    outputs = ci.template_json["Outputs"]
    assert outputs["DeployRoleArn"]["Value"] == {"Fn::GetAtt": [ci.role_id(ci.settings.deploy_role_name), "Arn"]}
    assert outputs["DiffRoleArn"]["Value"] == {"Fn::GetAtt": [ci.role_id(ci.settings.diff_role_name), "Arn"]}
    assert outputs["OidcProviderArn"]["Value"] == {"Ref": next(iter(ci.resources("AWS::IAM::OIDCProvider")))}


def test_an_existing_provider_is_reused_not_created(ci_existing_provider: CiSynth) -> None:
    synth = ci_existing_provider
    synth.template.resource_count_is("AWS::IAM::OIDCProvider", 0)
    synth.template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "RoleName": synth.settings.deploy_role_name,
            "AssumeRolePolicyDocument": Match.object_equals(
                _trust(list(synth.settings.deploy_subjects), EXISTING_PROVIDER)
            ),
        },
    )
    assert synth.template_json["Outputs"]["OidcProviderArn"]["Value"] == EXISTING_PROVIDER
    assert synth.nag_error == ""


def test_cfn_lint_reports_no_error(ci: CiSynth, ci_existing_provider: CiSynth) -> None:
    templates = [str(s.outdir / f"{s.settings.stack_name}.template.json") for s in (ci, ci_existing_provider)]
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    result = subprocess.run(
        [str(cfn_lint), "--format", "parseable", *templates], capture_output=True, text=True, timeout=300
    )
    errors = [line for line in result.stdout.splitlines() if ":E" in line]
    assert errors == [] and not result.returncode & 2, result.stdout + result.stderr


def test_cdk_nag_aws_solutions_has_no_unacknowledged_finding(ci: CiSynth) -> None:
    report = json.loads((ci.outdir / "validation-report.json").read_text())
    findings = [
        f"{v['ruleName']} at {[c['constructPath'] for c in v['violatingConstructs']]}"
        for p in report["pluginReports"]
        for v in p["violations"]
    ]
    assert findings == [] and ci.nag_error == "", "\n".join(findings) or ci.nag_error
    acknowledged: dict[str, str] = {}
    for path, entries in json.loads((ci.outdir / f"{ci.settings.stack_name}.metadata.json").read_text()).items():
        for entry in entries:
            if entry["type"] == "aws:cdk:acknowledged-rules":
                acknowledged.update({f"{path} {rule}": reason for rule, reason in entry["data"].items()})
    # Only IAM5: wildcard resources of the two read-only policies, and the park policy's generated IDs; with reasons.
    assert acknowledged, "the read-only policies' wildcards are expected to be acknowledged"
    assert all(
        "AwsSolutions-IAM5" in key and ("ReadOnlyPolicy" in key or "ParkPolicy" in key) for key in acknowledged
    ), sorted(acknowledged)
    park = {key.split("[", 1)[1] for key in acknowledged if "ParkPolicy" in key}
    assert park == {
        "Resource::arn:aws:eks:sa-east-1:<AWS::AccountId>:nodegroup/ray-llm-multinode/gpu-workers/*]",
        "Resource::arn:aws:cloudformation:sa-east-1:<AWS::AccountId>:stack/ray-llm-multinode-gpu/*]",
    }
    assert all(len(reason) > 40 for reason in acknowledged.values())


def test_with_a_hub_token_the_deploy_role_may_read_that_one_secret(tmp_path: Path) -> None:
    """The preflight's model-source check of a gated model reads the token: only that secret, by its name."""
    ci = _synthesize({"GITHUB_REPOSITORY": REPOSITORY, "HF_TOKEN_SECRET_NAME": "prod/hf-token"}, tmp_path)
    statements = [
        s
        for s in ci.statements_of(ci.settings.deploy_role_name)
        if "secretsmanager:GetSecretValue" in _as_list(s["Action"])
    ]
    (statement,) = statements
    assert _as_list(statement["Action"]) == ["secretsmanager:GetSecretValue"]
    (resource,) = _as_list(statement["Resource"])
    assert _render(resource) == "arn:aws:secretsmanager:sa-east-1:${AWS::AccountId}:secret:prod/hf-token-??????"
