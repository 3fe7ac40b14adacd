"""The preflight checks of the GPU type against moto: offered in GPU_AZ, with EFA, its quota family."""

from __future__ import annotations

from typing import Any

import pytest

from preflight.runner import (
    P_QUOTA_CODE,
    STANDARD_QUOTA_CODE,
    CheckResult,
    PreflightInput,
    main,
    run_checks,
)
from tests import preflight_fakes
from tests.preflight_fakes import (
    INPUT,
    by_name,
    create_bootstrap_stack,
    default_quotas,
    quota_session,
)

aws = preflight_fakes.aws  # fake credentials, everything served by moto


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
        == "need 192 vCPU: 1 x 192 after the deploy, at most 192 during it (no node replaced); this cluster holds 0,"
        " other workloads 0; quota 192"
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
    assert efa.detail == "EFA support of g6.8xlarge unknown: DescribeInstanceTypes returned no NetworkInfo.EfaSupported"
