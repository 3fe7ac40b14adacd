"""Helm releases installed the same way everywhere: pinned, atomic, waited for, within the Lambda limit."""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from settings.versions import HelmChartPin

# Below the kubectl provider's 15-minute Lambda limit, so a failure is reported, not orphaned.
HELM_TIMEOUT = Duration.minutes(10)


def pinned_release(
    scope: Construct,
    construct_id: str,
    *,
    cluster: eks.ICluster,
    pin: HelmChartPin,
    release: str,
    namespace: str,
    values: dict[str, Any],
    create_namespace: bool = False,
) -> eks.HelmChart:
    return eks.HelmChart(
        scope,
        construct_id,
        cluster=cluster,
        repository=pin.repository,
        chart=pin.chart,
        version=pin.version,
        release=release,
        namespace=namespace,
        create_namespace=create_namespace,
        values=values,
        wait=True,
        # A failed install or upgrade rolls back instead of leaving the release in pending-upgrade.
        atomic=True,
        timeout=HELM_TIMEOUT,
    )
