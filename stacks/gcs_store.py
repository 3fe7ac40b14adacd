"""The GCS store (GCS_FAULT_TOLERANCE=redis): ElastiCache for Valkey, where the Ray head keeps its control state,
so that a restarted head finds the cluster, its actors and the Serve application again, and the workers keep
their engines meanwhile.

A node-based replication group, not ElastiCache Serverless: Ray and KubeRay give the store one password
(`redisPassword`, Redis AUTH); Serverless authenticates only users of a user group. A primary and a replica in
another AZ with automatic failover, so the store survives what the head is meant to survive. Encrypted at rest
and in transit (TLS only), its AUTH token generated into Secrets Manager (the template holds a dynamic
reference, never the value), reachable on its port only from the cluster security group, which every node
carries. KubeRay 1.7's other backend, an embedded RocksDB on a PVC, is alpha behind a feature gate and its
ReadWriteOnce volume would tie the head to one AZ's system node: the opposite of what this is for.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticache as elasticache
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from settings import Settings
from settings.versions import GCS_ENGINE, GCS_ENGINE_VERSION
from stacks import nag

PORT = 6379
# What ElastiCache accepts in an AUTH token: 16-128 printable characters without '@', '"' or '/'.
TOKEN_LENGTH = 64


class GcsStore(Construct):
    """Exposes ``address`` (rediss://HOST:PORT, a token), ``secret`` (the AUTH token) and ``replication_group``."""

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: Settings, vpc: ec2.IVpc, nodes_security_group_id: str
    ) -> None:
        super().__init__(scope, construct_id)
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            allow_all_outbound=False,
            description=f"{settings.cluster_name} GCS store: Valkey from the nodes only",
        )
        nodes = ec2.Peer.security_group_id(nodes_security_group_id)
        self.security_group.add_ingress_rule(
            nodes, ec2.Port.tcp(PORT), "Valkey (TLS) from the cluster's nodes: the Ray head and KubeRay's cleanup Job"
        )
        subnets = elasticache.CfnSubnetGroup(
            self,
            "Subnets",
            description=f"{settings.cluster_name} GCS store: the private subnets",
            subnet_ids=vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnet_ids,
        )
        # No name: Secrets Manager keeps a deleted secret's name for up to 30 days, which a redeploy would hit.
        self.secret = secretsmanager.Secret(
            self,
            "AuthToken",
            description=(
                f"{settings.cluster_name}: AUTH token of the GCS store (read by the Ray head through the Secrets Store"
                " CSI driver)"
            ),
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=TOKEN_LENGTH, exclude_punctuation=True
            ),
            removal_policy=RemovalPolicy.DESTROY,
        )
        nag.acknowledge(
            self.secret,
            "AwsSolutions-SMG4",
            "Not rotated by Secrets Manager: a new AUTH token must reach the store (ModifyReplicationGroup, ROTATE) and"
            " the running head (a new pod) together; the token never leaves the VPC's store and the head's identity,"
            " and the store is reachable only from the nodes.",
        )
        self.replication_group = elasticache.CfnReplicationGroup(
            self,
            "ReplicationGroup",
            replication_group_description=f"{settings.cluster_name}: Ray GCS fault tolerance",
            engine=GCS_ENGINE,
            engine_version=GCS_ENGINE_VERSION,
            cache_node_type=settings.gcs_store_node_type,
            num_cache_clusters=2,
            automatic_failover_enabled=True,
            multi_az_enabled=True,
            port=PORT,
            cache_subnet_group_name=subnets.ref,
            security_group_ids=[self.security_group.security_group_id],
            at_rest_encryption_enabled=True,
            transit_encryption_enabled=True,
            transit_encryption_mode="required",
            # A dynamic reference ({{resolve:secretsmanager:...}}): CloudFormation reads the value at deploy time.
            auth_token=self.secret.secret_value.unsafe_unwrap(),
            # The GCS is rebuilt by a new RayCluster: nothing to keep when the store goes.
            snapshot_retention_limit=0,
            auto_minor_version_upgrade=True,
        )
        self.replication_group.apply_removal_policy(RemovalPolicy.DESTROY)
        self.replication_group.add_dependency(subnets)
        self.address = f"rediss://{self.replication_group.attr_primary_end_point_address}:{PORT}"
