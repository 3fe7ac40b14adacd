"""Tests of the preflight checks (preflight.checks runs preflight.registry) against moto (in-process, offline).

What moto 5.2.5 answers and what these tests stub instead:
- STS, EC2 (regions, instance type offerings, instance types incl. NetworkInfo.EfaSupported, instances)
  and CloudFormation: real moto answers, nothing stubbed.
- Service Quotas: moto has quota data for ServiceCode "vpc" only. For "ec2" GetServiceQuota raises
  NoSuchResourceException and GetAWSDefaultServiceQuota is not implemented at all (NotImplementedError).
  So the service-quotas client alone is replaced by a botocore Stubber'd client carrying the values each
  test needs; the Stubber checks the request parameters (ServiceCode, QuotaCode) and the call order.
- EfaSupported: moto returns it for every one of its 1395 types (True for g6.8xlarge and p5.48xlarge,
  False for g6.xlarge). Only the "field missing" test removes it, by an after-call hook on that one
  operation.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import botocore.awsrequest  # type: ignore[import-untyped]
import botocore.loaders  # type: ignore[import-untyped]
import botocore.session  # type: ignore[import-untyped]
import pytest
from botocore.stub import Stubber  # type: ignore[import-untyped]
from moto import mock_aws

from preflight.checks import (
    G_QUOTA_CODE,
    P_QUOTA_CODE,
    STANDARD_QUOTA_CODE,
    CheckResult,
    PreflightInput,
    format_table,
    main,
    quota_code_of,
    run_checks,
    stack_status_usable,
)
from preflight.registry import CHECKS

REGION = "sa-east-1"  # the project's default REGION
ACCOUNT = "123456789012"  # moto's account
ORDER = [check.name for check in CHECKS]  # preflight/registry.py: the run order
NO_ASSEMBLY = "no synthesized assembly to compare (first deploy checks only)"
INPUT = PreflightInput(
    region=REGION,
    gpu_az="sa-east-1a",
    gpu_instance_type="g6.8xlarge",
    gpu_vcpus=32,
    gpu_node_count=2,
    gpu_quota_code=G_QUOTA_CODE,
    gpu_quota_name="Running On-Demand G and VT instances",
    system_instance_type="m7i.xlarge",
    system_vcpus=4,
    system_node_count=1,
    cluster_name="ray-llm-multinode",
    vpc_azs=("sa-east-1a", "sa-east-1b", "sa-east-1c"),
)


@functools.cache
def _shared_loader(search_path_string: str | None = None) -> Any:
    return botocore.loaders.create_loader(search_path_string)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Fake credentials, no config files, no instance metadata, everything served by moto."""
    for var in (
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_ROLE_ARN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    # Not needed by these tests and the slowest part of moto's EC2 start-up.
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    # Every new boto3 session re-reads and re-parses botocore's JSON models (~0.7 s each). Share one
    # loader: it only caches those read-only files, never credentials or configuration.
    monkeypatch.setattr(botocore.session, "create_loader", _shared_loader)
    with mock_aws():
        yield


class _SessionWithQuotas(boto3.session.Session):  # type: ignore[misc]
    """A boto3 session whose service-quotas client (and any in `stubbed`) is a Stubber'd one; every other
    client is moto's."""

    def __init__(self, quotas_client: Any, stubbed: dict[str, Any] | None = None) -> None:
        super().__init__(region_name=REGION)
        self._stubbed = {"service-quotas": quotas_client, **(stubbed or {})}

    def client(self, service_name: str, *args: Any, **kwargs: Any) -> Any:
        if service_name in self._stubbed:
            assert kwargs.get("region_name") == REGION  # quotas, datasets and collectors are per Region
            return self._stubbed[service_name]
        return super().client(service_name, *args, **kwargs)


def quota_session(*quotas: tuple[str, float]) -> tuple[_SessionWithQuotas, Stubber]:
    """Session answering GetServiceQuota with `quotas`, in that order (GPU quota first, then standard)."""
    client = boto3.session.Session().client("service-quotas", region_name=REGION)
    stubber = Stubber(client)
    for code, value in quotas:
        stubber.add_response(
            "get_service_quota",
            {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "Value": value}},
            {"ServiceCode": "ec2", "QuotaCode": code},
        )
    stubber.activate()
    return _SessionWithQuotas(client), stubber


def default_quotas() -> tuple[_SessionWithQuotas, Stubber]:
    # Exactly what INPUT needs: 2 x 32 GPU vCPU and 1 x 4 system vCPU (the comparison is >=).
    return quota_session((G_QUOTA_CODE, 64.0), (STANDARD_QUOTA_CODE, 4.0))


def create_bootstrap_stack(name: str = "CDKToolkit") -> None:
    # The smallest stand-in for the CDK bootstrap stack: its version parameter and output.
    template = {
        "Resources": {
            "CdkBootstrapVersion": {
                "Type": "AWS::SSM::Parameter",
                "Properties": {"Type": "String", "Name": "/cdk-bootstrap/hnb659fds/version", "Value": "28"},
            }
        },
        "Outputs": {"BootstrapVersion": {"Value": "28"}},
    }
    boto3.client("cloudformation", region_name=REGION).create_stack(StackName=name, TemplateBody=json.dumps(template))


def by_name(results: list[CheckResult]) -> dict[str, CheckResult]:
    assert [r.name for r in results] == ORDER
    return {r.name: r for r in results}


def test_all_checks_pass(aws: None, capsys: pytest.CaptureFixture[str]) -> None:
    create_bootstrap_stack()
    session, stubber = default_quotas()

    results = run_checks(INPUT, session)

    stubber.assert_no_pending_responses()
    assert [(r.name, r.ok, r.detail, r.fix) for r in results] == [
        ("credentials", True, f"account {ACCOUNT} as arn:aws:sts::{ACCOUNT}:user/moto", ""),
        ("region", True, "sa-east-1 enabled (opt-in-not-required)", ""),
        ("gpu-az-offering", True, "g6.8xlarge is offered in sa-east-1a", ""),
        ("gpu-efa", True, "g6.8xlarge supports EFA (up to 1 EFA interfaces)", ""),
        ("vpc-azs", True, "sa-east-1a, sa-east-1b, sa-east-1c available", ""),
        ("gpu-capacity-reservation", True, "none: On-Demand capacity (InsufficientInstanceCapacity possible)", ""),
        *[(name, True, NO_ASSEMBLY, "") for name in ("stack-states", "kubernetes-version", "stack-changes", "kuberay-crds", "control-plane-log-group")],
        (
            "gpu-vcpu-quota",
            True,
            "need 64 vCPU: 2 x 32 after the deploy, at most 64 during it (no node replaced); this cluster holds 0, other workloads 0; quota 64",
            "",
        ),
        (
            "standard-vcpu-quota",
            True,
            "need 4 vCPU: 1 x 4 after the deploy, at most 4 during it (no node replaced); this cluster holds 0, other workloads 0; quota 4",
            "",
        ),
        ("cdk-bootstrap", True, "stack CDKToolkit is CREATE_COMPLETE, bootstrap version 28", ""),
        ("admin-principals", True, "none listed (only the CloudFormation execution role and the kubectl provider will be admins)", ""),
        ("api-endpoint", True, "public-and-private, public side open to 0.0.0.0/0 (IAM authentication still applies)", ""),
        ("helm-charts", True, "no Helm chart to install", ""),
        ("metrics-destination", True, "OBSERVABILITY=off: nothing to check", ""),
        ("stacks-left-out", True, "this configuration contains every stack", ""),
    ]

    session, _ = default_quotas()
    assert main(INPUT, session) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out
    assert out.count("PASS") == len(ORDER) - 1 and out.count("WARN") == 1  # the public API endpoint is open to anywhere
    assert "warning: api-endpoint: set PUBLIC_ACCESS_CIDRS" in out
    assert "fix:" not in out
    assert out.rstrip().endswith("All checks passed.")


def test_a_limited_endpoint_gives_no_warning_and_a_private_one_says_where_to_run(aws: None) -> None:
    create_bootstrap_stack()
    for changes, verdict, detail in (
        ({"public_access_cidrs": ("203.0.113.0/24",)}, "PASS", "public-and-private, public side limited to 203.0.113.0/24"),
        # Nothing tells whether this machine is in the VPC: said, not refused.
        ({"endpoint_access": "private"}, "WARN", "private only: reachable from inside the VPC"),
        ({"endpoint_access": "private", "environ": {"RUNNER_ENVIRONMENT": "self-hosted"}}, "WARN", "private only: reachable from inside the VPC"),
    ):
        session, _ = default_quotas()
        endpoint = by_name(run_checks(replace(INPUT, **changes), session))["api-endpoint"]
        assert (endpoint.verdict, endpoint.detail) == (verdict, detail)


def test_a_private_endpoint_from_a_github_hosted_runner_is_refused(aws: None) -> None:
    """The deploy would work (the kubectl provider is in the VPC), then kubeconfig, wait-ready, verify and the
    teardown's first step could not reach the API from the hosted runner."""
    create_bootstrap_stack()
    session, _ = default_quotas()
    inp = replace(INPUT, endpoint_access="private", environ={"RUNNER_ENVIRONMENT": "github-hosted", "GITHUB_ACTIONS": "true"})
    endpoint = by_name(run_checks(inp, session))["api-endpoint"]
    assert endpoint.verdict == "FAIL"
    assert "GitHub-hosted runner" in endpoint.detail and "CLUSTER_RUNNER" in endpoint.fix


def test_p5_with_p_quota_passes(aws: None) -> None:
    # p5.48xlarge: 192 vCPU, EFA on 32 network cards, P quota; moto offers it only in sa-east-1c.
    inp = PreflightInput(
        **{
            **INPUT.__dict__,
            "gpu_az": "sa-east-1c",
            "gpu_instance_type": "p5.48xlarge",
            "gpu_vcpus": 192,
            "gpu_node_count": 1,
            "gpu_quota_code": P_QUOTA_CODE,
            "gpu_quota_name": "Running On-Demand P instances",
        }
    )
    create_bootstrap_stack()
    session, stubber = quota_session((P_QUOTA_CODE, 192.0), (STANDARD_QUOTA_CODE, 4.0))

    results = by_name(run_checks(inp, session))

    stubber.assert_no_pending_responses()
    assert all(r.ok for r in results.values()), results
    assert results["gpu-efa"].detail == "p5.48xlarge supports EFA (up to 32 EFA interfaces)"
    assert (
        results["gpu-vcpu-quota"].detail
        == "need 192 vCPU: 1 x 192 after the deploy, at most 192 during it (no node replaced); this cluster holds 0, other workloads 0; quota 192"
    )


def test_gpu_type_not_offered_in_az_names_the_azs_that_offer_it(aws: None, capsys: pytest.CaptureFixture[str]) -> None:
    # moto's offering data (a snapshot of AWS): g6.8xlarge in sa-east-1a and sa-east-1b, not sa-east-1c.
    inp = PreflightInput(**{**INPUT.__dict__, "gpu_az": "sa-east-1c"})
    create_bootstrap_stack()
    session, _ = default_quotas()

    assert main(inp, session) == 1

    out, err = capsys.readouterr()
    line = next(line for line in out.splitlines() if line.startswith("gpu-az-offering"))
    assert line.split() == ["gpu-az-offering", "FAIL", "g6.8xlarge", "is", "not", "offered", "in", "sa-east-1c"]
    assert "fix: gpu-az-offering: set GPU_AZ to one of: sa-east-1a, sa-east-1b" in out.splitlines()
    assert out.count("FAIL") == 1  # every other check still ran and passed
    assert "Traceback" not in out + err


def test_gpu_type_not_offered_anywhere_in_region(aws: None) -> None:
    inp = PreflightInput(**{**INPUT.__dict__, "gpu_instance_type": "g9.imaginary"})
    session, _ = default_quotas()

    results = by_name(run_checks(inp, session))

    assert results["gpu-az-offering"] == CheckResult(
        "gpu-az-offering",
        False,
        "g9.imaginary is not offered in any AZ of sa-east-1",
        "set GPU_NODE_TYPE to a type offered in sa-east-1, or deploy to another REGION",
    )
    # DescribeInstanceTypes rejects the name: reported, not raised.
    assert not results["gpu-efa"].ok
    assert results["gpu-efa"].detail.startswith("DescribeInstanceTypes failed: InvalidInstanceType:")
    assert results["gpu-efa"].fix == "set GPU_NODE_TYPE / SYSTEM_NODE_TYPE to an instance type that exists"


def test_gpu_type_without_efa_fails(aws: None) -> None:
    # moto (like AWS) says g6.xlarge has no EFA; only g6.8xlarge and larger have it.
    inp = PreflightInput(**{**INPUT.__dict__, "gpu_instance_type": "g6.xlarge", "gpu_vcpus": 4})
    session, _ = default_quotas()

    efa = by_name(run_checks(inp, session))["gpu-efa"]

    assert (efa.ok, efa.detail) == (False, "g6.xlarge does not support EFA")
    assert "network-info.efa-supported" in efa.fix


def test_missing_efa_field_is_unknown_not_supported(aws: None) -> None:
    # moto always returns EfaSupported, so the field is removed from that one operation's parsed
    # response to model an answer without it; every other call is still served by moto as is.
    session, _ = default_quotas()

    def drop_efa_supported(parsed: dict[str, Any], **_: Any) -> None:
        for info in parsed.get("InstanceTypes", []):
            info.get("NetworkInfo", {}).pop("EfaSupported", None)

    session.events.register("after-call.ec2.DescribeInstanceTypes", drop_efa_supported)

    efa = by_name(run_checks(INPUT, session))["gpu-efa"]

    assert efa.ok is False
    assert efa.detail == ("EFA support of g6.8xlarge unknown: DescribeInstanceTypes returned no NetworkInfo.EfaSupported")


def test_gpu_quota_too_small(aws: None, capsys: pytest.CaptureFixture[str]) -> None:
    inp = PreflightInput(**{**INPUT.__dict__, "gpu_node_count": 3})
    create_bootstrap_stack()
    session, stubber = default_quotas()

    assert main(inp, session) == 1

    stubber.assert_no_pending_responses()
    out, err = capsys.readouterr()
    assert "need 96 vCPU: 3 x 32 after the deploy" in out and "quota 64" in out
    assert (
        "fix: gpu-vcpu-quota: request an increase of Running On-Demand G and VT instances (L-DB2E81BA) "
        "in sa-east-1 to at least 96 in the Service Quotas console"
    ) in out.splitlines()
    assert out.count("FAIL") == 1
    assert "Traceback" not in out + err


def test_running_instances_count_against_their_own_quota_only(aws: None) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)

    def launch(instance_type: str, **extra: Any) -> str:
        reservation = ec2.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1, InstanceType=instance_type, **extra)
        return str(reservation["Instances"][0]["InstanceId"])

    launch("g5.xlarge")  # 4 vCPU, G and VT: counts
    launch("p4d.24xlarge")  # 96 vCPU, P: not the G quota
    launch("inf1.xlarge")  # 4 vCPU, Inf quota: neither G nor standard, although it starts with "i"
    launch("m5.large")  # 2 vCPU, standard: counts
    launch("g6.xlarge", InstanceMarketOptions={"MarketType": "spot"})  # Spot quota: not counted
    ec2.stop_instances(InstanceIds=[launch("g4dn.xlarge")])  # stopped: not counted
    session, stubber = quota_session((G_QUOTA_CODE, 64.0), (STANDARD_QUOTA_CODE, 8.0))

    results = by_name(run_checks(INPUT, session))

    stubber.assert_no_pending_responses()
    gpu, standard = results["gpu-vcpu-quota"], results["standard-vcpu-quota"]
    assert (gpu.ok, gpu.detail) == (
        False,
        "need 68 vCPU: 2 x 32 after the deploy, at most 64 during it (no node replaced); this cluster holds 0, other workloads 4; quota 64",
    )
    assert "to at least 68 in the Service Quotas console" in gpu.fix
    assert (standard.ok, standard.detail) == (
        True,
        "need 6 vCPU: 1 x 4 after the deploy, at most 4 during it (no node replaced); this cluster holds 0, other workloads 2; quota 8",
    )


def test_quota_falls_back_to_the_aws_default(aws: None) -> None:
    client = boto3.session.Session().client("service-quotas", region_name=REGION)
    stubber = Stubber(client)
    # No applied value for the account: Service Quotas answers NoSuchResourceException.
    stubber.add_client_error(
        "get_service_quota",
        service_error_code="NoSuchResourceException",
        expected_params={"ServiceCode": "ec2", "QuotaCode": G_QUOTA_CODE},
    )
    stubber.add_response(
        "get_aws_default_service_quota",
        {"Quota": {"ServiceCode": "ec2", "QuotaCode": G_QUOTA_CODE, "Value": 0.0}},
        {"ServiceCode": "ec2", "QuotaCode": G_QUOTA_CODE},
    )
    stubber.add_response(
        "get_service_quota",
        {"Quota": {"ServiceCode": "ec2", "QuotaCode": STANDARD_QUOTA_CODE, "Value": 5.0}},
        {"ServiceCode": "ec2", "QuotaCode": STANDARD_QUOTA_CODE},
    )
    stubber.activate()

    results = by_name(run_checks(INPUT, _SessionWithQuotas(client)))

    stubber.assert_no_pending_responses()
    assert results["gpu-vcpu-quota"].ok is False
    assert (
        results["gpu-vcpu-quota"].detail
        == "need 64 vCPU: 2 x 32 after the deploy, at most 64 during it (no node replaced); this cluster holds 0, other workloads 0; quota 0 (AWS default)"
    )
    assert (
        results["standard-vcpu-quota"].detail
        == "need 4 vCPU: 1 x 4 after the deploy, at most 4 during it (no node replaced); this cluster holds 0, other workloads 0; quota 5"
    )


def test_gpu_type_and_quota_code_mismatch(aws: None) -> None:
    inp = PreflightInput(**{**INPUT.__dict__, "gpu_quota_code": P_QUOTA_CODE, "gpu_quota_name": "Running On-Demand P instances"})
    session, _ = quota_session((STANDARD_QUOTA_CODE, 4.0))  # the GPU quota is never asked for

    gpu = by_name(run_checks(inp, session))["gpu-vcpu-quota"]

    assert gpu == CheckResult(
        "gpu-vcpu-quota",
        False,
        "g6.8xlarge counts against L-DB2E81BA, not Running On-Demand P instances (L-417A185B)",
        "pass the quota code of g6.8xlarge (L-DB2E81BA) to the preflight",
    )


def test_missing_bootstrap_stack(aws: None, capsys: pytest.CaptureFixture[str]) -> None:
    session, _ = default_quotas()

    assert main(INPUT, session) == 1

    out, err = capsys.readouterr()
    assert ["cdk-bootstrap", "FAIL", "stack", "CDKToolkit", "not", "found", "in", "sa-east-1"] in [line.split() for line in out.splitlines()]
    assert f"fix: cdk-bootstrap: run `npx cdk bootstrap aws://{ACCOUNT}/sa-east-1`" in out.splitlines()
    assert out.count("FAIL") == 1
    assert "Traceback" not in out + err


def test_custom_bootstrap_stack_name_in_fix(aws: None) -> None:
    create_bootstrap_stack()  # the default name exists, the configured one does not
    inp = PreflightInput(**{**INPUT.__dict__, "bootstrap_stack_name": "MyToolkit"})
    session, _ = default_quotas()

    bootstrap = by_name(run_checks(inp, session))["cdk-bootstrap"]

    assert bootstrap.fix == f"run `npx cdk bootstrap --toolkit-stack-name MyToolkit aws://{ACCOUNT}/sa-east-1`"


@pytest.mark.parametrize(
    ("status", "usable"),
    [
        ("CREATE_COMPLETE", True),
        ("UPDATE_COMPLETE", True),
        ("UPDATE_ROLLBACK_COMPLETE", True),
        ("ROLLBACK_COMPLETE", False),
        ("CREATE_FAILED", False),
        ("UPDATE_ROLLBACK_FAILED", False),
        ("DELETE_IN_PROGRESS", False),
        ("DELETE_COMPLETE", False),
        ("REVIEW_IN_PROGRESS", False),
    ],
)
def test_stack_status_usable(status: str, usable: bool) -> None:
    assert stack_status_usable(status) is usable


def test_region_not_enabled_skips_region_checks(aws: None) -> None:
    # moto lists ap-east-1 as an opt-in Region this account has not opted in to.
    inp = PreflightInput(**{**INPUT.__dict__, "region": "ap-east-1", "gpu_az": "ap-east-1a"})

    results = run_checks(inp, boto3.session.Session(region_name="ap-east-1"))

    assert [(r.name, r.ok) for r in results] == [("credentials", True)] + [(n, False) for n in ORDER[1:]]
    assert results[1].detail == f"ap-east-1 is not-opted-in for account {ACCOUNT}"
    assert results[1].fix.startswith(f"enable ap-east-1 for account {ACCOUNT} in the AWS console")
    assert {r.detail for r in results[2:]} == {"skipped: region ap-east-1 not usable"}


def test_no_credentials_fails_every_check(aws: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # mock_aws stays active (nothing can reach AWS); its fake keys and ours are removed.
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)

    assert main(INPUT) == 1  # main builds its own session

    out, err = capsys.readouterr()
    rows = {line.split()[0]: line.split(None, 2) for line in out.splitlines()[3 : 3 + len(ORDER)]}
    assert list(rows) == ORDER
    assert rows["credentials"] == ["credentials", "FAIL", "no AWS credentials found"]
    assert all(rows[name] == [name, "FAIL", "skipped: no credentials"] for name in ORDER[1:])
    assert ("fix: credentials: configure credentials (`aws configure`, `aws sso login` or AWS_PROFILE) and run the preflight again") in out.splitlines()
    assert out.rstrip().endswith(f"{len(ORDER)} of {len(ORDER)} checks failed.")
    assert "Traceback" not in out + err


def test_unknown_profile_fails_every_check(aws: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # boto3 raises ProfileNotFound while building the session, before any check.
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")

    assert main(INPUT) == 1

    out, err = capsys.readouterr()
    assert "AWS configuration error: The config profile (no-such-profile) could not be found" in out
    assert out.count("FAIL") == len(ORDER)
    assert "Traceback" not in out + err


def test_format_table() -> None:
    results = [
        CheckResult("credentials", True, "account 123456789012 as arn:aws:iam::123456789012:user/x", ""),
        CheckResult("gpu-vcpu-quota", False, "need 96 vCPU (3 x 32) + 0 running; quota 64", "request more"),
        CheckResult("cdk-bootstrap", False, "stack CDKToolkit not found in sa-east-1", "run bootstrap"),
    ]

    assert format_table(results).splitlines() == (
        [
            "CHECK           RESULT  DETAIL",
            "--------------  ------  ------",
            "credentials     PASS    account 123456789012 as arn:aws:iam::123456789012:user/x",
            "gpu-vcpu-quota  FAIL    need 96 vCPU (3 x 32) + 0 running; quota 64",
            "cdk-bootstrap   FAIL    stack CDKToolkit not found in sa-east-1",
            "",
            "fix: gpu-vcpu-quota: request more",
            "fix: cdk-bootstrap: run bootstrap",
        ]
    )
    assert "fix:" not in format_table(results[:1])


@pytest.mark.parametrize(
    ("instance_type", "code"),
    [
        ("g6.8xlarge", G_QUOTA_CODE),
        ("gr6.4xlarge", G_QUOTA_CODE),
        ("vt1.3xlarge", G_QUOTA_CODE),
        ("p5.48xlarge", P_QUOTA_CODE),
        ("m7i.xlarge", STANDARD_QUOTA_CODE),
        ("t3.micro", STANDARD_QUOTA_CODE),
        ("i4i.large", STANDARD_QUOTA_CODE),
        ("inf2.xlarge", None),
        ("trn1.2xlarge", None),
        ("dl1.24xlarge", None),
        ("hpc7a.96xlarge", None),
        ("x2idn.16xlarge", None),
    ],
)
def test_quota_code_of(instance_type: str, code: str | None) -> None:
    assert quota_code_of(instance_type) == code


# --- OBSERVABILITY=on: CloudWatch's OpenTelemetry metrics and the managed collectors ---------------------
# moto 5.2.5 has neither CloudWatch GetDataset nor AMP scrapers: both clients are Stubber'd, with the
# request parameters checked.

OBSERVED = replace(INPUT, observability=True, metrics_collector_alias="ray-llm-multinode-ray")


def _scraper(alias: str, status: str = "ACTIVE") -> dict[str, Any]:
    arn = f"arn:aws:aps:{REGION}:{ACCOUNT}:scraper/s-{abs(hash(alias)) % 10**8:08d}"
    return {
        "alias": alias,
        "scraperId": arn.rsplit("/", 1)[1],
        "arn": arn,
        "roleArn": f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/scraper.aps.amazonaws.com/AWSServiceRoleForAmazonPrometheusScraper_1",
        "status": {"statusCode": status},
        "createdAt": "2026-11-01T00:00:00Z",
        "lastModifiedAt": "2026-11-01T00:00:00Z",
        "source": {"eksConfiguration": {"clusterArn": f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/other", "subnetIds": ["subnet-1"]}},
        "destination": {"cloudWatchConfiguration": {"datasetArn": f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:dataset/default"}},
    }


def observed_session(*, dataset_error: str | None = None, scraper_pages: list[list[dict[str, Any]]] | None = None) -> tuple[Any, list[Stubber]]:
    quotas_session, quotas = default_quotas()
    cloudwatch = boto3.session.Session().client("cloudwatch", region_name=REGION)
    amp = boto3.session.Session().client("amp", region_name=REGION)
    cw_stub, amp_stub = Stubber(cloudwatch), Stubber(amp)
    if dataset_error:
        cw_stub.add_client_error("get_dataset", service_error_code=dataset_error, expected_params={"DatasetIdentifier": "default"})
    else:
        cw_stub.add_response(
            "get_dataset",
            {"DatasetId": "default", "Arn": f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:dataset/default"},
            {"DatasetIdentifier": "default"},
        )
        pages = scraper_pages or [[]]
        for number, page in enumerate(pages):
            last = number == len(pages) - 1
            answer: dict[str, Any] = {"scrapers": page, **({} if last else {"nextToken": f"t{number + 1}"})}
            amp_stub.add_response("list_scrapers", answer, {"nextToken": f"t{number}"} if number else {})
    for stub in (cw_stub, amp_stub):
        stub.activate()
    return _SessionWithQuotas(quotas_session._stubbed["service-quotas"], {"cloudwatch": cloudwatch, "amp": amp}), [quotas, cw_stub, amp_stub]


def test_metrics_destination_ready(aws: None) -> None:
    create_bootstrap_stack()
    session, stubs = observed_session(scraper_pages=[[_scraper("ray-llm-multinode-ray"), _scraper("team-a")], [_scraper("old", "DELETING")]])
    check = by_name(run_checks(OBSERVED, session))["metrics-destination"]
    for stub in stubs:
        stub.assert_no_pending_responses()
    # Our own collector is held, not another; one being deleted counts for nothing.
    assert (check.verdict, check.detail) == ("PASS", "dataset default ready; 1 other metrics collector(s) in sa-east-1")


def test_metrics_destination_missing_in_the_region_fails_with_the_way_out(aws: None) -> None:
    create_bootstrap_stack()
    session, _ = observed_session(dataset_error="ResourceNotFoundException")
    check = by_name(run_checks(OBSERVED, session))["metrics-destination"]
    assert (check.verdict, check.detail) == ("FAIL", "CloudWatch's OpenTelemetry metrics (PromQL) answer ResourceNotFoundException in sa-east-1")
    assert check.fix == "set OBSERVABILITY=off, or deploy in a Region that offers CloudWatch OpenTelemetry metrics"


def test_metrics_collectors_at_the_default_quota_warn(aws: None) -> None:
    create_bootstrap_stack()
    session, _ = observed_session(scraper_pages=[[_scraper(f"team-{i}") for i in range(10)]])
    check = by_name(run_checks(OBSERVED, session))["metrics-destination"]
    assert check.verdict == "WARN" and check.detail.endswith("10 other metrics collector(s) in sa-east-1")
    assert "default quota is 10 collectors per Region" in check.warning


def test_a_region_outside_the_documented_ones_is_warned_about(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Region table is documentation read on a date: a Region added since is warned about, not refused."""
    from preflight.observability_checks import METRICS_COLLECTOR_REGIONS

    assert REGION in METRICS_COLLECTOR_REGIONS and "ap-southeast-6" not in METRICS_COLLECTOR_REGIONS and "me-central-1" not in METRICS_COLLECTOR_REGIONS
    create_bootstrap_stack()
    session, _ = observed_session()
    monkeypatch.setattr("preflight.observability_checks.METRICS_COLLECTOR_REGIONS", frozenset({"us-east-1"}))
    check = by_name(run_checks(OBSERVED, session))["metrics-destination"]
    assert check.verdict == "WARN" and "sa-east-1 is not among the Regions AWS documented" in check.warning


def test_a_deployed_stack_left_out_of_the_configuration_is_refused(aws: None) -> None:
    """OBSERVABILITY back to off without destroying that stack first: the deploy would leave it running, blind."""
    create_bootstrap_stack()
    left_out = replace(INPUT, stacks_left_out=("ray-llm-multinode-observability",))
    session, _ = default_quotas()
    assert by_name(run_checks(left_out, session))["stacks-left-out"].detail == "none deployed"
    template = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}
    boto3.client("cloudformation", region_name=REGION).create_stack(StackName="ray-llm-multinode-observability", TemplateBody=json.dumps(template))
    session, _ = default_quotas()
    check = by_name(run_checks(left_out, session))["stacks-left-out"]
    assert check.verdict == "FAIL" and check.detail.startswith("ray-llm-multinode-observability deployed but not in this configuration")
    assert check.fix == "OBSERVABILITY=on make destroy STACKS=ray-llm-multinode-observability first (or keep OBSERVABILITY=on)"


@pytest.mark.parametrize(("code", "status"), [("ThrottlingException", 400), ("InternalFailure", 500)])
def test_a_transient_dataset_answer_is_a_warning_not_a_wrong_region(aws: None, code: str, status: int) -> None:
    create_bootstrap_stack()
    quotas_session, _ = default_quotas()
    cloudwatch = boto3.session.Session().client("cloudwatch", region_name=REGION)
    stub = Stubber(cloudwatch)
    stub.add_client_error("get_dataset", service_error_code=code, http_status_code=status, expected_params={"DatasetIdentifier": "default"})
    stub.activate()
    session = _SessionWithQuotas(quotas_session._stubbed["service-quotas"], {"cloudwatch": cloudwatch})
    check = by_name(run_checks(OBSERVED, session))["metrics-destination"]
    assert (check.verdict, check.warning) == ("WARN", "not checked: run the preflight again") and code in check.detail


def test_every_aws_call_of_the_checks_is_declared_in_the_registry(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CI deploy role's read-only actions are derived from preflight/registry.py: every call a full run
    makes (OBSERVABILITY=on, admin principals, a capacity reservation) must be among them."""
    import botocore.client

    from preflight.registry import read_only_actions

    called: set[str] = set()
    make_api_call = botocore.client.BaseClient._make_api_call

    def recording(self: Any, operation_name: str, api_params: Any) -> Any:
        prefix = self.meta.service_model.signing_name
        called.add(f"{ {'monitoring': 'cloudwatch'}.get(prefix, prefix) }:{operation_name}")
        return make_api_call(self, operation_name, api_params)

    create_bootstrap_stack()
    boto3.client("iam", region_name="us-east-1").create_role(RoleName="ci-deploy", AssumeRolePolicyDocument="{}")
    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", recording)
    session, _ = observed_session()
    session.events.register(
        "before-call.ec2.DescribeCapacityReservations",
        lambda **_: (botocore.awsrequest.AWSResponse("https://ec2", 200, {}, None), {"CapacityReservations": []}),
    )
    inp = replace(OBSERVED, admin_principal_arns=(f"arn:aws:iam::{ACCOUNT}:role/ci-deploy",), gpu_capacity_reservation_id="cr-0123456789abcdef0")
    run_checks(inp, session)
    assert {"sts:GetCallerIdentity", "iam:GetRole", "aps:ListScrapers", "cloudwatch:GetDataset", "servicequotas:GetServiceQuota"} <= called
    assert called - set(read_only_actions()) == set()
