"""Who may touch the S3 copy of the weights, and how much: the GPU workers read exactly MODEL_SOURCE's prefix;
the mirror Job (`make mirror-model`) writes it, or only MODEL_NEXT_SOURCE's when that is set (the next revision
is filled while the served prefix stays unwritable). Both are EKS Pod Identity roles of the serving stack.

The statements are built here once and read by the stack, the execution-policy tests and the policy
evaluation tests (tests/test_model_s3.py, which asks an IAM simulator, not a grep).
"""

from __future__ import annotations

from aws_cdk import Aws
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from settings import Settings
from settings.model_source import S3Prefix
from stacks import nag
from stacks.pod_identity import pod_identity_role

# The mirror Job's ServiceAccount (created with the Job by tools/mirror_model.py, deleted with it).
MIRROR_SERVICE_ACCOUNT = "model-mirror"
READ_ACTIONS = ("s3:GetObject",)
# boto3's upload_fileobj: PutObject, or CreateMultipartUpload/UploadPart/CompleteMultipartUpload (all
# s3:PutObject) and AbortMultipartUpload on failure; GetObject to read each file back for its hash.
WRITE_ACTIONS = ("s3:PutObject", "s3:AbortMultipartUpload", "s3:GetObject")


def _list_prefix(source: S3Prefix) -> iam.PolicyStatement:
    """ListBucket on the bucket, only for listings under the prefix (what Ray's downloader asks: Prefix=PREFIX/)."""
    return iam.PolicyStatement(
        actions=["s3:ListBucket"],
        resources=[source.bucket_arn(Aws.PARTITION)],
        conditions={"StringLike": {"s3:prefix": [f"{source.key_prefix}*"]}},
    )


def _kms(actions: list[str], key_arn: str) -> iam.PolicyStatement:
    """The bucket's SSE-KMS key, only as S3 uses it on the caller's behalf."""
    return iam.PolicyStatement(
        actions=actions,
        resources=[key_arn],
        conditions={"StringEquals": {"kms:ViaService": f"s3.{Aws.REGION}.amazonaws.com"}},
    )


def reader_statements(source: S3Prefix, kms_key_arn: str) -> list[iam.PolicyStatement]:
    statements = [
        iam.PolicyStatement(actions=list(READ_ACTIONS), resources=[source.object_arn(Aws.PARTITION)]),
        _list_prefix(source),
    ]
    if kms_key_arn:
        statements.append(_kms(["kms:Decrypt"], kms_key_arn))
    return statements


def writer_statements(source: S3Prefix, kms_key_arn: str) -> list[iam.PolicyStatement]:
    statements = [
        iam.PolicyStatement(actions=list(WRITE_ACTIONS), resources=[source.object_arn(Aws.PARTITION)]),
        # No delete: a finished mirror (its completion object there) is never rewritten (model_mirror_script.py).
        _list_prefix(source),
    ]
    if kms_key_arn:
        statements.append(_kms(["kms:Decrypt", "kms:GenerateDataKey"], kms_key_arn))
    return statements


def acknowledge_prefix_wildcard(role: iam.Role, source: S3Prefix, setting: str = "MODEL_SOURCE") -> None:
    nag.acknowledge(
        role,
        "AwsSolutions-IAM5",
        f"The wildcard is every object under the one prefix of {setting} (a model is many files); "
        "the prefix itself has no wildcard (settings/model_source.py).",
        applies_to=[f"Resource::arn:<AWS::Partition>:s3:::{source.bucket}/{source.key_prefix}*"],
    )


def mirror_writer_role(
    scope: Construct,
    *,
    cluster: eks.ICluster,
    settings: Settings,
) -> tuple[iam.Role, eks.CfnPodIdentityAssociation]:
    """The mirror Job's role: write (and read back) under MODEL_NEXT_SOURCE's prefix when set, else MODEL_SOURCE's;
    with a Hub token, read that secret too (added by the stack)."""
    source = settings.mirror_s3
    if source is None:
        raise ValueError("the mirror Job's role needs an s3:// MODEL_SOURCE")
    role, association = pod_identity_role(
        scope,
        "ModelMirrorRole",
        "ModelMirrorPodIdentity",
        cluster=cluster,
        namespace=settings.namespace,
        service_account=MIRROR_SERVICE_ACCOUNT,
        description=(
            f"EKS Pod Identity of {settings.namespace}/{MIRROR_SERVICE_ACCOUNT}: make mirror-model writes {source.uri}"
        ),
    )
    for statement in writer_statements(source, settings.model_source_kms_key_arn):
        role.add_to_policy(statement)
    acknowledge_prefix_wildcard(role, source, "MODEL_NEXT_SOURCE" if settings.model_next_s3 else "MODEL_SOURCE")
    return role, association
