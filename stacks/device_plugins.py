"""The NVIDIA and EFA Kubernetes device plugins, as pinned Helm releases on the GPU nodes.

Without them no node advertises nvidia.com/gpu or vpc.amazonaws.com/efa and the Ray workers stay
Pending forever (the AL2023 NVIDIA AMI ships drivers, not device plugins).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from settings import versions
from settings.scheduling import GPU_NODE_LABELS, gpu_toleration

HELM_TIMEOUT = Duration.minutes(10)  # below the 15-minute Lambda limit, so a failure is reported, not orphaned


def gpu_node_scheduling() -> dict[str, Any]:
    return {
        "nodeSelector": {"role": GPU_NODE_LABELS["role"]},
        "tolerations": [gpu_toleration()],
    }


class DevicePlugins(Construct):
    """Exposes ``nvidia`` and ``efa`` (eks.HelmChart), each depending on the GPU nodegroup."""

    def __init__(self, scope: Construct, construct_id: str, *, cluster: eks.ICluster, gpu_nodegroup: eks.Nodegroup) -> None:
        super().__init__(scope, construct_id)
        common: dict[str, Any] = {
            "cluster": cluster,
            "namespace": "kube-system",
            # atomic: a failed install rolls back instead of leaving a release in pending-upgrade.
            "atomic": True,
            "wait": True,
            "timeout": HELM_TIMEOUT,
        }
        self.nvidia = eks.HelmChart(
            self,
            "NvidiaDevicePlugin",
            chart=versions.NVIDIA_DEVICE_PLUGIN_CHART,
            repository=versions.NVIDIA_DEVICE_PLUGIN_REPOSITORY,
            version=versions.NVIDIA_DEVICE_PLUGIN_VERSION,
            release="nvidia-device-plugin",
            values=gpu_node_scheduling(),
            **common,
        )
        self.efa = eks.HelmChart(
            self,
            "EfaDevicePlugin",
            chart=versions.EFA_DEVICE_PLUGIN_CHART,
            repository=versions.EFA_DEVICE_PLUGIN_REPOSITORY,
            version=versions.EFA_DEVICE_PLUGIN_VERSION,
            release="aws-efa-k8s-device-plugin",
            values=gpu_node_scheduling(),
            **common,
        )
        for chart in (self.nvidia, self.efa):
            chart.node.add_dependency(gpu_nodegroup)
