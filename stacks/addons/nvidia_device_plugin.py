"""The NVIDIA Kubernetes device plugin: advertises nvidia.com/gpu. The AL2023 NVIDIA AMI ships the driver
and the container toolkit, not this plugin: without it the Ray workers stay Pending forever."""

from __future__ import annotations

from typing import Any, Final

from settings import Settings
from settings.scheduling import GPU_NODE_LABELS, gpu_toleration
from settings.versions import HelmChartPin
from stacks.addons.base import HelmAddon

NAMESPACE = "kube-system"

PIN: Final = HelmChartPin("https://nvidia.github.io/k8s-device-plugin", "nvidia-device-plugin", "0.20.1")


def gpu_node_scheduling() -> dict[str, Any]:
    return {"nodeSelector": {"role": GPU_NODE_LABELS["role"]}, "tolerations": [gpu_toleration()]}


def values(_: Settings) -> dict[str, Any]:
    return gpu_node_scheduling()


ADDON = HelmAddon(
    construct_id="NvidiaDevicePlugin",
    stack="gpu",
    pin=lambda s: PIN,
    release="nvidia-device-plugin",
    namespace=lambda s: NAMESPACE,
    values=values,
    purpose="advertises nvidia.com/gpu on the GPU nodes",
)
