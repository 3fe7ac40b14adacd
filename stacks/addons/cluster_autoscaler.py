"""The Cluster Autoscaler (PREFILL/DECODE_MAX_REPLICAS): grows the GPU nodegroup when Ray worker pods are Pending
for want of a GPU node, and shrinks it when the Ray autoscaler has removed a node's idle worker. On the system
nodes, with an EKS Pod Identity that may resize the GPU nodegroup's Auto Scaling group and no other.

Why not Karpenter: the GPU nodes are an EKS managed nodegroup with a launch template that declares the EFA
interfaces (one per network card) and the cluster placement group; Karpenter launches its own instances from
an EC2NodeClass, which (v1.8) has no field for EFA network interfaces or a placement group, so its nodes would
come up without EFA and NIXL would fall back to TCP.
"""

from __future__ import annotations

from typing import Any, Final

from aws_cdk import Aws
from aws_cdk import aws_iam as iam

from settings import Settings
from settings.scheduling import SYSTEM_NODE_LABELS
from settings.sizing import CLUSTER_AUTOSCALER_CPU_MILLI, CLUSTER_AUTOSCALER_MEMORY_MIB
from settings.versions import HelmChartPin
from stacks import nag
from stacks.addons.base import DeployTimeRefs, HelmAddon, PodIdentityGrant

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "cluster-autoscaler"
# Chart 9.59.0 (kubernetes/autoscaler tag cluster-autoscaler-chart-9.59.0, appVersion 1.35.0). The image must match the
# cluster's Kubernetes minor version: the newest patch of each (tags cluster-autoscaler-1.34.5, -1.35.2, -1.36.1).
PIN: Final = HelmChartPin("https://kubernetes.github.io/autoscaler", "cluster-autoscaler", "9.59.0")
IMAGE_TAGS: Final = {"1.34": "v1.34.5", "1.35": "v1.35.2", "1.36": "v1.36.1"}
# What it may read (no resource-level permissions exist for these; the project's README lists them).
DESCRIBE_ACTIONS = (
    "autoscaling:DescribeAutoScalingGroups",
    "autoscaling:DescribeAutoScalingInstances",
    "autoscaling:DescribeLaunchConfigurations",
    "autoscaling:DescribeScalingActivities",
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:GetInstanceTypesFromInstanceRequirements",
)
RESIZE_ACTIONS = ("autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup")
# A GPU node takes minutes to join (a ~20 GB image, the EFA driver): not declared failed before this.
MAX_NODE_PROVISION_TIME = "20m"


def values(settings: Settings) -> dict[str, Any]:
    cpu, memory = f"{CLUSTER_AUTOSCALER_CPU_MILLI}m", f"{CLUSTER_AUTOSCALER_MEMORY_MIB}Mi"
    # Parked (GPU_NODE_COUNT=0): no autoscaler runs, so the worker pods still Pending start no GPU node (EKS keeps the
    # group's max at 1 or more); the release stays, and an unpark only scales it back.
    parked = {"replicaCount": 0} if settings.gpu_node_count == 0 else {}
    return {
        **parked,
        "cloudProvider": "aws",
        "awsRegion": settings.region,
        # EKS tags a managed nodegroup's Auto Scaling group with these; the nodegroup name narrows discovery to
        # the GPU group (the system group has a fixed size).
        "autoDiscovery": {
            "clusterName": settings.cluster_name,
            "tags": [
                "k8s.io/cluster-autoscaler/enabled",
                f"k8s.io/cluster-autoscaler/{settings.cluster_name}",
                f"eks:nodegroup-name={settings.gpu_nodegroup_name}",
            ],
        },
        "image": {"tag": IMAGE_TAGS[settings.kubernetes_version]},
        "rbac": {"serviceAccount": {"name": SERVICE_ACCOUNT}},
        "nodeSelector": dict(SYSTEM_NODE_LABELS),
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}},
        "containerSecurityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "extraArgs": {
            "expander": "least-waste",
            "max-node-provision-time": MAX_NODE_PROVISION_TIME,
            # Only empty GPU nodes go (the Ray workers are not evictable): after the Ray autoscaler removed the worker.
            "scale-down-unneeded-time": "10m",
            "scale-down-delay-after-add": "10m",
            "skip-nodes-with-local-storage": False,
            "balance-similar-node-groups": False,
        },
    }


def grant(role: iam.Role, settings: Settings, _refs: DeployTimeRefs) -> None:
    """Its Pod Identity: read the Auto Scaling groups, resize only the GPU nodegroup's (EKS tags it with its name)."""
    role.add_to_policy(iam.PolicyStatement(actions=list(DESCRIBE_ACTIONS), resources=["*"]))
    role.add_to_policy(
        iam.PolicyStatement(
            actions=["eks:DescribeNodegroup"],
            resources=[
                f"arn:{Aws.PARTITION}:eks:{Aws.REGION}:{Aws.ACCOUNT_ID}:nodegroup/{settings.cluster_name}/{settings.gpu_nodegroup_name}/*"
            ],
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            actions=list(RESIZE_ACTIONS),
            resources=[
                f"arn:{Aws.PARTITION}:autoscaling:{Aws.REGION}:{Aws.ACCOUNT_ID}:autoScalingGroup:*:autoScalingGroupName/*"
            ],
            conditions={
                "StringEquals": {
                    "aws:ResourceTag/eks:cluster-name": settings.cluster_name,
                    "aws:ResourceTag/eks:nodegroup-name": settings.gpu_nodegroup_name,
                }
            },
        )
    )
    nag.acknowledge(
        role,
        "AwsSolutions-IAM5",
        "Auto Scaling and EC2 Describe calls have no resource-level permissions; the resize actions name no group "
        "(EKS names it) and are limited by the group's eks:cluster-name and eks:nodegroup-name tags; the nodegroup's "
        "ARN ends in the ID EKS gives it.",
        applies_to=[
            "Resource::*",
            "Resource::arn:<AWS::Partition>:autoscaling:<AWS::Region>:<AWS::AccountId>:autoScalingGroup:*:autoScalingGroupName/*",
            f"Resource::arn:<AWS::Partition>:eks:<AWS::Region>:<AWS::AccountId>:nodegroup/{settings.cluster_name}/{settings.gpu_nodegroup_name}/*",
        ],
    )


ADDON = HelmAddon(
    construct_id="ClusterAutoscaler",
    stack="system",
    pin=lambda s: PIN,
    release="cluster-autoscaler",
    namespace=lambda s: NAMESPACE,
    values=values,
    enabled=lambda s: s.autoscaling,
    purpose="grows and shrinks the GPU nodegroup for the Ray autoscaler's pods (PREFILL/DECODE_MAX_REPLICAS)",
    pod_identity=PodIdentityGrant(
        SERVICE_ACCOUNT, lambda s: f"resizes the {s.gpu_nodegroup_name} nodegroup only", grant
    ),
)
