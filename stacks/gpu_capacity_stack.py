"""The GPU capacity: EFA g6.8xlarge (by default) nodegroup in one AZ and its device plugins."""

from __future__ import annotations

from aws_cdk import CfnOutput, Environment, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from k8s_constructs.image_prepull import build_image_prepull_chart
from settings import Settings
from settings.park_schedule import GPU_NODE_COUNT_OUTPUT
from settings.scheduling import AUTOSCALER_GPU_LABEL
from stacks.device_plugins import DevicePlugins
from stacks.efa_nodegroup import EfaNodegroup, EfaNodegroupProps


class GpuCapacityStack(Stack):
    """Deployed and destroyed on its own: GPU_NODE_COUNT=0 parks the nodes, destroy removes them."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        cluster: eks.ICluster,
        vpc: ec2.IVpc,
        gpu_subnet: ec2.ISubnet,
        env: Environment,
    ) -> None:
        super().__init__(
            scope, construct_id, env=env, description=f"{settings.cluster_name}: EFA GPU nodes in {settings.gpu_az}"
        )
        self.gpu_nodes = EfaNodegroup(
            self,
            "GpuNodes",
            props=EfaNodegroupProps(
                cluster=cluster,
                cluster_security_group_id=cluster.cluster_security_group_id,
                vpc=vpc,
                subnet=gpu_subnet,
                nodegroup_name=settings.gpu_nodegroup_name,
                kubernetes_version=settings.kubernetes_version,
                instance=settings.gpu_node,
                node_count=settings.gpu_node_count,
                max_node_count=settings.gpu_node_max if settings.autoscaling else 0,
                # The Cluster Autoscaler's GPU label on AWS: a node that has joined but whose device plugin has not yet
                # advertised nvidia.com/gpu counts as a GPU node still starting, not as one the pod cannot use (which
                # would make it launch another).
                extra_labels=(
                    {AUTOSCALER_GPU_LABEL: settings.gpu_node.gpu_model.lower()} if settings.autoscaling else {}
                ),
                root_volume_gib=settings.gpu_root_volume_gib,
                update_strategy=settings.gpu_update_strategy,
                placement_group=settings.gpu_placement_group,
                capacity_reservation_id=settings.gpu_capacity_reservation_id,
                capacity_block=settings.gpu_capacity_block,
            ),
        )
        self.device_plugins = DevicePlugins(
            self, "DevicePlugins", cluster=cluster, gpu_nodegroup=self.gpu_nodes.nodegroup, settings=settings
        )
        # Applied as soon as the stack starts, not after the nodegroup: each node starts pulling the ~20 GB
        # Ray image the moment it joins (the system node too, for the head).
        self.image_prepull = eks.KubernetesManifest(
            self,
            "ImagePrepull",
            cluster=cluster,
            manifest=build_image_prepull_chart(settings).to_json(),
            overwrite=True,
        )
        CfnOutput(self, "GpuAvailabilityZone", value=settings.gpu_az)
        CfnOutput(self, "GpuNodegroupName", value=settings.gpu_nodegroup_name)
        # What a scheduled unpark restores (tools/park_schedule.py): the count this deploy approved, 0 when parked.
        CfnOutput(self, GPU_NODE_COUNT_OUTPUT, value=str(settings.gpu_node_count))
