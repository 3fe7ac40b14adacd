"""The KubeRay operator: reconciles the RayService into a RayCluster; on the system nodes.

Its pin is settings.versions.KUBERAY_OPERATOR (KUBERAY_VERSION may only be the version of the CRDs the
repository carries, which the settings check), its namespace KUBERAY_NAMESPACE.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from settings import versions
from settings.scheduling import SYSTEM_NODE_LABELS
from stacks.addons.base import HelmAddon

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

    def to_values(self) -> dict[str, Any]:
        return {
            "nodeSelector": dict(self.node_selector),
            "resources": {
                "requests": {"cpu": self.cpu_request, "memory": self.memory_request},
                "limits": {"cpu": self.cpu_limit, "memory": self.memory_limit},
            },
        }


ADDON = HelmAddon(
    construct_id="KubeRayOperator",
    stack="system",
    pin=lambda s: replace(versions.KUBERAY_OPERATOR, version=s.kuberay_version),
    release=RELEASE_NAME,
    namespace=lambda s: s.kuberay_namespace,
    values=lambda s: KubeRayOperatorValues().to_values(),
    # A KUBERAY_NAMESPACE change is refused by the preflight: the chart's cluster-scoped objects have fixed names.
    create_namespace=True,
    purpose="reconciles the RayService into a RayCluster",
)
