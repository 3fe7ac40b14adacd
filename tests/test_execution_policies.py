"""The scoped CloudFormation execution policies (docs/cfn-execution-policy*.json) against what CloudFormation
needs to create, update and delete every resource of every stack.

CloudFormation's own handler permissions (the resource schemas cfn-lint ships) for every resource type of
every stack, in every configuration that changes the resource types — the default, OBSERVABILITY=on,
HF_TOKEN_SECRET_NAME, ENDPOINT_ACCESS=private — less the features the stacks do not use, must be allowed
by the two policies together: each action by a statement whose resources match an ARN of a resource type
the Service Authorization Reference (cfn-lint's copy) authorizes it against, filled in with this cluster's
names; an action the reference lists with no resource type needs a statement on "*".
"""

from __future__ import annotations

import fnmatch
import json
import string
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import cfnlint
import pytest

from tests.conftest import REPO, Synth

EXECUTION_POLICIES = (
    "cfn-execution-policy.json",
    "cfn-execution-policy-eks.json",
    "cfn-execution-policy-observability.json",
    "cfn-execution-policy-gcs.json",
    "cfn-execution-policy-endpoint.json",
)
CLUSTER = "ray-llm-multinode"
SYNTHS = ("default_synth", "observed_synth", "hf_token_synth", "private_synth", "features_synth", "endpoint_synth")
CFN_DATA = Path(cfnlint.__file__).parent / "data"

# Handler permissions of features no stack uses, per resource type: the policies leave them out. The reads a
# handler may make whatever the properties say (a log group's data protection, index and resource
# policies; a function's code signing, recursion and scaling configuration) are granted all the same.
UNUSED_FEATURES: dict[tuple[str, str], str] = {
    (
        "AWS::APS::Scraper",
        "aps:DescribeWorkspace",
    ): "an Amazon Managed Prometheus workspace destination (ours is CloudWatch)",
    ("AWS::APS::Scraper", "kafka:*"): "an Amazon MSK source (ours is EKS)",
    (
        "AWS::APS::Scraper",
        "logs:*LogDeliver*",
    ): "the collector's own log delivery (ScraperLoggingConfiguration, not set)",
    (
        "AWS::APS::Scraper",
        "logs:PutResourcePolicy",
    ): "the collector's own log delivery (ScraperLoggingConfiguration, not set)",
    (
        "AWS::APS::Scraper",
        "aps:*ScraperLoggingConfiguration",
    ): "the collector's own log delivery (ScraperLoggingConfiguration, not set; the read is granted)",
    ("AWS::EC2::Subnet", "ec2:*SubnetCidrBlock"): "IPv6 blocks on subnets (IPv4 only)",
    ("AWS::IAM::Role", "iam:*RolePermissionsBoundary"): "permissions boundaries on roles (none set)",
    ("AWS::IAM::Policy", "iam:*GroupPolicy"): "policies on IAM groups (ours attach to roles only)",
    ("AWS::IAM::Policy", "iam:*UserPolicy"): "policies on IAM users (ours attach to roles only)",
    (
        "AWS::EC2::EIP",
        "ec2:AcceptAddressTransfer",
    ): "an Elastic IP transferred from another account (ours is allocated)",
    ("AWS::EC2::NatGateway", "ec2:*PrivateNatGatewayAddress"): "secondary private addresses of a NAT gateway (none)",
    ("AWS::EC2::NatGateway", "ec2:*NatGatewayAddress"): "secondary Elastic IPs of a NAT gateway (one)",
    ("AWS::EC2::VPC", "ec2:CreateVpcEncryptionControl"): "VPC encryption controls (not set)",
    ("AWS::EC2::VPC", "ec2:ModifyVpcTenancy"): "dedicated tenancy (default tenancy)",
    ("AWS::EC2::VPCGatewayAttachment", "ec2:*VpnGateway"): "a VPN gateway (the attachment is the internet gateway's)",
    ("AWS::EC2::FlowLog", "s3:*BucketPolicy"): "flow logs to S3 (ours go to CloudWatch Logs)",
    (
        "AWS::EC2::VPCEndpoint",
        "vpc-lattice:*",
    ): "VPC Lattice service network endpoints (ours is an S3 gateway endpoint)",
    ("AWS::EC2::VPCEndpoint", "vpce:AllowMultiRegion"): "a cross-Region endpoint (ours is this Region's S3)",
    (
        "AWS::ElastiCache::ReplicationGroup",
        "firehose:*",
    ): "log delivery to Firehose (LogDeliveryConfigurations not set)",
    (
        "AWS::ElastiCache::ReplicationGroup",
        "logs:*",
    ): "log delivery to CloudWatch Logs (LogDeliveryConfigurations not set)",
    (
        "AWS::ElastiCache::ReplicationGroup",
        "kms:*",
    ): "a customer managed key at rest (KmsKeyId not set: ElastiCache's own key)",
    ("AWS::ElastiCache::ReplicationGroup", "s3:GetObject"): "seeding from a snapshot in S3 (SnapshotArns not set)",
    (
        "AWS::ElastiCache::ReplicationGroup",
        "elasticache:CreateSnapshot",
    ): "snapshots (SnapshotRetentionLimit 0, no final snapshot)",
    ("AWS::SecretsManager::Secret", "secretsmanager:*Regions*"): "replicas in other Regions (ReplicaRegions not set)",
    (
        "AWS::S3::Bucket",
        "s3tables:*",
    ): "S3 Metadata tables of the access-log bucket (MetadataTableConfiguration not set)",
    ("AWS::S3::Bucket", "s3:*BucketMetadata*TableConfiguration"): "S3 Metadata tables (MetadataConfiguration not set)",
    ("AWS::S3::Bucket", "s3:Put*Analytics*"): "analytics configurations (none; the read is granted)",
    ("AWS::S3::Bucket", "s3:PutInventoryConfiguration"): "inventory configurations (none; the read is granted)",
    ("AWS::S3::Bucket", "s3:PutMetricsConfiguration"): "request metrics configurations (none; the read is granted)",
    (
        "AWS::S3::Bucket",
        "s3:PutIntelligentTieringConfiguration",
    ): "Intelligent-Tiering configurations (none; the read is granted)",
    ("AWS::S3::Bucket", "s3:PutAccelerateConfiguration"): "Transfer Acceleration (off; the read is granted)",
    ("AWS::S3::Bucket", "s3:PutReplicationConfiguration"): "replication (none; the read is granted)",
    ("AWS::S3::Bucket", "s3:*BucketCORS"): "CORS (none; the read is granted)",
    ("AWS::S3::Bucket", "s3:*BucketWebsite"): "static website hosting (none; the read is granted)",
    ("AWS::S3::Bucket", "s3:PutBucketNotification"): "event notifications (none; the read is granted)",
    (
        "AWS::S3::Bucket",
        "s3:PutBucketLogging",
    ): "server access logging of the log bucket (none: AwsSolutions-S1 says why)",
    ("AWS::S3::Bucket", "s3:PutBucketVersioning"): "versioning (off: logs expire after 30 days)",
    ("AWS::S3::Bucket", "s3:PutBucketObjectLockConfiguration"): "Object Lock (off)",
    ("AWS::S3::Bucket", "s3:Put*Acl"): "ACLs (disabled: BucketOwnerEnforced)",
    (
        "AWS::S3::Bucket",
        "s3:PutBucketAbac",
    ): "attribute-based access control on the bucket (not set; the read is granted)",
    (
        "AWS::EKS::Cluster",
        "iam:*InstanceProfile",
    ): "EKS Auto Mode's node instance profile (Auto Mode off: managed nodegroups only)",
    ("AWS::Lambda::Function", "kms:*"): "a customer managed key on a function's environment (KmsKeyArn not set)",
    ("AWS::Lambda::Function", "lambda:*CodeSigningConfig"): "code signing (CodeSigningConfigArn not set)",
    ("AWS::Lambda::Function", "lambda:*FunctionConcurrency"): "reserved concurrency (not set)",
    (
        "AWS::Lambda::Function",
        "lambda:PutFunctionRecursionConfig",
    ): "recursive loop detection changes (RecursiveLoop not set)",
    ("AWS::Lambda::Function", "lambda:PutFunctionScalingConfig"): "capacity providers (not used)",
    ("AWS::Lambda::Function", "lambda:PassCapacityProvider"): "capacity providers (not used)",
    ("AWS::Lambda::Function", "lambda:PublishVersion"): "published versions (AutoPublishAlias not used)",
    ("AWS::Lambda::Function", "lambda:AssociateRuntimeAlias"): "runtime aliases (not used)",
    ("AWS::Lambda::Function", "elasticfilesystem:*"): "EFS file systems on a function (none)",
    ("AWS::Lambda::Function", "s3files:*"): "S3 Files mounts on a function (none)",
    (
        "AWS::Logs::LogGroup",
        "logs:*DataProtectionPolicy",
    ): "data protection policies on log groups (none; the read is granted)",
    ("AWS::Logs::LogGroup", "logs:*IndexPolic*"): "field index policies (none; the read is granted)",
    ("AWS::Logs::LogGroup", "logs:*ResourcePolic*"): "log group resource policies (none; the read is granted)",
    ("AWS::Logs::LogGroup", "logs:PutBearerTokenAuthentication"): "bearer token authentication (not set)",
    (
        "AWS::Logs::LogGroup",
        "logs:PutLogGroupDeletionProtection",
    ): "deletion protection (not set: the stacks delete their log groups)",
    ("AWS::Logs::LogGroup", "logs:CreateLogDelivery"): "log delivery from the log group (none)",
    ("AWS::Logs::LogGroup", "firehose:*"): "delivery to Firehose (none)",
    ("AWS::Logs::LogGroup", "s3:*"): "delivery to S3 (none)",
}

# Names in CloudFormation's S3 handlers that are S3 API operations, not IAM actions (the Service Authorization
# Reference has none of them: IAM authorizes them as the matching Put…Configuration, which the features above cover).
NOT_IAM_ACTIONS: dict[tuple[str, str], str] = {
    ("AWS::S3::Bucket", action): "an S3 API operation, not an IAM action"
    for action in (
        *(
            "s3:DeleteBucketAnalyticsConfiguration",
            "s3:DeleteBucketCors",
            "s3:DeleteBucketEncryption",
            "s3:DeleteBucketLifecycle",
        ),
        *(
            "s3:DeleteBucketMetricsConfiguration",
            "s3:DeleteBucketReplication",
            "s3:PutBucketReplication",
            "s3:PutObjectLockConfiguration",
        ),
    )
}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def execution_policy(name: str) -> dict[str, Any]:
    """docs/NAME filled in as the README shows."""
    text = string.Template((REPO / "docs" / name).read_text()).substitute(
        ACCOUNT="123456789012", REGION="us-east-2", CLUSTER_NAME=CLUSTER, CDK_QUALIFIER="hnb659fds"
    )
    document: dict[str, Any] = json.loads(text)
    return document


@cache
def _reference() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CFN_DATA / "AdditionalSpecs" / "Policies.json").read_text())
    return data


@cache
def handler_permissions(resource_type: str) -> frozenset[str]:
    """Every permission CloudFormation's create/read/update/delete/list handlers of the type name (empty for a
    type CloudFormation has no schema for: the custom resources, which run aws-cdk-lib's Lambdas)."""
    index = json.loads((CFN_DATA / "schemas" / "providers" / "us-east-1.json").read_text())
    if resource_type not in index:
        assert resource_type.startswith("Custom::"), resource_type
        return frozenset()
    handlers = json.loads((CFN_DATA / "schemas" / "resources" / f"{index[resource_type]}.json").read_text()).get(
        "handlers", {}
    )
    return frozenset(
        p for h in ("create", "read", "update", "delete", "list") for p in handlers.get(h, {}).get("permissions", [])
    )


# What the ARNs' name parts can be here: the cluster, a resource named after a stack, an add-on or association
# under the cluster, the cluster's log groups, the collector's service-linked role, the bootstrap assets, SSM
# parameters CloudFormation names, or anything (a "*" statement).
NAMES = [
    CLUSTER,
    *(f"{CLUSTER}-{part}-x" for part in ("network", "cluster", "system", "gpu", "serving", "observability")),
    f"{CLUSTER}/x/x",
    f"/aws/eks/{CLUSTER}/cluster",
    "aws-service-role/scraper.aps.amazonaws.com/AWSServiceRoleForAmazonPrometheusScraper_x",
    "cdk-hnb659fds-assets-123456789012-us-east-2/x",  # the bootstrap bucket's assets
    "CFN-x",  # the parameters CloudFormation names for aws-cdk-lib's kubectl readiness
    "GcsStoreAuthTokenA1B2C3D4-AbCdEfGhIjKl",  # the GCS store's token: CloudFormation names it after its logical ID
    "aws-service-role/elasticache.amazonaws.com/AWSServiceRoleForElastiCache",
    "x",
]


def arns(action: str) -> list[str]:
    """The ARNs `action` may be authorized against, per the Service Authorization Reference; ["*"] when it
    lists no resource type for it (eks:CreateCluster, lambda:ListLayerVersions)."""
    service, name = action.split(":")
    types = _reference()[service]["Actions"][name.lower()].get("Resources", [])
    known = _reference()[service]["Resources"]
    formats = [f for t in types for f in known[t.lower()]["ARNFormats"]]
    if not formats:
        return ["*"]
    filled = [
        f.replace("${Partition}", "aws").replace("${Region}", "us-east-2").replace("${Account}", "123456789012")
        for f in formats
    ]
    return [f.replace(".*", n) for f in filled for n in NAMES]


def _allowed_statements() -> list[dict[str, Any]]:
    return [s for name in EXECUTION_POLICIES for s in execution_policy(name)["Statement"] if s["Effect"] == "Allow"]


def granted(action: str, statements: list[dict[str, Any]]) -> bool:
    for statement in statements:
        if any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in _as_list(statement["Action"])):
            resources = _as_list(statement["Resource"])
            if any(fnmatch.fnmatchcase(arn, r) for arn in arns(action) for r in resources):
                return True
    return False


def _unused(resource_type: str, action: str) -> bool:
    return any(
        t == resource_type and fnmatch.fnmatchcase(action.lower(), p.lower())
        for t, p in (*UNUSED_FEATURES, *NOT_IAM_ACTIONS)
    )


def gaps(resource_types: set[str], statements: list[dict[str, Any]]) -> dict[str, list[str]]:
    missing = {}
    for resource_type in sorted(resource_types):
        lacking = sorted(
            p
            for p in handler_permissions(resource_type)
            if not _unused(resource_type, p) and not granted(p, statements)
        )
        if lacking:
            missing[resource_type] = lacking
    return missing


def _as_managed_policy(name: str) -> dict[str, Any]:
    return {
        "Resources": {
            "ExecutionPolicy": {
                "Type": "AWS::IAM::ManagedPolicy",
                "Properties": {"PolicyDocument": execution_policy(name)},
            }
        }
    }


@pytest.fixture(scope="module")
def cfn_lint_of_the_policies(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], dict[str, list[str]]]:
    """cfn-lint once over the five policies, each a template of its own (one start of cfn-lint, not five): its run
    and each policy's findings (parseable lines start with the template's path)."""
    folder = tmp_path_factory.mktemp("execution_policies")
    paths = {name: folder / f"{Path(name).stem}.template.json" for name in EXECUTION_POLICIES}
    for name, path in paths.items():
        path.write_text(json.dumps(_as_managed_policy(name)))
    result = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), "--format", "parseable", *map(str, paths.values())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    findings = {
        name: [line for line in result.stdout.splitlines() if line.startswith(f"{path}:")]
        for name, path in paths.items()
    }
    return result, findings


@pytest.mark.parametrize("name", EXECUTION_POLICIES)
def test_the_documented_cfn_execution_policies_are_valid_managed_policies(
    name: str, cfn_lint_of_the_policies: tuple[subprocess.CompletedProcess[str], dict[str, list[str]]]
) -> None:
    """docs/cfn-execution-policy*.json, filled in as the README shows, pass cfn-lint as AWS::IAM::ManagedPolicy."""
    document = execution_policy(name)
    assert len(json.dumps(document, separators=(",", ":"))) < 6144  # IAM's managed policy size limit
    assert not any(s["Effect"] == "Allow" and s["Action"] in ("*", "iam:*") for s in document["Statement"])
    result, findings = cfn_lint_of_the_policies
    assert findings[name] == [], result.stdout
    # Exit status 0 unless another policy has findings (cfn-lint's own failure is status 1 with no finding).
    assert result.returncode == 0 or any(findings.values()), result.stdout + result.stderr


@pytest.mark.parametrize("synth_name", SYNTHS)
def test_the_execution_policies_cover_what_cloudformation_needs_for_every_stack(
    synth_name: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(synth_name)
    types = {r["Type"] for t in synth.templates.values() for r in t["Resources"].values()}
    assert {
        "AWS::EKS::Cluster",
        "AWS::Logs::LogGroup",
        "AWS::Lambda::LayerVersion",
        "AWS::EC2::LaunchTemplate",
    } <= types
    assert gaps(types, _allowed_statements()) == {}


def test_the_coverage_check_can_fail() -> None:
    """What the first version of the policy lacked: CreateCluster and ListLayerVersions take "*" only, and the
    log groups' KMS key needs logs:AssociateKmsKey."""
    assert arns("eks:CreateCluster") == ["*"] and arns("lambda:ListLayerVersions") == ["*"]
    scoped_only = [
        {"Effect": "Allow", "Action": "eks:*", "Resource": [f"arn:aws:eks:us-east-2:123456789012:cluster/{CLUSTER}"]},
        {
            "Effect": "Allow",
            "Action": "lambda:ListLayerVersions",
            "Resource": "arn:aws:lambda:us-east-2:123456789012:layer:*",
        },
        {
            "Effect": "Allow",
            "Action": ["logs:CreateLogGroup"],
            "Resource": f"arn:aws:logs:us-east-2:123456789012:log-group:/aws/eks/{CLUSTER}/*",
        },
    ]
    missing = gaps({"AWS::EKS::Cluster", "AWS::Lambda::LayerVersion", "AWS::Logs::LogGroup"}, scoped_only)
    assert "eks:CreateCluster" in missing["AWS::EKS::Cluster"]
    assert "lambda:ListLayerVersions" in missing["AWS::Lambda::LayerVersion"]
    assert "logs:AssociateKmsKey" in missing["AWS::Logs::LogGroup"]


def test_create_cluster_on_star_is_limited_to_this_clusters_tag(default_synth: Synth) -> None:
    (statement,) = [s for s in _allowed_statements() if "eks:CreateCluster" in _as_list(s["Action"])]
    assert statement["Resource"] == "*"
    assert statement["Condition"] == {"StringEquals": {"aws:RequestTag/cluster": CLUSTER}}
    # The condition holds only because the cluster carries that tag: without it, AccessDenied a minute in.
    (cluster,) = default_synth.resources("cluster", "AWS::EKS::Cluster").values()
    assert {"Key": "cluster", "Value": default_synth.settings.cluster_name} in cluster["Properties"]["Tags"]


def test_the_observability_policy_covers_its_collector_and_managed_policy(observed_synth: Synth) -> None:
    # CreateScraper is authorized against the cluster, not a scraper ARN.
    assert arns("aps:CreateScraper")[0] == f"arn:aws:eks:us-east-2:123456789012:cluster/{CLUSTER}"
    # CloudWatchAgentServerPolicy among the attachable:
    attachable = [
        arn
        for s in execution_policy("cfn-execution-policy-observability.json")["Statement"]
        for arn in s.get("Condition", {}).get("ArnEquals", {}).get("iam:PolicyARN", [])
    ]
    role_policies = [
        arn["Fn::Join"][1][-1]
        for r in observed_synth.templates["observability"]["Resources"].values()
        if r["Type"] == "AWS::IAM::Role"
        for arn in r["Properties"].get("ManagedPolicyArns", [])
    ]
    assert role_policies and all(any(a.endswith(p) for a in attachable) for p in role_policies)
