"""The preflight checks that stop a first deploy from failing minutes in: the VPC's AZs, the admin principals, and
a private endpoint from a hosted runner (a GPU capacity reservation: tests/test_preflight_reservation.py).

EC2 DescribeAvailabilityZones and IAM GetRole / GetUser are real moto 5.2.5 answers (moto's sa-east-1 has a, b, c;
us-west-1 has a and b only, as most accounts do).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from botocore.stub import Stubber  # type: ignore[import-untyped]

from preflight.capacity import check_vpc_azs
from preflight.principals import check_admin_principals
from preflight.reachability import check_api_endpoint, hosted_runner_cannot_reach
from preflight.runner import run_checks
from tests import preflight_fakes
from tests.preflight_fakes import ACCOUNT, INPUT, REGION, by_name, create_bootstrap_stack, default_quotas

aws = preflight_fakes.aws  # fake credentials, everything served by moto

EXECUTION_ROLE = f"arn:aws:iam::{ACCOUNT}:role/cdk-hnb659fds-cfn-exec-role-{ACCOUNT}-{REGION}"


# --- the VPC's AZs ---------------------------------------------------------------------------------------


def test_the_vpcs_azs_exist(aws: None) -> None:
    result = check_vpc_azs(
        boto3.client("ec2", region_name=REGION), region=REGION, vpc_azs=("sa-east-1a", "sa-east-1b", "sa-east-1c")
    )
    assert (result.verdict, result.detail) == ("PASS", "sa-east-1a, sa-east-1b, sa-east-1c available")


def test_the_fallback_azs_of_a_two_az_region_are_refused(aws: None) -> None:
    """Without a cached look-up the VPC takes REGION + a, b, c: us-west-1 has no c for most accounts."""
    result = check_vpc_azs(
        boto3.client("ec2", region_name="us-west-1"),
        region="us-west-1",
        vpc_azs=("us-west-1a", "us-west-1b", "us-west-1c"),
    )
    assert result.verdict == "FAIL"
    assert result.detail.startswith("us-west-1c not an AZ of us-west-1 for this account")
    assert "make lookup" in result.fix and "us-west-1a, us-west-1b" in result.fix


def test_an_az_that_is_not_available_is_refused() -> None:
    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(ec2) as stub:
        zones = [{"ZoneName": "sa-east-1a", "State": "available"}, {"ZoneName": "sa-east-1b", "State": "impaired"}]
        stub.add_response("describe_availability_zones", {"AvailabilityZones": zones})
        result = check_vpc_azs(ec2, region=REGION, vpc_azs=("sa-east-1a", "sa-east-1b"))
    assert (result.verdict, result.detail) == ("FAIL", "sa-east-1b is impaired")


def test_the_preflight_runs_the_az_check_on_the_configured_azs(aws: None) -> None:
    create_bootstrap_stack()
    session, _ = default_quotas()
    results = by_name(run_checks(replace(INPUT, vpc_azs=("sa-east-1a", "sa-east-1b", "sa-east-1d")), session))
    assert results["vpc-azs"].verdict == "FAIL" and "sa-east-1d" in results["vpc-azs"].detail


# --- the admin principals --------------------------------------------------------------------------------


def _iam() -> Any:
    iam = boto3.client("iam", region_name="us-east-1")
    iam.create_role(RoleName="ci-deploy", AssumeRolePolicyDocument="{}")
    iam.create_role(RoleName="platform-admin", Path="/people/", AssumeRolePolicyDocument="{}")
    iam.create_user(UserName="alice")
    return iam


def test_existing_principals_pass(aws: None) -> None:
    arns = (
        f"arn:aws:iam::{ACCOUNT}:role/ci-deploy",
        f"arn:aws:iam::{ACCOUNT}:role/people/platform-admin",
        f"arn:aws:iam::{ACCOUNT}:user/alice",
    )
    result = check_admin_principals(_iam(), arns=arns, account=ACCOUNT, execution_role_arn=EXECUTION_ROLE)
    assert (result.verdict, result.detail) == ("PASS", f"3 principal(s) exist in account {ACCOUNT}")


@pytest.mark.parametrize(
    ("arn", "fragment"),
    [
        (f"arn:aws:iam::{ACCOUNT}:role/ci-deplyo", "no such IAM role"),
        (f"arn:aws:iam::{ACCOUNT}:user/bob", "no such IAM user"),
        (f"arn:aws:iam::{ACCOUNT}:role/platform-admin", "IAM has this role as"),  # the path left out
        (EXECUTION_ROLE, "CloudFormation execution role"),
    ],
)
def test_a_principal_eks_would_refuse_is_one_clear_line(aws: None, arn: str, fragment: str) -> None:
    result = check_admin_principals(_iam(), arns=(arn,), account=ACCOUNT, execution_role_arn=EXECUTION_ROLE)
    assert result.verdict == "FAIL" and fragment in result.detail and "\n" not in result.detail
    assert "ADMIN_PRINCIPAL_ARNS" in result.fix or "ARN exactly" in result.fix


def test_another_accounts_principal_is_said_unchecked(aws: None) -> None:
    result = check_admin_principals(
        _iam(), arns=("arn:aws:iam::210987654321:role/ops",), account=ACCOUNT, execution_role_arn=EXECUTION_ROLE
    )
    assert result.verdict == "WARN" and "210987654321:role/ops" in result.warning


def test_the_preflight_fills_the_execution_role_from_the_assembly(aws: None) -> None:
    create_bootstrap_stack()
    _iam()
    session, _ = default_quotas()
    assembly_form = (
        "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/cdk-hnb659fds-cfn-exec-role-${AWS::AccountId}-sa-east-1"
    )
    inp = replace(INPUT, admin_principal_arns=(EXECUTION_ROLE,), execution_role_arn=assembly_form)
    result = by_name(run_checks(inp, session))["admin-principals"]
    assert result.verdict == "FAIL" and "CloudFormation execution role" in result.detail


def test_the_execution_role_arn_is_read_from_the_synthesized_assembly(default_synth: Any) -> None:
    from tools.preflight import execution_role_arn

    arn = execution_role_arn(default_synth.outdir, default_synth.settings.stack_names["cluster"])
    assert (
        arn
        == "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/cdk-hnb659fds-cfn-exec-role-${AWS::AccountId}-sa-east-1"
    )


# --- where the tools run -------------------------------------------------------------------------------


def test_only_a_private_endpoint_from_a_hosted_runner_is_unreachable() -> None:
    hosted = {"RUNNER_ENVIRONMENT": "github-hosted"}
    assert hosted_runner_cannot_reach("private", hosted)
    assert not hosted_runner_cannot_reach("private", {"RUNNER_ENVIRONMENT": "self-hosted"})
    assert not hosted_runner_cannot_reach("private", {})
    assert not hosted_runner_cannot_reach("public-and-private", hosted)
    assert check_api_endpoint("public-and-private", ("203.0.113.0/24",), hosted).verdict == "PASS"


def test_the_teardown_refuses_a_private_cluster_from_a_hosted_runner(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Skipping its first step would leave load balancers holding the subnets and the RayService its nodes."""
    from tools import teardown

    monkeypatch.setenv("ENDPOINT_ACCESS", "private")
    monkeypatch.setenv("RUNNER_ENVIRONMENT", "github-hosted")
    monkeypatch.setattr(teardown, "deployed_but_left_out", lambda settings, session: [])
    monkeypatch.setattr(teardown, "cluster_kubectl", lambda *a: pytest.fail("must not try the API"))
    assert teardown.main(["before"]) == 1
    err = capsys.readouterr().err
    assert "GitHub-hosted runner" in err and "CLUSTER_RUNNER" in err and len(err.strip().splitlines()) == 1
