"""The NVIDIA and EFA Kubernetes device plugins (stacks/addons/: nvidia_device_plugin, efa_device_plugin),
installed on the GPU nodes once they exist.

Without them no node advertises nvidia.com/gpu or vpc.amazonaws.com/efa and the Ray workers stay
Pending forever (the AL2023 NVIDIA AMI ships drivers, not device plugins).
"""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from settings import Settings
from stacks import addons


class DevicePlugins(Construct):
    """Exposes ``nvidia`` and ``efa`` (eks.HelmChart), each depending on the GPU nodegroup."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        gpu_nodegroup: eks.Nodegroup,
        settings: Settings,
    ) -> None:
        super().__init__(scope, construct_id)
        charts = addons.install(self, "gpu", cluster=cluster, settings=settings)
        self.nvidia, self.efa = charts["nvidia-device-plugin"], charts["aws-efa-k8s-device-plugin"]
        for chart in charts.values():
            chart.node.add_dependency(gpu_nodegroup)
