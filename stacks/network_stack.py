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


def s3_endpoint_statements(region: str) -> list[iam.PolicyStatement]:
    """The S3 gateway endpoint's policy (tests/test_model_s3.py evaluates it): reads from anywhere, writes by this
    account's principals only, and CloudFormation's answers to its own two buckets of this Region."""
    anyone = [iam.AnyPrincipal()]
    return [
        iam.PolicyStatement(
            sid="ThisAccountsPrincipals",
            principals=anyone,
            actions=["s3:*"],
            resources=["*"],
            conditions={"StringEquals": {"aws:PrincipalAccount": Aws.ACCOUNT_ID}},
        ),
        # Reads of others' buckets, signed by their owners or anonymous: ECR's image layers (presigned by ECR),
        # registry.k8s.io's layers (anonymous, from a bucket in the Region), Amazon Linux's package repositories,
        # the SSM agent's. A read moves nothing out; a write by foreign credentials is what the policy refuses.
        iam.PolicyStatement(
            sid="ReadsFromAnywhere",
            principals=anyone,
            actions=["s3:GetObject", "s3:ListBucket", "s3:GetBucketLocation"],
            resources=["*"],
        ),
        # docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cfn-vpce-bucketnames.html: the kubectl provider's
        # Lambdas run in these subnets and answer CloudFormation through a URL it presigned for its own bucket.
        iam.PolicyStatement(
            sid="CloudFormationResponses",
            principals=anyone,
            actions=["s3:PutObject"],
            resources=[
                f"arn:{Aws.PARTITION}:s3:::cloudformation-custom-resource-response-{region.replace('-', '')}/*",
                f"arn:{Aws.PARTITION}:s3:::cloudformation-waitcondition-{region}/*",
            ],
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
            nat_gateway_subnets=ec2.SubnetSelection(
                subnet_type=ec2.SubnetType.PUBLIC, availability_zones=[settings.gpu_az]
            ),
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="public",
                    subnet_type=ec2.SubnetType.PUBLIC,
                    cidr_mask=PUBLIC_SUBNET_MASK,
                    map_public_ip_on_launch=False,
                ),
                ec2.SubnetConfiguration(
                    name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=PRIVATE_SUBNET_MASK
                ),
            ],
            restrict_default_security_group=True,
        )
        for subnet in self.vpc.public_subnets:
            Tags.of(subnet).add("kubernetes.io/role/elb", "1")
        for subnet in self.vpc.private_subnets:
            Tags.of(subnet).add("kubernetes.io/role/internal-elb", "1")

        self.s3_endpoint = self._s3_gateway_endpoint(settings.region)

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
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": (
                            f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:*"
                        )
                    }
                },
            )
        )
        # Rejected flows only: enough to debug a security group, without paying to log every KV transfer.
        flow_log_group = logs.LogGroup(
            self,
            "FlowLogs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
            encryption_key=self.logs_key,
        )
        self.vpc.add_flow_log(
            "RejectedFlows",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_log_group),
            traffic_type=ec2.FlowLogTrafficType.REJECT,
        )

    def _s3_gateway_endpoint(self, region: str) -> ec2.GatewayVpcEndpoint:
        """S3 without the NAT gateway: ECR serves image layers from S3 (the ~20 GB Ray image), and an s3://
        MODEL_SOURCE is read from it. A gateway endpoint is free; it routes this Region's S3 from the private
        subnets' route tables. Its policy keeps it from carrying data out with another account's keys."""
        endpoint = self.vpc.add_gateway_endpoint(
            "S3Endpoint",
            service=ec2.GatewayVpcEndpointAwsService.S3,
            subnets=[ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)],
        )
        for statement in s3_endpoint_statements(region):
            endpoint.add_to_policy(statement)
        return endpoint

    def private_subnet_in(self, availability_zone: str) -> ec2.ISubnet:
        """The one private subnet of an AZ (the GPU nodegroup's)."""
        return next(s for s in self.vpc.private_subnets if s.availability_zone == availability_zone)
