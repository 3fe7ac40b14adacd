"""The fakes of the preflight tests: moto (in-process, offline) and what is stubbed where moto has no answer.

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

from preflight.registry import CHECKS
from preflight.runner import (
    G_QUOTA_CODE,
    STANDARD_QUOTA_CODE,
    CheckResult,
    PreflightInput,
)

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


OBSERVED = replace(INPUT, observability=True, metrics_collector_alias="ray-llm-multinode-ray")


def _scraper(alias: str, status: str = "ACTIVE") -> dict[str, Any]:
    arn = f"arn:aws:aps:{REGION}:{ACCOUNT}:scraper/s-{abs(hash(alias)) % 10**8:08d}"
    return {
        "alias": alias,
        "scraperId": arn.rsplit("/", 1)[1],
        "arn": arn,
        "roleArn": (
            f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/scraper.aps.amazonaws.com/AWSServiceRoleForAmazonPrometheusScraper_1"
        ),
        "status": {"statusCode": status},
        "createdAt": "2026-11-01T00:00:00Z",
        "lastModifiedAt": "2026-11-01T00:00:00Z",
        "source": {
            "eksConfiguration": {
                "clusterArn": f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/other",
                "subnetIds": ["subnet-1"],
            }
        },
        "destination": {
            "cloudWatchConfiguration": {"datasetArn": f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:dataset/default"}
        },
    }


def observed_session(
    *, dataset_error: str | None = None, scraper_pages: list[list[dict[str, Any]]] | None = None
) -> tuple[Any, list[Stubber]]:
    quotas_session, quotas = default_quotas()
    cloudwatch = boto3.session.Session().client("cloudwatch", region_name=REGION)
    amp = boto3.session.Session().client("amp", region_name=REGION)
    cw_stub, amp_stub = Stubber(cloudwatch), Stubber(amp)
    if dataset_error:
        cw_stub.add_client_error(
            "get_dataset", service_error_code=dataset_error, expected_params={"DatasetIdentifier": "default"}
        )
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
    return _SessionWithQuotas(quotas_session._stubbed["service-quotas"], {"cloudwatch": cloudwatch, "amp": amp}), [
        quotas,
        cw_stub,
        amp_stub,
    ]
