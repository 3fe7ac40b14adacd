"""The KubeRay operator: reconciles the RayService into a RayCluster; on the system nodes.

Its pin is settings.versions.KUBERAY_OPERATOR (KUBERAY_VERSION may only be the version of the CRDs the
repository carries, which the settings check), its namespace KUBERAY_NAMESPACE.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from settings import versions
from settings.scheduling import SYSTEM_NODE_LABELS
from stacks.addons.base import HelmAddon, spread_affinity

RELEASE_NAME = "kuberay-operator"


@dataclass(frozen=True)
class KubeRayOperatorValues:
    """The chart values we set; everything else keeps the chart's default."""

    # On the system nodes: the GPU nodes are for inference (and are tainted anyway).
    node_selector: dict[str, str] = field(default_factory=lambda: dict(SYSTEM_NODE_LABELS))
    cpu_request: str = "100m"
    memory_request: str = "512Mi"
    cpu_limit: str = "500m"
    memory_limit: str = "512Mi"

    # SYSTEM_NODE_COUNT >= 2: two operators (one leads, by leader election) spread over the system nodes' AZs and
    # hosts, so that losing a node does not leave the RayService without an operator until it is rescheduled.
    replicas: int = 1

    def to_values(self) -> dict[str, Any]:
        spread = (
            {"replicas": self.replicas, "affinity": spread_affinity({"app.kubernetes.io/name": RELEASE_NAME})}
            if self.replicas > 1
            else {}
        )
        return {
            **spread,
            "nodeSelector": dict(self.node_selector),
            "resources": {
                "requests": {"cpu": self.cpu_request, "memory": self.memory_request},
                "limits": {"cpu": self.cpu_limit, "memory": self.memory_limit},
            },
        }


def disruption_budget(namespace: str) -> dict[str, Any]:
    """A PodDisruptionBudget for the two operator pods (the chart has none)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": RELEASE_NAME, "namespace": namespace},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": RELEASE_NAME}}},
    }


ADDON = HelmAddon(
    construct_id="KubeRayOperator",
    stack="system",
    pin=lambda s: replace(versions.KUBERAY_OPERATOR, version=s.kuberay_version),
    release=RELEASE_NAME,
    namespace=lambda s: s.kuberay_namespace,
    values=lambda s: KubeRayOperatorValues(replicas=2 if s.system_node_count >= 2 else 1).to_values(),
    # A KUBERAY_NAMESPACE change is refused by the preflight: the chart's cluster-scoped objects have fixed names.
    create_namespace=True,
    purpose="reconciles the RayService into a RayCluster",
)
