"""The VPC: private subnets for the nodes, public subnets only for the NAT gateway and load balancers."""

from __future__ import annotations

from aws_cdk import Aws, Duration, Environment, RemovalPolicy, Stack, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from settings import Settings
from settings.addressing import PRIVATE_SUBNET_MASK, PUBLIC_SUBNET_MASK


def s3_endpoint_statements() -> list[iam.PolicyStatement]:
    """The S3 gateway endpoint's policy (tests/test_model_s3.py evaluates it)."""
    anyone = [iam.AnyPrincipal()]
    return [
        iam.PolicyStatement(
            sid="ThisAccountsPrincipals",
            principals=anyone,
            actions=["s3:*"],
            resources=["*"],
            conditions={"StringEquals": {"aws:PrincipalAccount": Aws.ACCOUNT_ID}},
        ),
        # docs.aws.amazon.com/AmazonECR/latest/userguide/vpc-endpoints.html#ecr-minimum-s3-perms
        iam.PolicyStatement(
            sid="EcrImageLayers", principals=anyone, actions=["s3:GetObject"], resources=[f"arn:{Aws.PARTITION}:s3:::prod-{Aws.REGION}-starport-layer-bucket/*"]
        ),
        # docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cfn-vpce-bucketnames.html
        iam.PolicyStatement(
            sid="CloudFormationResponses",
            principals=anyone,
            actions=["s3:PutObject"],
            resources=[f"arn:{Aws.PARTITION}:s3:::cloudformation-custom-resource-response-*/*", f"arn:{Aws.PARTITION}:s3:::cloudformation-waitcondition-*/*"],
        ),
    ]


class NetworkStack(Stack):
    """VPC spanning the GPU AZ and its neighbours, with the subnet tags EKS load balancing expects."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, env: Environment) -> None:
        super().__init__(scope, construct_id, env=env, description=f"{settings.cluster_name}: VPC for the EKS cluster")

        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(settings.vpc_cidr),
            availability_zones=list(settings.availability_zones),
            # One NAT gateway, in the GPU AZ: the GPU nodes pull a ~20 GB image and the weights through
            # it, and keeping it in their AZ avoids cross-AZ data charges. Nodes of other AZs share it.
            nat_gateways=1,
            nat_gateway_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PUBLIC, availability_zones=[settings.gpu_az]),
            subnet_configuration=[
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=PUBLIC_SUBNET_MASK, map_public_ip_on_launch=False),
                ec2.SubnetConfiguration(name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=PRIVATE_SUBNET_MASK),
            ],
            restrict_default_security_group=True,
        )
        for subnet in self.vpc.public_subnets:
            Tags.of(subnet).add("kubernetes.io/role/elb", "1")
        for subnet in self.vpc.private_subnets:
            Tags.of(subnet).add("kubernetes.io/role/internal-elb", "1")

        self.s3_endpoint = self._s3_gateway_endpoint()

        # One key for the deployment's log groups (flow logs here, the control plane's in the cluster stack):
        # CloudWatch Logs may use it only for log groups of this account and Region.
        self.logs_key = kms.Key(
            self,
            "LogsKey",
            enable_key_rotation=True,
            description=f"CloudWatch Logs encryption for {settings.cluster_name}",
            removal_policy=RemovalPolicy.DESTROY,
            pending_window=Duration.days(7),
        )
        self.logs_key.add_to_resource_policy(
            iam.PolicyStatement(
                actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
                principals=[iam.ServicePrincipal(f"logs.{Aws.REGION}.amazonaws.com")],
                resources=["*"],  # in a key policy, "*" is this key
                conditions={"ArnLike": {"kms:EncryptionContext:aws:logs:arn": f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:*"}},
            )
        )
        # Rejected flows only: enough to debug a security group, without paying to log every KV transfer.
        flow_log_group = logs.LogGroup(
            self, "FlowLogs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=RemovalPolicy.DESTROY, encryption_key=self.logs_key
        )
        self.vpc.add_flow_log(
            "RejectedFlows",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_log_group),
            traffic_type=ec2.FlowLogTrafficType.REJECT,
        )

    def _s3_gateway_endpoint(self) -> ec2.GatewayVpcEndpoint:
        """S3 without the NAT gateway: ECR serves image layers from S3 (the ~20 GB Ray image), and an s3://
        MODEL_SOURCE is read from it. A gateway endpoint is free; it routes this Region's S3 from the private
        subnets' route tables. Its policy admits this account's principals (the nodes, the pods' Pod Identity
        roles, the deployer), and two kinds of AWS-owned buckets reached through presigned URLs signed by
        AWS itself: ECR's layer bucket, and CloudFormation's custom-resource responses (the kubectl provider's
        Lambdas run in these subnets and answer CloudFormation through one)."""
        endpoint = self.vpc.add_gateway_endpoint(
            "S3Endpoint", service=ec2.GatewayVpcEndpointAwsService.S3, subnets=[ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)]
        )
        for statement in s3_endpoint_statements():
            endpoint.add_to_policy(statement)
        return endpoint

    def private_subnet_in(self, availability_zone: str) -> ec2.ISubnet:
        """The one private subnet of an AZ (the GPU nodegroup's)."""
        return next(s for s in self.vpc.private_subnets if s.availability_zone == availability_zone)
