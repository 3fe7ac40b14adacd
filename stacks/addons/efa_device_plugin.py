"""The AWS EFA Kubernetes device plugin: advertises vpc.amazonaws.com/efa (without it a pod gets no EFA
device and NIXL falls back to TCP)."""

from __future__ import annotations

from typing import Any, Final

from settings import Settings
from settings.versions import HelmChartPin
from stacks.addons.base import HelmAddon
from stacks.addons.nvidia_device_plugin import NAMESPACE, gpu_node_scheduling

IMAGE_REPOSITORY = "eks/aws-efa-k8s-device-plugin"

# This chart's versions carry a leading "v" (chart v0.5.29 ships image v0.5.20).
PIN: Final = HelmChartPin("https://aws.github.io/eks-charts", "aws-efa-k8s-device-plugin", "v0.5.29")


def values(settings: Settings) -> dict[str, Any]:
    # The chart schedules only on its own allow-list of EFA instance types; name ours, so a type newer
    # than the chart (cached by `make lookup`) still gets its EFA devices advertised.
    allow_list = {"keys": ["node.kubernetes.io/instance-type"], "values": [settings.gpu_node.name]}
    # The chart's default image is in us-west-2's registry: a cross-Region pull that an organization
    # policy denying other Regions fails, and the atomic release then times out 10 minutes in. The same
    # image from the deploy Region's EKS registry (the tag stays the chart's appVersion).
    image = {"repository": f"{settings.eks_addon_registry}/{IMAGE_REPOSITORY}"}
    return {**gpu_node_scheduling(), "supportedInstanceLabels": allow_list, "image": image}


ADDON = HelmAddon(
    construct_id="EfaDevicePlugin",
    stack="gpu",
    pin=lambda s: PIN,
    release="aws-efa-k8s-device-plugin",
    namespace=lambda s: NAMESPACE,
    values=values,
    purpose="advertises vpc.amazonaws.com/efa on the GPU nodes",
)
