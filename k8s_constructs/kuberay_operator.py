"""Typed values of the KubeRay operator Helm release."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from settings import Settings, versions
from settings.scheduling import SYSTEM_NODE_LABELS

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


@dataclass(frozen=True)
class KubeRayRelease:
    namespace: str  # KUBERAY_NAMESPACE
    pin: versions.HelmChartPin = versions.KUBERAY_OPERATOR
    release: str = RELEASE_NAME
    values: KubeRayOperatorValues = field(default_factory=KubeRayOperatorValues)


def kuberay_release(settings: Settings) -> KubeRayRelease:
    """The release as configured: KUBERAY_VERSION and KUBERAY_NAMESPACE."""
    return KubeRayRelease(pin=replace(versions.KUBERAY_OPERATOR, version=settings.kuberay_version), namespace=settings.kuberay_namespace)
