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


def nvidia_values() -> dict[str, Any]:
    return gpu_node_scheduling()


EFA_IMAGE_REPOSITORY = "eks/aws-efa-k8s-device-plugin"


def efa_values(gpu_instance_type: str, *, image_registry: str) -> dict[str, Any]:
    # The chart schedules only on its own allow-list of EFA instance types; name ours, so a type newer
    # than the chart (cached by `make lookup`) still gets its EFA devices advertised.
    allow_list = {"keys": ["node.kubernetes.io/instance-type"], "values": [gpu_instance_type]}
    # The chart's default image is in us-west-2's registry: a cross-Region pull that an organization
    # policy denying other Regions fails, and the atomic release then times out 10 minutes in. The same
    # image from the deploy Region's EKS registry (the tag stays the chart's appVersion).
    image = {"repository": f"{image_registry}/{EFA_IMAGE_REPOSITORY}"}
    return {**gpu_node_scheduling(), "supportedInstanceLabels": allow_list, "image": image}


class DevicePlugins(Construct):
    """Exposes ``nvidia`` and ``efa`` (eks.HelmChart), each depending on the GPU nodegroup."""

    def __init__(
        self, scope: Construct, construct_id: str, *, cluster: eks.ICluster, gpu_nodegroup: eks.Nodegroup, gpu_instance_type: str, image_registry: str
    ) -> None:
        super().__init__(scope, construct_id)
        self.nvidia, self.efa = (
            pinned_release(self, construct, cluster=cluster, pin=pin, release=release, namespace=NAMESPACE, values=values)
            for construct, (pin, release), values in (
                ("NvidiaDevicePlugin", NVIDIA, nvidia_values()),
                ("EfaDevicePlugin", EFA, efa_values(gpu_instance_type, image_registry=image_registry)),
            )
        )
        for chart in (self.nvidia, self.efa):
            chart.node.add_dependency(gpu_nodegroup)
