"""The preflight checks (preflight.runner runs preflight/registry.py) against moto: the account, the GPU
type, quotas, the bootstrap, the table. The fakes and what is stubbed: tests/preflight_fakes.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from botocore.stub import Stubber  # type: ignore[import-untyped]

from preflight.runner import (
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
from tests import preflight_fakes
from tests.preflight_fakes import (
    ACCOUNT,
    INPUT,
    NO_ASSEMBLY,
    ORDER,
    REGION,
    _SessionWithQuotas,
    by_name,
    create_bootstrap_stack,
    default_quotas,
    quota_session,
)

aws = preflight_fakes.aws  # fake credentials, everything served by moto


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
        *[
            (name, True, NO_ASSEMBLY, "")
            for name in (
                "stack-states",
                "kubernetes-version",
                "ray-cluster-change",
                "stack-changes",
                "removed-exports",
                "kuberay-crds",
                "control-plane-log-group",
            )
        ],
        (
            "gpu-vcpu-quota",
            True,
            (
                "need 64 vCPU: 2 x 32 after the deploy, at most 64 during it (no node replaced); this cluster holds 0,"
                " other workloads 0; quota 64"
            ),
            "",
        ),
        (
            "standard-vcpu-quota",
            True,
            (
                "need 4 vCPU: 1 x 4 after the deploy, at most 4 during it (no node replaced); this cluster holds 0,"
                " other workloads 0; quota 4"
            ),
            "",
        ),
        ("cdk-bootstrap", True, "stack CDKToolkit is CREATE_COMPLETE, bootstrap version 28", ""),
        (
            "admin-principals",
            True,
            "none listed (only the CloudFormation execution role and the kubectl provider will be admins)",
            "",
        ),
        (
            "api-endpoint",
            True,
            "public-and-private, public side open to 0.0.0.0/0 (IAM authentication still applies)",
            "",
        ),
        ("model-source", True, "not set", ""),
        ("gcs-store", True, "GCS_FAULT_TOLERANCE=off: no store", ""),
        ("dlc-image", True, "not set", ""),
        ("endpoint-certificate", True, "no certificate (SERVE_EXPOSURE=cluster, or plain HTTP inside the VPC)", ""),
        ("endpoint-hosted-zone", True, "no SERVE_HOSTED_ZONE_ID: no DNS record to create", ""),
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
        (
            {"public_access_cidrs": ("203.0.113.0/24",)},
            "PASS",
            "public-and-private, public side limited to 203.0.113.0/24",
        ),
        # Nothing tells whether this machine is in the VPC: said, not refused.
        ({"endpoint_access": "private"}, "WARN", "private only: reachable from inside the VPC"),
        (
            {"endpoint_access": "private", "environ": {"RUNNER_ENVIRONMENT": "self-hosted"}},
            "WARN",
            "private only: reachable from inside the VPC",
        ),
    ):
        session, _ = default_quotas()
        endpoint = by_name(run_checks(replace(INPUT, **changes), session))["api-endpoint"]
        assert (endpoint.verdict, endpoint.detail) == (verdict, detail)


def test_a_private_endpoint_from_a_github_hosted_runner_is_refused(aws: None) -> None:
    """The deploy would work (the kubectl provider is in the VPC), then kubeconfig, wait-ready, verify and the
    teardown's first step could not reach the API from the hosted runner."""
    create_bootstrap_stack()
    session, _ = default_quotas()
    inp = replace(
        INPUT, endpoint_access="private", environ={"RUNNER_ENVIRONMENT": "github-hosted", "GITHUB_ACTIONS": "true"}
    )
    endpoint = by_name(run_checks(inp, session))["api-endpoint"]
    assert endpoint.verdict == "FAIL"
    assert "GitHub-hosted runner" in endpoint.detail and "CLUSTER_RUNNER" in endpoint.fix


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
        "in sa-east-1 to at least 96 in the Service Quotas console" in out.splitlines()
    )
    assert out.count("FAIL") == 1
    assert "Traceback" not in out + err


def test_running_instances_count_against_their_own_quota_only(aws: None) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)

    def launch(instance_type: str, **extra: Any) -> str:
        reservation = ec2.run_instances(
            ImageId="ami-12345678", MinCount=1, MaxCount=1, InstanceType=instance_type, **extra
        )
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
        (
            "need 68 vCPU: 2 x 32 after the deploy, at most 64 during it (no node replaced); this cluster holds 0,"
            " other workloads 4; quota 64"
        ),
    )
    assert "to at least 68 in the Service Quotas console" in gpu.fix
    assert (standard.ok, standard.detail) == (
        True,
        (
            "need 6 vCPU: 1 x 4 after the deploy, at most 4 during it (no node replaced); this cluster holds 0, other"
            " workloads 2; quota 8"
        ),
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
        == "need 64 vCPU: 2 x 32 after the deploy, at most 64 during it (no node replaced); this cluster holds 0, other"
        " workloads 0; quota 0 (AWS default)"
    )
    assert (
        results["standard-vcpu-quota"].detail
        == "need 4 vCPU: 1 x 4 after the deploy, at most 4 during it (no node replaced); this cluster holds 0, other"
        " workloads 0; quota 5"
    )


def test_gpu_type_and_quota_code_mismatch(aws: None) -> None:
    inp = PreflightInput(
        **{**INPUT.__dict__, "gpu_quota_code": P_QUOTA_CODE, "gpu_quota_name": "Running On-Demand P instances"}
    )
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
    assert ["cdk-bootstrap", "FAIL", "stack", "CDKToolkit", "not", "found", "in", "sa-east-1"] in [
        line.split() for line in out.splitlines()
    ]
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


def test_no_credentials_is_one_line(
    aws: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # mock_aws stays active (nothing can reach AWS); its fake keys and ours are removed.
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)

    assert main(INPUT) == 1  # main builds its own session

    out, err = capsys.readouterr()
    # One cause, one line: every other check would fail for it (run_checks still reports each, for the callers).
    assert out == ""
    assert err.splitlines() == [
        "error: preflight: no AWS credentials found; configure credentials (`aws configure`, `aws sso login` or"
        " AWS_PROFILE) and run the preflight again"
    ]
    results = run_checks(INPUT, boto3.session.Session(region_name=REGION))
    assert [r.detail for r in results[1:]] == ["skipped: no credentials"] * (len(ORDER) - 1)


def test_unknown_profile_is_one_line(
    aws: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # boto3 raises ProfileNotFound while building the session, before any check.
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")

    assert main(INPUT) == 1

    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert "AWS configuration error: The config profile (no-such-profile) could not be found" in err
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
