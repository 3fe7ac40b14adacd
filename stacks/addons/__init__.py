"""Every Helm add-on, one module each (pin, release, namespace, values, deploy-time values, Pod Identity, when,
which stack), registered here in install order. A new chart is one module, one line below, and its test."""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from settings import Settings
from settings.versions import HelmChartPin
from stacks.addons import (
    aws_load_balancer_controller,
    cluster_autoscaler,
    efa_device_plugin,
    kuberay_operator,
    nvidia_device_plugin,
    secrets_store_provider,
)
from stacks.addons.base import PLACEHOLDERS, HelmAddon

HELM_ADDONS: tuple[HelmAddon, ...] = (
    kuberay_operator.ADDON,
    nvidia_device_plugin.ADDON,
    efa_device_plugin.ADDON,
    secrets_store_provider.ADDON,
    cluster_autoscaler.ADDON,
    aws_load_balancer_controller.ADDON,
)


def enabled_addons(settings: Settings, stack: str | None = None) -> tuple[HelmAddon, ...]:
    return tuple(a for a in HELM_ADDONS if a.enabled(settings) and (stack is None or a.stack == stack))


def install(scope: Construct, stack: str, *, cluster: eks.ICluster, settings: Settings) -> dict[str, eks.HelmChart]:
    """Install the stack's enabled add-ons into `scope`; release name -> chart."""
    return {a.release: a.install(scope, cluster=cluster, settings=settings) for a in enabled_addons(settings, stack)}


def chart_pins(settings: Settings) -> tuple[HelmChartPin, ...]:
    """Every chart this configuration installs (the preflight checks each against its repository's index)."""
    return tuple(a.pin(settings) for a in enabled_addons(settings))


def chart_table_markdown(settings: Settings) -> str:
    """The docs' table of the charts (with the defaults; deploy-time values as placeholders)."""
    rows = [
        "| Chart | Version | Repository | Release / namespace | Stack | Pod Identity · set at deploy | What for |",
        "|---|---|---|---|---|---|---|",
    ]
    for addon in HELM_ADDONS:
        pin = addon.pin(settings)
        late = addon.deploy_values(PLACEHOLDERS) if addon.deploy_values else {}
        extras = ([f"`{addon.pod_identity.service_account}`"] if addon.pod_identity else []) + [
            f"`{key}`: {value}" for key, value in late.items()
        ]
        rows.append(
            f"| `{pin.chart}` | {pin.version} | {pin.repository} | `{addon.release}` / `{addon.namespace(settings)}` |"
            f" `{addon.stack}` | {'; '.join(extras) or '-'} | {addon.purpose} |"
        )
    return "\n".join(rows)
