"""The AWS resources of the endpoint beyond the cluster that the serving stack owns next to its Ingress: the DNS
name read back from the Ingress, the alias record that points SERVE_HOSTNAME at the load balancer, and the bucket
of the load balancer's access logs (SERVE_ACCESS_LOGS=on).

Why an alias record made here and not external-dns: the record is one name the deploy knows, so a CloudFormation
resource of the same stack creates, changes and deletes it (`make destroy` removes it; no controller with write
access to the zone runs in the cluster). What external-dns would add, following a load balancer replaced outside a
deploy, is covered for the replacements a deploy makes: one Ingress per scheme and a digest of the Ingress on the
read-back, so CloudFormation reads the DNS name again whenever the Ingress changes (docs/endpoint.md).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final, cast

from aws_cdk import Aws, CfnResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_route53 as route53
from aws_cdk import aws_s3 as s3
from aws_cdk.region_info import RegionInfo
from constructs import Construct

from k8s_constructs.endpoint import ACCESS_LOG_PREFIX, DNS_NAME_PATH, ingress_name
from settings import Settings
from settings.endpoint import ACCESS_LOG_RETENTION_DAYS
from settings.load_balancer_zones import application_load_balancer_zone
from stacks import nag

# The service principal that delivers access logs in the Regions Elastic Load Balancing has no account in (those
# opened since August 2022); the older Regions' documented principal is their ELB account (aws-cdk-lib's region facts).
LOG_DELIVERY_SERVICE: Final = "logdelivery.elasticloadbalancing.amazonaws.com"


def ingress_digest(scope: Construct, objects: list[dict[str, Any]]) -> str:
    """A digest of the Ingress as the template holds it (tokens resolved to their intrinsics): it changes exactly
    when the manifest CloudFormation applies changes."""
    resolved = Stack.of(scope).resolve(objects)
    return hashlib.sha256(json.dumps(resolved, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def load_balancer_dns_name(
    scope: Construct, cluster: eks.ICluster, settings: Settings, objects: list[dict[str, Any]], manifest: Construct
) -> eks.KubernetesObjectValue:
    """The DNS name from the Ingress's status, read after the manifest is applied and again whenever it changes."""
    address = eks.KubernetesObjectValue(
        scope,
        "LoadBalancerAddress",
        cluster=cluster,
        object_type="ingress",
        object_name=ingress_name(settings),
        object_namespace=settings.namespace,
        json_path=DNS_NAME_PATH,
        timeout=Duration.minutes(10),
    )
    address.node.add_dependency(manifest)
    # The kubectl provider's get handler ignores properties it does not know; CloudFormation updates (re-reads)
    # the value whenever one changes.
    resource = cast(CfnResource, address.node.find_child("Resource").node.default_child)
    resource.add_property_override("IngressDigest", ingress_digest(scope, objects))
    return address


def alias_record(scope: Construct, settings: Settings, dns_name: str) -> route53.CfnRecordSet:
    """SERVE_HOSTNAME as an A alias of the load balancer (an apex name too, which a CNAME cannot be)."""
    endpoint = settings.serve_endpoint
    zone = application_load_balancer_zone(settings.region)
    if zone is None:  # parse_endpoint refuses SERVE_HOSTED_ZONE_ID there; a stack built around it must not guess
        raise ValueError(f"REGION={settings.region}: no load balancer hosted zone for the alias record")
    return route53.CfnRecordSet(
        scope,
        "EndpointRecord",
        hosted_zone_id=endpoint.hosted_zone_id,
        name=f"{endpoint.hostname}.",
        type="A",
        alias_target=route53.CfnRecordSet.AliasTargetProperty(
            dns_name=dns_name,
            hosted_zone_id=zone,
            evaluate_target_health=False,
        ),
    )


def log_delivery_principal(region: str) -> iam.IPrincipal:
    """Who writes the access logs in `region`: its ELB account, or the log delivery service principal."""
    account = RegionInfo.get(region).elbv2_account
    return iam.AccountPrincipal(account) if account else iam.ServicePrincipal(LOG_DELIVERY_SERVICE)


def access_log_bucket(scope: Construct, settings: Settings) -> s3.Bucket:
    """The access logs' bucket: SSE-S3 (the only encryption ALB log delivery supports), no public access, TLS only,
    expiring after ACCESS_LOG_RETENTION_DAYS; emptied and deleted with the stack, as the cluster's log groups are."""
    bucket = s3.Bucket(
        scope,
        "AccessLogs",
        encryption=s3.BucketEncryption.S3_MANAGED,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        enforce_ssl=True,
        minimum_tls_version=1.2,
        lifecycle_rules=[
            s3.LifecycleRule(
                expiration=Duration.days(ACCESS_LOG_RETENTION_DAYS),
                abort_incomplete_multipart_upload_after=Duration.days(1),
            ),
        ],
        removal_policy=RemovalPolicy.DESTROY,
        auto_delete_objects=True,
    )
    bucket.add_to_resource_policy(
        iam.PolicyStatement(
            sid="LoadBalancerAccessLogs",
            actions=["s3:PutObject"],
            principals=[log_delivery_principal(settings.region)],
            resources=[bucket.arn_for_objects(f"{ACCESS_LOG_PREFIX}/AWSLogs/{Aws.ACCOUNT_ID}/*")],
        )
    )
    nag.acknowledge(
        bucket,
        "AwsSolutions-S1",
        "The bucket holds the load balancer's access logs; logging access to the logs would need a second "
        "bucket, whose own access is then unlogged. Reads of the logs are in CloudTrail's data events where the "
        "account turns them on.",
    )
    nag.skip_checkov(
        bucket,
        {
            "CKV_AWS_18": "The access logs' own bucket: see AwsSolutions-S1 (a log bucket of a log bucket).",
            "CKV_AWS_21": "Logs are written once and expire after a month: versions would keep expired logs longer.",
        },
    )
    return bucket
