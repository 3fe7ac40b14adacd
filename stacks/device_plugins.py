"""The NVIDIA and EFA Kubernetes device plugins, as pinned Helm releases on the GPU nodes.

Without them no node advertises nvidia.com/gpu or vpc.amazonaws.com/efa and the Ray workers stay
Pending forever (the AL2023 NVIDIA AMI ships drivers, not device plugins).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from settings import versions
from settings.scheduling import GPU_NODE_LABELS, gpu_toleration
from stacks.helm import ChartRef, pinned_release

NVIDIA = ChartRef(
    chart=versions.NVIDIA_DEVICE_PLUGIN_CHART,
    repository=versions.NVIDIA_DEVICE_PLUGIN_REPOSITORY,
    version=versions.NVIDIA_DEVICE_PLUGIN_VERSION,
    release="nvidia-device-plugin",
    namespace="kube-system",
)
EFA = ChartRef(
    chart=versions.EFA_DEVICE_PLUGIN_CHART,
    repository=versions.EFA_DEVICE_PLUGIN_REPOSITORY,
    version=versions.EFA_DEVICE_PLUGIN_VERSION,
    release="aws-efa-k8s-device-plugin",
    namespace="kube-system",
)


def gpu_node_scheduling() -> dict[str, Any]:
    return {"nodeSelector": {"role": GPU_NODE_LABELS["role"]}, "tolerations": [gpu_toleration()]}


class DevicePlugins(Construct):
    """Exposes ``nvidia`` and ``efa`` (eks.HelmChart), each depending on the GPU nodegroup."""

    def __init__(self, scope: Construct, construct_id: str, *, cluster: eks.ICluster, gpu_nodegroup: eks.Nodegroup) -> None:
        super().__init__(scope, construct_id)
        self.nvidia = pinned_release(self, "NvidiaDevicePlugin", cluster=cluster, ref=NVIDIA, values=gpu_node_scheduling())
        self.efa = pinned_release(self, "EfaDevicePlugin", cluster=cluster, ref=EFA, values=gpu_node_scheduling())
        for chart in (self.nvidia, self.efa):
            chart.node.add_dependency(gpu_nodegroup)
