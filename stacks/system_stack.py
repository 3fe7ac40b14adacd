"""The system nodes and what runs on them: the CPU system nodegroup, CoreDNS, the KubeRay operator.

It deploys beside the GPU stack (both depend only on the cluster stack), so the GPU nodes do not wait
for the system nodes, CoreDNS or KubeRay, and KubeRay installs as soon as the system nodes exist.
"""

from __future__ import annotations

from aws_cdk import Environment, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from settings import Settings
from settings.scheduling import SYSTEM_NODE_LABELS
from stacks import addons
from stacks.addons import aws_load_balancer_controller, cluster_autoscaler, kuberay_operator
from stacks.addons.managed import install_managed
from stacks.cluster_stack import node_role
from stacks.gcs_store import GcsStore
from stacks.node_launch_template import metadata_options, pin_kubernetes_version, rolling_update, root_volume


class SystemStack(Stack):
    """Exposes ``system_nodegroup``, ``coredns`` (the managed add-on), ``kuberay`` (the Helm release) and
    ``cluster_autoscaler`` (its release with PREFILL/DECODE_MAX_REPLICAS, else None), ``load_balancer_controller`` (with
    SERVE_EXPOSURE beyond the cluster, else None), ``gcs_store`` (GCS_FAULT_TOLERANCE=redis, else None)."""

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: Settings, cluster: eks.ICluster, env: Environment
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            env=env,
            description=f"{settings.cluster_name}: system nodes, CoreDNS and the KubeRay operator",
        )
        launch_template = ec2.CfnLaunchTemplate(
            self,
            "SystemNodeLaunchTemplate",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                # In the launch template, not the nodegroup: a SYSTEM_NODE_TYPE change is then a new
                # template version (a rolling update), not a replacement of a nodegroup whose fixed name
                # makes the replacement fail with "already exists" (InstanceTypes is create-only).
                instance_type=settings.system_node.name,
                metadata_options=metadata_options(),
                block_device_mappings=[root_volume(settings.system_root_volume_gib)],
            ),
        )
        self.system_nodegroup = eks.Nodegroup(
            self,
            "SystemNodegroup",
            cluster=cluster,
            nodegroup_name=settings.system_nodegroup_name,
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            min_size=settings.system_node_count,
            desired_size=settings.system_node_count,
            max_size=settings.system_node_count,
            labels=SYSTEM_NODE_LABELS,
            subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            node_role=node_role(self, "SystemNodeRole"),
            launch_template_spec=eks.LaunchTemplateSpec(
                id=launch_template.ref, version=launch_template.attr_latest_version_number
            ),
        )
        pin_kubernetes_version(self.system_nodegroup, settings.kubernetes_version)
        rolling_update(self.system_nodegroup, "default")

        # CoreDNS is a Deployment: it waits for the system nodes to have somewhere to run.
        (self.coredns,) = install_managed(self, "system", cluster=cluster, settings=settings).values()
        self.coredns.node.add_dependency(self.system_nodegroup)

        # The operator runs on the system nodes: installed once they exist, beside CoreDNS. A
        # KUBERAY_NAMESPACE change is refused by the preflight: the chart's cluster-scoped objects
        # (ClusterRoles and their bindings) have fixed names, so a second release in another namespace
        # cannot be installed beside the first, and `helm upgrade --install` would leave the old one running.
        releases = addons.install(self, "system", cluster=cluster, settings=settings)
        self.kuberay = releases[kuberay_operator.RELEASE_NAME]
        for release in releases.values():
            release.node.add_dependency(self.system_nodegroup)
        # SYSTEM_NODE_COUNT >= 2: the operator may lose one of its two pods to a drain, never both.
        if settings.system_node_count >= 2:
            budget = eks.KubernetesManifest(
                self,
                "KubeRayOperatorDisruptionBudget",
                cluster=cluster,
                manifest=[kuberay_operator.disruption_budget(settings.kuberay_namespace)],
                overwrite=True,
            )
            budget.node.add_dependency(self.kuberay)
        # GCS_FAULT_TOLERANCE=redis: the store the Ray head keeps its GCS in.
        self.gcs_store = (
            GcsStore(
                self,
                "GcsStore",
                settings=settings,
                vpc=cluster.vpc,
                nodes_security_group_id=cluster.cluster_security_group_id,
            )
            if settings.gcs_redis
            else None
        )
        # PREFILL/DECODE_MAX_REPLICAS: the Cluster Autoscaler (its Pod Identity comes with it).
        self.cluster_autoscaler = releases.get(cluster_autoscaler.ADDON.release)
        # SERVE_EXPOSURE beyond the cluster: the load balancer controller, which the serving stack's Ingress waits for.
        self.load_balancer_controller = releases.get(aws_load_balancer_controller.ADDON.release)
