"""The EKS control plane, its managed add-ons, admin access and the CPU system nodegroup."""

from __future__ import annotations

import hashlib
from typing import cast

from aws_cdk import CfnOutput, Duration, Environment, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer
from constructs import Construct

from settings import Settings
from stacks import nag
from stacks.addons.managed import install_managed

_ENDPOINT_ACCESS = {
    "public-and-private": eks.EndpointAccess.PUBLIC_AND_PRIVATE,
    "public": eks.EndpointAccess.PUBLIC,
    "private": eks.EndpointAccess.PRIVATE,
}

KMS_PENDING_WINDOW_DAYS = 7  # the shortest KMS allows
# Managed node policies every EKS node needs (kubelet registration, ENI management, image pulls).
NODE_MANAGED_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryReadOnly")


def kubectl_provider_in_vpc(endpoint_access: str) -> bool:
    """Whether aws-cdk-lib runs the kubectl provider's Lambdas in the VPC: whenever the endpoint has private access."""
    return endpoint_access != "public"


def node_role(scope: Construct, construct_id: str) -> iam.Role:
    role = iam.Role(scope, construct_id, assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
    for name in NODE_MANAGED_POLICIES:
        role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(name))
    nag.acknowledge(
        role,
        "AwsSolutions-IAM4",
        "EKS managed nodes need these AWS managed policies; AWS maintains them with the EKS node bootstrap.",
        applies_to=[f"Policy::arn:<AWS::Partition>:iam::aws:policy/{name}" for name in NODE_MANAGED_POLICIES],
    )
    return role


class ClusterStack(Stack):
    """EKS at K8S_VERSION with managed nodegroups only (no Auto Mode), KMS envelope encryption, logs, admin
    access and the node add-ons. The nodegroups are in the system and GPU stacks, which deploy side by side."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        vpc: ec2.IVpc,
        logs_key: kms.IKey,
        env: Environment,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            env=env,
            description=f"{settings.cluster_name}: EKS control plane and the add-ons nodes need",
        )
        private = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)

        # Deleted with the stack after the shortest pending window: the cluster whose Secrets it protects
        # is gone by then, and a retained key would cost money forever. `aws kms cancel-key-deletion`
        # brings it back within the window.
        secrets_key = kms.Key(
            self,
            "SecretsKey",
            enable_key_rotation=True,
            description=f"EKS secrets envelope encryption for {settings.cluster_name}",
            removal_policy=RemovalPolicy.DESTROY,
            pending_window=Duration.days(KMS_PENDING_WINDOW_DAYS),
        )

        endpoint = _ENDPOINT_ACCESS[settings.endpoint_access]
        if settings.public_access_cidrs:
            endpoint = endpoint.only_from(*settings.public_access_cidrs)

        # aws-cdk-lib 2.275 (aws-eks-v2/lib/cluster.js) puts the kubectl provider's Lambdas in the private
        # subnets whenever the endpoint has private access (public-and-private, the default, too), and
        # kubectl-provider.js then gives them the cluster security group. A group of their own instead:
        # CloudFormation deletes it only after Lambda has released the functions' ENIs, so those ENIs
        # never hold the cluster security group or the subnets when the network stack goes.
        kubectl_security_group = (
            ec2.SecurityGroup(
                self,
                "KubectlProviderSecurityGroup",
                vpc=vpc,
                description="kubectl provider Lambdas: to the Kubernetes API and AWS APIs",
            )
            if kubectl_provider_in_vpc(settings.endpoint_access)
            else None
        )
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=settings.cluster_name,
            version=eks.KubernetesVersion.of(settings.kubernetes_version),
            vpc=vpc,
            vpc_subnets=[private],
            # Managed nodegroups only: no Auto Mode compute, no default capacity.
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            # The add-ons below are EKS managed ones; do not also install the self-managed copies.
            bootstrap_self_managed_addons=False,
            endpoint_access=endpoint,
            secrets_encryption_key=secrets_key,
            cluster_logging=[
                eks.ClusterLoggingTypes.API,
                eks.ClusterLoggingTypes.AUDIT,
                eks.ClusterLoggingTypes.AUTHENTICATOR,
                eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
                eks.ClusterLoggingTypes.SCHEDULER,
            ],
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=KubectlV35Layer(self, "KubectlLayer"),
                # Where aws-cdk-lib puts them anyway with private access; said here so the group above applies.
                private_subnets=vpc.private_subnets if kubectl_security_group else None,
                security_groups=[kubectl_security_group] if kubectl_security_group else None,
            ),
            output_config_command=False,
        )
        self._acknowledge_cdk_managed_findings()
        if kubectl_security_group is not None:
            self.cluster.connections.allow_from(
                kubectl_security_group, ec2.Port.tcp(443), "kubectl provider to the Kubernetes API"
            )
        # EKS writes control-plane logs to this group; created here first so that it has a retention
        # (EKS's own never expires) and goes away with `cdk destroy`.
        control_plane_logs = logs.LogGroup(
            self,
            "ControlPlaneLogs",
            log_group_name=f"/aws/eks/{settings.cluster_name}/cluster",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
            encryption_key=logs_key,
        )
        self.cluster.node.add_dependency(control_plane_logs)
        # The same cluster as eks.ICluster: jsii's Python typing of Cluster misses one ICluster member
        # (kubectl_provider_options), so type checkers need to be told.
        self.cluster_ref = cast(eks.ICluster, self.cluster)

        for principal_arn in settings.admin_principal_arns:
            # Keyed by the principal, not its position: removing or reordering one ARN must not replace the
            # others (EKS refuses a second access entry for a principal that still has one).
            eks.AccessEntry(
                self,
                f"Admin-{hashlib.sha256(principal_arn.encode()).hexdigest()[:8]}",
                cluster=self.cluster_ref,
                principal=principal_arn,
                access_policies=[
                    eks.AccessPolicy.from_access_policy_name(
                        "AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER
                    )
                ],
            )

        # The add-ons a node needs to join and turn Ready (network, kube-proxy, Pod Identity): DaemonSets,
        # ACTIVE without nodes, so both nodegroups (system and GPU stacks) can start as soon as this stack
        # is done. CoreDNS is a Deployment and needs nodes to run on: it is in the system stack.
        self.addons: dict[str, eks.Addon] = install_managed(
            self, "cluster", cluster=self.cluster_ref, settings=settings
        )
        CfnOutput(self, "ClusterName", value=self.cluster.cluster_name)
        CfnOutput(self, "Region", value=settings.region)
        CfnOutput(
            self,
            "UpdateKubeconfigCommand",
            value=f"aws eks update-kubeconfig --region {settings.region} --name {settings.cluster_name}",
        )

    def _acknowledge_cdk_managed_findings(self) -> None:
        """cdk-nag findings on the roles and functions aws-cdk-lib creates for EKS and its kubectl provider."""
        nag.acknowledge(
            self.cluster,
            "AwsSolutions-IAM4",
            "The EKS service role needs AmazonEKSClusterPolicy; the kubectl provider (aws-cdk-lib) uses the AWS "
            "managed Lambda execution, VPC access and ECR read-only policies to run kubectl and Helm.",
            applies_to=[
                "Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKSClusterPolicy",
                "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
                "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole",
                "Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
                (
                    'Policy::{"Fn::If":["ClusterKubectlProviderHandlerHasEcrPublic69E09706",{"Fn::Join":["",["arn:",'
                    '{"Ref":"AWS::Partition"},":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},{"Ref":"AWS::NoValue"}]}'
                ),
            ],
        )
        nag.acknowledge(
            self.cluster,
            "AwsSolutions-IAM5",
            "The custom resource framework of aws-cdk-lib may invoke every version of its own kubectl handler.",
            applies_to=["Resource::<ClusterKubectlProviderHandler2E05C68A.Arn>:*"],
        )
        nag.acknowledge(
            self.cluster,
            "AwsSolutions-L1",
            "The kubectl handler's runtime is chosen by aws-cdk-lib to match its kubectl layer; it moves with the"
            " pinned aws-cdk-lib.",
        )
