"""Helm releases installed the same way everywhere: pinned, atomic, waited for, within the Lambda limit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

# Below the kubectl provider's 15-minute Lambda limit, so a failure is reported, not orphaned.
HELM_TIMEOUT = Duration.minutes(10)


@dataclass(frozen=True)
class ChartRef:
    chart: str
    repository: str
    version: str
    release: str
    namespace: str


def pinned_release(
    scope: Construct, construct_id: str, *, cluster: eks.ICluster, ref: ChartRef, values: dict[str, Any], create_namespace: bool = False
) -> eks.HelmChart:
    return eks.HelmChart(
        scope,
        construct_id,
        cluster=cluster,
        chart=ref.chart,
        repository=ref.repository,
        version=ref.version,
        release=ref.release,
        namespace=ref.namespace,
        create_namespace=create_namespace,
        values=values,
        wait=True,
        # A failed install or upgrade rolls back instead of leaving the release in pending-upgrade.
        atomic=True,
        timeout=HELM_TIMEOUT,
    )
