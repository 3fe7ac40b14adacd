"""What a Helm add-on declares, once: its pinned chart, release, namespace, values from the Settings, when it
is installed and which stack (and construct) installs it. The stacks, the preflight's chart-index check,
dist/helm/ and the docs' chart table are derived from the registry (stacks/addons/__init__.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from settings import Settings
from settings.versions import HelmChartPin
from stacks.helm import pinned_release


def _always(_: Settings) -> bool:
    return True


@dataclass(frozen=True)
class HelmAddon:
    construct_id: str  # the construct's id: it names the release's logical ID, so it never changes
    stack: str  # the part of Settings.stack_names whose stack installs it
    pin: Callable[[Settings], HelmChartPin]
    release: str
    namespace: Callable[[Settings], str]
    values: Callable[[Settings], dict[str, Any]]
    enabled: Callable[[Settings], bool] = field(default=_always)
    create_namespace: bool = False
    purpose: str = ""  # one line for the docs' chart table

    def install(self, scope: Construct, *, cluster: eks.ICluster, settings: Settings) -> eks.HelmChart:
        return pinned_release(
            scope,
            self.construct_id,
            cluster=cluster,
            pin=self.pin(settings),
            release=self.release,
            namespace=self.namespace(settings),
            values=self.values(settings),
            create_namespace=self.create_namespace,
        )


def spread_affinity(match_labels: dict[str, str]) -> dict[str, Any]:
    """Pods of one Deployment preferably on different AZs, then on different nodes (preferred: with fewer system
    nodes than replicas they still schedule)."""
    selector = {"matchLabels": dict(match_labels)}
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": {"labelSelector": selector, "topologyKey": "topology.kubernetes.io/zone"}},
                {"weight": 50, "podAffinityTerm": {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}},
            ]
        }
    }
