"""cdk-nag acknowledgements, each made at the resource it concerns with the reason it is deliberate."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct


def acknowledge(scope: IConstruct, rule_id: str, reason: str, *, applies_to: list[str] | None = None) -> None:
    """Acknowledge a cdk-nag finding on ``scope`` and everything below it.

    ``applies_to`` narrows an IAM4/IAM5 acknowledgement to the listed findings (e.g. one managed policy).
    """
    if applies_to:
        for finding in applies_to:
            Validations.of(scope).acknowledge(Acknowledgment(id=f"{rule_id}[{finding}]", reason=reason))
    else:
        Validations.of(scope).acknowledge(Acknowledgment(id=rule_id, reason=reason))


# checkov findings on the Lambda functions aws-cdk-lib generates for its custom resources (the kubectl
# provider's handler and framework function, the VPC's restrict-default-security-group provider, the access-log
# bucket's emptying on delete): we do not
# write their code or their configuration, and they run only during a deploy, on CloudFormation's behalf.
CDK_GENERATED_FUNCTIONS = (
    "KubectlProvider",
    "VpcRestrictDefaultSGCustomResourceProvider",
    "S3AutoDeleteObjectsCustomResourceProvider",
)
CHECKOV_CDK_LAMBDA_FINDINGS = {
    "CKV_AWS_115": (
        "aws-cdk-lib's custom-resource function runs once per deploy operation; a reserved concurrency would only add a"
        " failure mode."
    ),
    "CKV_AWS_116": (
        "aws-cdk-lib's custom-resource function is invoked synchronously by CloudFormation, which reports its failures;"
        " a DLQ would hold nothing."
    ),
    "CKV_AWS_117": (
        "aws-cdk-lib's custom-resource function calls only AWS APIs (or the public Kubernetes endpoint); the kubectl"
        " provider's are in the VPC unless the endpoint is public-only."
    ),
    "CKV_AWS_173": (
        "aws-cdk-lib's custom-resource function's environment holds no secret (the kubectl provider's is its own"
        " configuration), so the AWS managed key suffices."
    ),
}


def acknowledge_checkov_on_cdk_lambdas(stack: IConstruct) -> None:
    """Skip the findings above, with their reasons, on aws-cdk-lib's own functions only (the metadata checkov reads)."""
    from aws_cdk import CfnResource

    for child in stack.node.find_all():
        if (
            isinstance(child, CfnResource)
            and child.cfn_resource_type == "AWS::Lambda::Function"
            and any(p in child.node.path for p in CDK_GENERATED_FUNCTIONS)
        ):
            child.add_metadata(
                "checkov",
                {"skip": [{"id": check, "comment": reason} for check, reason in CHECKOV_CDK_LAMBDA_FINDINGS.items()]},
            )


def skip_checkov(resource: IConstruct, findings: dict[str, str]) -> None:
    """Skip checkov's CloudFormation checks on one resource (its L1, or the construct whose default child it is),
    each with its reason (the metadata checkov reads)."""
    from aws_cdk import CfnResource

    target = resource if isinstance(resource, CfnResource) else resource.node.default_child
    if not isinstance(target, CfnResource):
        raise TypeError(f"{resource.node.path}: no CloudFormation resource to put checkov's skips on")
    target.add_metadata("checkov", {"skip": [{"id": check, "comment": reason} for check, reason in findings.items()]})
