"""An EFA GPU nodegroup: one AZ, one EFA interface per network card, a cluster placement group.

This is what eksctl's `efaEnabled: true` does, done explicitly so every part is in the template.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from aws_cdk import Fn
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from settings.instance_types import InstanceFacts
from settings.scheduling import GPU_NODE_LABELS, GPU_TAINT_KEY, GPU_TAINT_VALUE
from stacks.cluster_stack import node_role
from stacks.node_launch_template import metadata_options, pin_kubernetes_version, rolling_update, root_volume

GPU_TAINT = eks.TaintSpec(key=GPU_TAINT_KEY, value=GPU_TAINT_VALUE, effect=eks.TaintEffect.NO_SCHEDULE)

# nodeadm (AL2023) turns the instance-store NVMe disks into one RAID0 array (mounted at
# settings.scheduling.LOCAL_NVME_MOUNT) and moves containerd's and kubelet's state onto it: image layers
# and emptyDirs then live on local NVMe instead of EBS. EKS merges this NodeConfig with its own.
_NVME_NODECONFIG = """MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="BOUNDARY"

--BOUNDARY
Content-Type: application/node.eks.aws

apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  instance:
    localStorage:
      strategy: RAID0

--BOUNDARY--
"""


def efa_network_interfaces(
    instance: InstanceFacts, security_group_ids: list[str]
) -> list[ec2.CfnLaunchTemplate.NetworkInterfaceProperty]:
    """One EFA interface per network card: card 0 is the primary (device 0), every other card's is device 1.

    Security groups go on each interface (a launch template with interfaces may not carry its own) and
    no interface names a subnet: the nodegroup's single subnet decides it.
    """
    return [
        ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
            device_index=0 if card == 0 else 1,
            network_card_index=card,
            interface_type="efa",
            groups=security_group_ids,
            # Private nodes: never a public address, whatever the subnet's default.
            associate_public_ip_address=False,
            delete_on_termination=True,
        )
        for card in range(instance.network_cards)
    ]


@dataclass(frozen=True)
class EfaNodegroupProps:
    cluster: eks.ICluster
    cluster_security_group_id: str
    vpc: ec2.IVpc
    subnet: ec2.ISubnet
    nodegroup_name: str
    kubernetes_version: str
    instance: InstanceFacts
    node_count: int  # the minimum (and the size at creation)
    root_volume_gib: int
    update_strategy: str  # settings.gpu_update_strategy: "minimal" | "default"
    placement_group: str = "on"  # settings.gpu_placement_group: "on" (create one), "off", or an existing group's name
    capacity_reservation_id: str = ""  # "" = none
    capacity_block: bool = False  # the reservation is a Capacity Block for ML
    max_node_count: int = 0  # PREFILL/DECODE_MAX_REPLICAS: the Cluster Autoscaler may grow it to this; 0 = node_count
    extra_labels: Mapping[str, str] = field(default_factory=dict)


class EfaNodegroup(Construct):
    """Managed nodegroup of EFA GPU nodes; exposes ``nodegroup``, ``security_group``, ``placement_group`` (None
    unless this construct creates it) and ``launch_template``."""

    def __init__(self, scope: Construct, construct_id: str, *, props: EfaNodegroupProps) -> None:
        super().__init__(scope, construct_id)

        # EFA's OS-bypass traffic must be allowed to and from the same security group. The cluster
        # security group allows that today (eksctl relies on it from Kubernetes 1.33), but it is EKS's
        # to change; this dedicated group makes the rule part of our template, and scopes it to the GPU
        # nodes.
        self.security_group = ec2.SecurityGroup(
            self,
            "EfaSecurityGroup",
            vpc=props.vpc,
            allow_all_outbound=False,
            description="EFA: all traffic within the GPU nodes",
        )
        self.security_group.add_ingress_rule(self.security_group, ec2.Port.all_traffic(), "EFA from the GPU nodes")
        self.security_group.add_egress_rule(self.security_group, ec2.Port.all_traffic(), "EFA to the GPU nodes")

        # A cluster placement group puts the nodes close together (lowest EFA latency) but asks EC2 for room in
        # one spot, which makes InsufficientInstanceCapacity likelier: GPU_PLACEMENT_GROUP chooses.
        self.placement_group = (
            ec2.PlacementGroup(self, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER)
            if props.placement_group == "on"
            else None
        )
        group_name = self.placement_group.placement_group_name if self.placement_group else props.placement_group
        reservation = props.capacity_reservation_id
        data = ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
            instance_type=props.instance.name,
            metadata_options=metadata_options(),
            block_device_mappings=[root_volume(props.root_volume_gib)],
            network_interfaces=efa_network_interfaces(
                props.instance, [props.cluster_security_group_id, self.security_group.security_group_id]
            ),
            placement=(
                ec2.CfnLaunchTemplate.PlacementProperty(group_name=group_name)
                if props.placement_group != "off"
                else None
            ),
            user_data=Fn.base64(_NVME_NODECONFIG) if props.instance.local_nvme_gb else None,
            # Reserved capacity: the nodes launch into this reservation only (a targeted one, or an open one by ID).
            capacity_reservation_specification=(
                ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
                    capacity_reservation_target=ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(
                        capacity_reservation_id=reservation
                    )
                )
                if reservation
                else None
            ),
            # A Capacity Block is its own market (EKS: the launch template says so, the nodegroup's capacity type too).
            instance_market_options=(
                ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(market_type="capacity-block")
                if props.capacity_block
                else None
            ),
        )
        self.launch_template = ec2.CfnLaunchTemplate(self, "LaunchTemplate", launch_template_data=data)

        self.nodegroup = eks.Nodegroup(
            self,
            "Nodegroup",
            cluster=props.cluster,
            nodegroup_name=props.nodegroup_name,
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NVIDIA,
            capacity_type=eks.CapacityType.CAPACITY_BLOCK if props.capacity_block else None,
            # The instance type is in the launch template (CDK's own GPU check does not know every type).
            min_size=props.node_count,
            desired_size=props.node_count,
            # EKS needs max >= 1; min = desired = 0 parks the GPUs. With autoscaling the Cluster Autoscaler moves the
            # desired size between min and max; CloudFormation sends DesiredSize again only when ScalingConfig
            # changes, which the preflight refuses while the autoscaler holds the group above its minimum.
            max_size=max(1, props.node_count, props.max_node_count),
            labels={**GPU_NODE_LABELS, **props.extra_labels},
            taints=[GPU_TAINT],
            subnets=ec2.SubnetSelection(subnets=[props.subnet]),
            node_role=node_role(self, "NodeRole"),
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.launch_template.ref, version=self.launch_template.attr_latest_version_number
            ),
        )
        pin_kubernetes_version(self.nodegroup, props.kubernetes_version)
        rolling_update(self.nodegroup, props.update_strategy)
