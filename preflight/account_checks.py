"""The account itself: credentials, Region, the CDK bootstrap, the admin principals, where the API answers."""

from __future__ import annotations

from botocore.exceptions import ClientError

from preflight.context import OPTED_IN, Context, home_region
from preflight.principals import check_admin_principals
from preflight.reachability import check_api_endpoint
from preflight.results import CheckResult, fail, ok
from settings.ci_access import CDK_TOOLKIT_STACK


def stack_status_usable(status: str) -> bool:
    """Whether a bootstrap stack in `status` can be deployed against."""
    return not (
        status.endswith("_FAILED")
        or status == "ROLLBACK_COMPLETE"
        or status.startswith("DELETE_")
        # A change set created but never executed: the stack exists with no resources.
        or status == "REVIEW_IN_PROGRESS"
    )


def check_credentials(ctx: Context) -> CheckResult:
    sts = ctx.client("sts", home_region(ctx.inp.region))
    identity = sts.get_caller_identity()
    ctx.account = str(identity["Account"])
    return ok("credentials", f"account {ctx.account} as {identity['Arn']}")


def check_region(ctx: Context) -> CheckResult:
    region = ctx.inp.region
    ec2 = ctx.client("ec2", home_region(region))
    regions = ec2.describe_regions(AllRegions=True)["Regions"]
    status = next((str(r.get("OptInStatus", "")) for r in regions if r["RegionName"] == region), None)
    if status is None:
        ctx.region_usable = False
        return fail(
            "region",
            f"{region} is not a Region of this AWS partition",
            "set REGION to an existing AWS Region such as us-east-2",
        )
    if status in OPTED_IN:
        return ok("region", f"{region} enabled ({status})")
    ctx.region_usable = False
    return fail(
        "region",
        f"{region} is {status} for account {ctx.account}",
        f"enable {region} for account {ctx.account} in the AWS console (Account > AWS Regions) and wait until it shows"
        " Enabled",
    )


def check_bootstrap(ctx: Context) -> CheckResult:
    inp = ctx.inp
    stack_name = inp.bootstrap_stack_name
    toolkit_flag = "" if stack_name == CDK_TOOLKIT_STACK else f"--toolkit-stack-name {stack_name} "
    bootstrap = f"`npx cdk bootstrap {toolkit_flag}aws://{ctx.account}/{inp.region}`"
    try:
        stacks = ctx.client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as err:
        error = err.response.get("Error", {})
        if error.get("Code") != "ValidationError" or "does not exist" not in str(error.get("Message", "")):
            raise
        stacks = []
    if not stacks:
        return fail("cdk-bootstrap", f"stack {stack_name} not found in {inp.region}", f"run {bootstrap}")
    status = str(stacks[0]["StackStatus"])
    if not stack_status_usable(status):
        return fail(
            "cdk-bootstrap",
            f"stack {stack_name} is {status}",
            f"delete or repair {stack_name} in the CloudFormation console, then run {bootstrap}",
        )
    versions = [str(o["OutputValue"]) for o in stacks[0].get("Outputs", []) if o.get("OutputKey") == "BootstrapVersion"]
    version = f", bootstrap version {versions[0]}" if versions else ""
    return ok("cdk-bootstrap", f"stack {stack_name} is {status}{version}")


def check_admin_principals_of(ctx: Context) -> CheckResult:
    partition = (
        "aws-cn"
        if ctx.inp.region.startswith("cn-")
        else "aws-us-gov"
        if ctx.inp.region.startswith("us-gov-")
        else "aws"
    )
    execution_role = ctx.inp.execution_role_arn.replace("${AWS::AccountId}", ctx.account).replace(
        "${AWS::Partition}", partition
    )
    return check_admin_principals(
        ctx.client("iam", home_region(ctx.inp.region)),
        arns=ctx.inp.admin_principal_arns,
        account=ctx.account,
        execution_role_arn=execution_role,
    )


def check_api_endpoint_of(ctx: Context) -> CheckResult:
    return check_api_endpoint(ctx.inp.endpoint_access, ctx.inp.public_access_cidrs, ctx.inp.environ)
