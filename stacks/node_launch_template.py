"""Launch template settings every nodegroup shares: IMDSv2 only and an encrypted gp3 root volume."""

from __future__ import annotations

from typing import cast

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks

# Hop limit 1: IMDS answers the node itself (kubelet, hostNetwork add-ons) but not pods behind the
# container network, so a pod cannot borrow the node role. Pods that need AWS use EKS Pod Identity.
IMDS_HOP_LIMIT = 1
ROOT_DEVICE = "/dev/xvda"  # the root device of the EKS AL2023 AMIs


def pin_kubernetes_version(nodegroup: eks.Nodegroup, kubernetes_version: str) -> None:
    """Nodes at the control plane's version: without it a K8S_VERSION change upgrades only the control
    plane, and EKS refuses the next upgrade while nodes lag two versions behind."""
    cast(eks.CfnNodegroup, nodegroup.node.default_child).version = kubernetes_version


def rolling_update(nodegroup: eks.Nodegroup, strategy: str) -> None:
    """One node at a time. "default": EKS launches new nodes first (up to two per AZ of the group) and
    then drains the old ones; "minimal": it drains and terminates first, so the update needs no quota or
    placement-group room beyond the group's size (settings.Settings.gpu_update_surge_nodes)."""
    cfn = cast(eks.CfnNodegroup, nodegroup.node.default_child)
    cfn.add_property_override("UpdateConfig", {"MaxUnavailable": 1, "UpdateStrategy": strategy.upper()})


def metadata_options() -> ec2.CfnLaunchTemplate.MetadataOptionsProperty:
    return ec2.CfnLaunchTemplate.MetadataOptionsProperty(
        http_endpoint="enabled",
        http_tokens="required",
        http_put_response_hop_limit=IMDS_HOP_LIMIT,
    )


def root_volume(size_gib: int) -> ec2.CfnLaunchTemplate.BlockDeviceMappingProperty:
    return ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
        device_name=ROOT_DEVICE,
        ebs=ec2.CfnLaunchTemplate.EbsProperty(
            volume_size=size_gib, volume_type="gp3", encrypted=True, delete_on_termination=True
        ),
    )
