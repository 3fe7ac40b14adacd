"""vCPU quotas: what this deploy holds at most, beside everything else the account runs, against each quota."""

from __future__ import annotations

from botocore.exceptions import ClientError

from preflight import redeploy as day2
from preflight.context import Context, quota_code_of
from preflight.results import CheckResult, fail, ok
from settings.instance_types import STANDARD_QUOTA

STANDARD_QUOTA_CODE, STANDARD_QUOTA_NAME = STANDARD_QUOTA


def _quota_value(ctx: Context, code: str) -> tuple[float, bool]:
    """(value, is_aws_default) of an EC2 quota in REGION."""
    sq = ctx.client("service-quotas")
    try:
        return float(sq.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]), False
    except ClientError as err:
        # Accounts that never had the quota changed may have no applied value: the default applies.
        if err.response.get("Error", {}).get("Code") != "NoSuchResourceException":
            raise
    default = sq.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)
    return float(default["Quota"]["Value"]), True


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else f"{value:g}"


def planned_nodegroup_change(ctx: Context, nodegroup_name: str) -> day2.ResourceChange | None:
    redeploy = ctx.inp.redeploy
    if redeploy is None:
        return None
    return day2.nodegroup_change(redeploy, ctx.deployed(), nodegroup_name)


def _check_quota(
    ctx: Context,
    name: str,
    code: str,
    quota_name: str,
    instance_type: str,
    node_count: int,
    node_vcpus: int,
    *,
    nodegroup_name: str = "",
    surge_nodes: int = 0,
) -> CheckResult:
    actual = quota_code_of(instance_type)
    if actual != code:
        # Checking the wrong quota would pass or fail for reasons unrelated to the nodes we create.
        return fail(
            name,
            f"{instance_type} counts against {actual or 'a quota not checked here'}, not {quota_name} ({code})",
            f"pass the quota code of {instance_type} ({actual or 'its family quota'}) to the preflight",
        )
    value, is_default = _quota_value(ctx, code)
    target = node_count * node_vcpus
    # This cluster's own nodes are capacity it already holds: a redeploy asks only for what it adds.
    held, others = ctx.running_vcpus(code)
    change = planned_nodegroup_change(ctx, nodegroup_name) if nodegroup_name else None
    if change is not None and change.action == day2.REPLACE:
        peak, how = held + target, "the new nodegroup starts beside the old one"
    elif day2.rolls(change):
        # EKS adds the surge to the group's size (after any scaling change), then drains old nodes.
        peak, how = max(held, target) + surge_nodes * node_vcpus, f"rolling update with {surge_nodes} extra node(s)"
    else:
        peak, how = max(held, target), "no node replaced"
    need = others + peak
    detail = (
        f"need {need} vCPU: {node_count} x {node_vcpus} after the deploy, at most {peak} during it ({how}); this"
        f" cluster holds {held}, other workloads {others}; quota"
        f" {_number(value)}{' (AWS default)' if is_default else ''}"
    )
    if value >= need:
        return ok(name, detail)
    return fail(
        name,
        detail,
        f"request an increase of {quota_name} ({code}) in {ctx.inp.region} to at least {need} in the Service Quotas"
        " console",
    )


def check_gpu_quota(ctx: Context) -> CheckResult:
    inp = ctx.inp
    return _check_quota(
        ctx,
        "gpu-vcpu-quota",
        inp.gpu_quota_code,
        inp.gpu_quota_name,
        inp.gpu_instance_type,
        inp.gpu_node_count,
        inp.gpu_vcpus,
        nodegroup_name=inp.redeploy.gpu_nodegroup_name if inp.redeploy else "",
        surge_nodes=inp.gpu_update_surge_nodes,
    )


def check_standard_quota(ctx: Context) -> CheckResult:
    inp = ctx.inp
    return _check_quota(
        ctx,
        "standard-vcpu-quota",
        STANDARD_QUOTA_CODE,
        STANDARD_QUOTA_NAME,
        inp.system_instance_type,
        inp.system_node_count,
        inp.system_vcpus,
        nodegroup_name=inp.redeploy.system_nodegroup_name if inp.redeploy else "",
        surge_nodes=inp.system_update_surge_nodes,
    )
