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
from stacks.helm import pinned_release

# (pin, release name); both in kube-system.
NVIDIA = (versions.NVIDIA_DEVICE_PLUGIN, "nvidia-device-plugin")
EFA = (versions.EFA_DEVICE_PLUGIN, "aws-efa-k8s-device-plugin")
NAMESPACE = "kube-system"


def gpu_node_scheduling() -> dict[str, Any]:
    return {"nodeSelector": {"role": GPU_NODE_LABELS["role"]}, "tolerations": [gpu_toleration()]}


class DevicePlugins(Construct):
    """Exposes ``nvidia`` and ``efa`` (eks.HelmChart), each depending on the GPU nodegroup."""

    def __init__(self, scope: Construct, construct_id: str, *, cluster: eks.ICluster, gpu_nodegroup: eks.Nodegroup) -> None:
        super().__init__(scope, construct_id)
        self.nvidia, self.efa = (
            pinned_release(self, construct, cluster=cluster, pin=pin, release=release, namespace=NAMESPACE, values=gpu_node_scheduling())
            for construct, (pin, release) in (("NvidiaDevicePlugin", NVIDIA), ("EfaDevicePlugin", EFA))
        )
        for chart in (self.nvidia, self.efa):
            chart.node.add_dependency(gpu_nodegroup)
