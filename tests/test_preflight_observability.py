"""The preflight's OBSERVABILITY=on checks against moto and Stubbers (tests/preflight_fakes.py), and the
registry's declared AWS calls against every call a full run makes."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from botocore.stub import Stubber  # type: ignore[import-untyped]

from preflight.runner import (
    run_checks,
)
from tests import preflight_fakes
from tests.preflight_fakes import (
    ACCOUNT,
    INPUT,
    OBSERVED,
    REGION,
    _scraper,
    _SessionWithQuotas,
    by_name,
    create_bootstrap_stack,
    default_quotas,
    observed_session,
)

aws = preflight_fakes.aws  # fake credentials, everything served by moto


def test_metrics_destination_ready(aws: None) -> None:
    create_bootstrap_stack()
    session, stubs = observed_session(
        scraper_pages=[[_scraper("ray-llm-multinode-ray"), _scraper("team-a")], [_scraper("old", "DELETING")]]
    )
    check = by_name(run_checks(OBSERVED, session))["metrics-destination"]
    for stub in stubs:
        stub.assert_no_pending_responses()
    # Our own collector is held, not another; one being deleted counts for nothing.
    assert (check.verdict, check.detail) == ("PASS", "dataset default ready; 1 other metrics collector(s) in sa-east-1")


def test_metrics_destination_missing_in_the_region_fails_with_the_way_out(aws: None) -> None:
    create_bootstrap_stack()
    session, _ = observed_session(dataset_error="ResourceNotFoundException")
    check = by_name(run_checks(OBSERVED, session))["metrics-destination"]
    assert (check.verdict, check.detail) == (
        "FAIL",
        "CloudWatch's OpenTelemetry metrics (PromQL) answer ResourceNotFoundException in sa-east-1",
    )
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

    assert (
        REGION in METRICS_COLLECTOR_REGIONS
        and "ap-southeast-6" not in METRICS_COLLECTOR_REGIONS
        and "me-central-1" not in METRICS_COLLECTOR_REGIONS
    )
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
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName="ray-llm-multinode-observability", TemplateBody=json.dumps(template)
    )
    session, _ = default_quotas()
    check = by_name(run_checks(left_out, session))["stacks-left-out"]
    assert check.verdict == "FAIL" and check.detail.startswith(
        "ray-llm-multinode-observability deployed but not in this configuration"
    )
    assert (
        check.fix
        == "OBSERVABILITY=on make destroy STACKS=ray-llm-multinode-observability first (or keep OBSERVABILITY=on)"
    )


@pytest.mark.parametrize(("code", "status"), [("ThrottlingException", 400), ("InternalFailure", 500)])
def test_a_transient_dataset_answer_is_a_warning_not_a_wrong_region(aws: None, code: str, status: int) -> None:
    create_bootstrap_stack()
    quotas_session, _ = default_quotas()
    cloudwatch = boto3.session.Session().client("cloudwatch", region_name=REGION)
    stub = Stubber(cloudwatch)
    stub.add_client_error(
        "get_dataset",
        service_error_code=code,
        http_status_code=status,
        expected_params={"DatasetIdentifier": "default"},
    )
    stub.activate()
    session = _SessionWithQuotas(quotas_session._stubbed["service-quotas"], {"cloudwatch": cloudwatch})
    check = by_name(run_checks(OBSERVED, session))["metrics-destination"]
    assert (check.verdict, check.warning) == ("WARN", "not checked: run the preflight again") and code in check.detail


# Every optional input of the preflight (a PreflightInput field whose default leaves its check with nothing to do)
# with a value that switches it on: the full run below takes them all. Each field declares its own
# (preflight/context.py, `setting(PATH, DEFAULT, switched_on=…, on=…)`); these are the ones only this test can give (its
# account, Region and AZs, the base synth, what moto creates). A new check's optional input without one fails
# test_the_full_run_switches_every_optional_input_on; then an AWS call it makes that preflight/registry.py does not
# declare fails test_every_aws_call_of_the_checks_is_declared_in_the_registry.
THIS_TESTS: dict[str, Any] = {
    "vpc_azs": INPUT.vpc_azs,
    "redeploy": "the pinned base synth (tests/day2_helpers.py), compared with what moto holds",
    "admin_principal_arns": (f"arn:aws:iam::{ACCOUNT}:role/ci-deploy",),
    "execution_role_arn": (
        "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/cdk-hnb659fds-cfn-exec-role-${AWS::AccountId}-sa-east-1"
    ),
    "dlc_image": f"763104351884.dkr.ecr.{REGION}.amazonaws.com/ray:serve-llm-cuda-v1.0",
    # An exposed endpoint's: the certificate and the zone are moto's, made by the full run's test.
    "serve_certificate_arn": "the certificate moto issues in the full run",
    "serve_hosted_zone_id": "the hosted zone moto creates in the full run",
}


def _declared_switched_on() -> dict[str, Any]:
    from dataclasses import fields

    from preflight.context import PreflightInput

    return {f.name: f.metadata["switched_on"] for f in fields(PreflightInput) if "switched_on" in f.metadata}


SWITCHED_ON: dict[str, Any] = _declared_switched_on() | THIS_TESTS
# Optional inputs whose checks call no AWS API (tested against servers on 127.0.0.1 in their own tests).
NO_AWS_CALL = {
    "helm_charts": "the chart repositories' indexes over HTTPS (tests/test_preflight.py)",
    "environ": "where the tools run (a GitHub-hosted runner): read, never called",
}


def _optional_inputs() -> set[str]:
    from dataclasses import MISSING, fields

    from preflight.context import PreflightInput

    return {
        f.name
        for f in fields(PreflightInput)
        if f.default_factory is not MISSING or (f.default is not MISSING and not f.default)
    }


def test_the_full_run_switches_every_optional_input_on() -> None:
    missing = _optional_inputs() - set(SWITCHED_ON) - set(NO_AWS_CALL)
    assert missing == set(), (
        f"declare the optional input(s) {sorted(missing)} with setting(PATH, DEFAULT, switched_on=VALUE, on={{...}}) in"
        " preflight/context.py"
    )
    assert set(SWITCHED_ON) | set(NO_AWS_CALL) <= _optional_inputs()


def test_every_aws_call_of_the_checks_is_declared_in_the_registry(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CI deploy role's read-only actions are derived from preflight/registry.py: every call a full run makes
    (every optional input switched on: SWITCHED_ON, an exposed endpoint's certificate and zone included) must be among
    them.
    """
    import botocore.client

    from preflight.registry import read_only_actions
    from tests.day2_helpers import redeploy_of

    called: set[str] = set()
    make_api_call = botocore.client.BaseClient._make_api_call

    def recording(self: Any, operation_name: str, api_params: Any) -> Any:
        prefix = self.meta.service_model.signing_name
        called.add(f"{ {'monitoring': 'cloudwatch'}.get(prefix, prefix) }:{operation_name}")
        return make_api_call(self, operation_name, api_params)

    create_bootstrap_stack()
    boto3.client("iam", region_name="us-east-1").create_role(RoleName="ci-deploy", AssumeRolePolicyDocument="{}")
    # The endpoint's checks read a certificate and a hosted zone (moto's: the session's other clients).
    certificate = boto3.client("acm", region_name=REGION).request_certificate(DomainName="llm.example.com")[
        "CertificateArn"
    ]
    zone = boto3.client("route53", region_name="us-east-1").create_hosted_zone(
        Name="example.com", CallerReference="full-run"
    )["HostedZone"]["Id"]
    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", recording)
    session, _ = observed_session()
    session.events.register(
        "before-call.ec2.DescribeCapacityReservations",
        lambda **_: (botocore.awsrequest.AWSResponse("https://ec2", 200, {}, None), {"CapacityReservations": []}),
    )
    # moto 5.2.5 has neither ElastiCache call of the GCS store's check: a Stubber answers them.
    elasticache = boto3.session.Session().client("elasticache", region_name=REGION)
    stub = Stubber(elasticache)
    stub.add_response("describe_reserved_cache_nodes_offerings", {"ReservedCacheNodesOfferings": []})
    stub.add_response("describe_cache_engine_versions", {"CacheEngineVersions": []})
    stub.activate()
    session._stubbed["elasticache"] = elasticache
    endpoint = {
        "serve_exposure": "internal",
        "serve_certificate_arn": certificate,
        "serve_hosted_zone_id": zone.split("/")[-1],
    }
    inp = replace(INPUT, **(SWITCHED_ON | {"redeploy": redeploy_of()} | endpoint))
    results = run_checks(inp, session)
    assert {
        "sts:GetCallerIdentity",
        "iam:GetRole",
        "aps:ListScrapers",
        "cloudwatch:GetDataset",
        "servicequotas:GetServiceQuota",
    } <= called
    assert {"cloudformation:GetTemplate", "s3:ListObjectsV2", "ecr:BatchGetImage"} & called, sorted(called)
    assert {"acm:DescribeCertificate", "route53:GetHostedZone"} <= called
    assert called - set(read_only_actions()) == set(), [r for r in results if not r.ok]
