"""Where the nodes go: the GPU type is offered in GPU_AZ with EFA, the VPC's AZs exist, and a GPU capacity
reservation can hold the GPU nodes.

Without a cached look-up the VPC falls back to REGION + a, b, c, which do not all exist in every Region
and account (us-west-1 has two AZs per account, ap-northeast-1 no "b" for newer accounts): the network
stack would fail in its first minute. A reservation in another AZ, of another type, not yet active or
too small would leave the GPU nodegroup launching nothing for 20 minutes before it fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from preflight import redeploy as day2
from preflight.context import Context
from preflight.quota_checks import planned_nodegroup_change
from preflight.results import CheckResult, fail, ok, warn

AZ_NAME = "vpc-azs"
RESERVATION_NAME = "gpu-capacity-reservation"


def check_vpc_azs(ec2: Any, *, region: str, vpc_azs: Sequence[str]) -> CheckResult:
    """Every AZ of the VPC is one of the account's available AZs in REGION."""
    zones = ec2.describe_availability_zones(Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}])[
        "AvailabilityZones"
    ]
    states = {str(z["ZoneName"]): str(z.get("State", "")) for z in zones}
    available = sorted(name for name, state in states.items() if state == "available")
    missing = [az for az in vpc_azs if az not in states]
    if missing:
        return fail(
            AZ_NAME,
            f"{', '.join(missing)} not an AZ of {region} for this account (it has"
            f" {', '.join(sorted(states)) or 'none'})",
            "run `make lookup` (caches this account's AZs in cdk.context.json; commit it) or set GPU_AZ to one of: "
            + ", ".join(available),
        )
    down = [f"{az} is {states[az]}" for az in vpc_azs if states[az] != "available"]
    if down:
        return fail(
            AZ_NAME,
            "; ".join(down),
            "deploy when the AZ is available again, or `make lookup` after choosing another GPU_AZ",
        )
    return ok(AZ_NAME, f"{', '.join(vpc_azs)} available")


def _placement_group_name(arn: str) -> str:
    return arn.rsplit("/", 1)[-1] if arn else ""


def check_capacity_reservation(
    ec2: Any,
    *,
    reservation_id: str,
    reservation_type: str,
    placement_group: str,
    instance_type: str,
    gpu_az: str,
    nodes: int,
    held: int,
) -> CheckResult:
    """The reservation is active, of GPU_NODE_TYPE, in GPU_AZ, of the kind the settings say, in the placement
    group the settings name (or none), with free instances for the nodes this deploy adds to it (`held`:
    this cluster's nodes already running in it)."""
    if not reservation_id:
        return ok(RESERVATION_NAME, "none: On-Demand capacity (InsufficientInstanceCapacity possible)")
    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") not in (
            "InvalidCapacityReservationId.NotFound",
            "InvalidCapacityReservationId.Malformed",
        ):
            raise
        found = []
    if not found:
        return fail(
            RESERVATION_NAME,
            f"{reservation_id} not found in this account and Region",
            "set GPU_CAPACITY_RESERVATION_ID to a reservation of this account in REGION (`aws ec2"
            " describe-capacity-reservations`)",
        )
    cr = found[0]
    kind = "capacity-block" if cr.get("ReservationType") == "capacity-block" else "on-demand"
    problems = []
    if str(cr["InstanceType"]) != instance_type:
        problems.append(
            (
                f"it reserves {cr['InstanceType']}, not {instance_type}",
                f"set GPU_NODE_TYPE={cr['InstanceType']} or use a reservation of {instance_type}",
            )
        )
    if str(cr["AvailabilityZone"]) != gpu_az:
        problems.append(
            (
                f"it is in {cr['AvailabilityZone']}, not GPU_AZ {gpu_az}",
                f"set GPU_AZ={cr['AvailabilityZone']} (and `make lookup`), or use a reservation in {gpu_az}",
            )
        )
    if kind != reservation_type:
        problems.append(
            (
                f"it is a{'' if kind == 'on-demand' else ' Capacity Block,'} {kind} reservation",
                f"set GPU_CAPACITY_RESERVATION_TYPE={kind}",
            )
        )
    group = _placement_group_name(str(cr.get("PlacementGroupArn", "")))
    if group and placement_group != group:
        problems.append(
            (
                f"it was made in placement group {group}",
                f"set GPU_PLACEMENT_GROUP={group}: only instances launched into it use the reservation",
            )
        )
    if not group and placement_group not in ("off", ""):
        problems.append(
            (
                f"it is in no placement group, the nodes would launch into {placement_group}",
                "set GPU_PLACEMENT_GROUP=off",
            )
        )
    state = str(cr.get("State", ""))
    if state != "active":
        when = (
            f" (starts {cr['StartDate']})"
            if cr.get("StartDate") and state in ("scheduled", "payment-pending", "pending")
            else ""
        )
        problems.append(
            (f"it is {state}{when}", "deploy the GPU nodes once it is active (GPU_NODE_COUNT=0 until then)")
        )
    free, total = int(cr.get("AvailableInstanceCount", 0)), int(cr.get("TotalInstanceCount", 0))
    need = max(0, nodes - held)
    if nodes and free < need:
        problems.append(
            (
                f"{free} of {total} instances free, the deploy adds {need}",
                "use a larger reservation, free instances in it, or fewer replicas",
            )
        )
    if problems and not nodes:
        # Parked (GPU_NODE_COUNT=0): nothing launches into it now, and a park must never be refused.
        return warn(
            RESERVATION_NAME,
            f"{reservation_id}: " + "; ".join(p for p, _ in problems),
            f"parked, so not refused; before unparking: {problems[0][1]}",
        )
    if problems:
        return fail(RESERVATION_NAME, f"{reservation_id}: " + "; ".join(p for p, _ in problems), problems[0][1])
    detail = (
        f"{reservation_id}: {kind}, {state}, {instance_type} in {gpu_az}, {free} of {total} free for {need} new node(s)"
    )
    if kind == "capacity-block" and cr.get("EndDate"):
        return warn(
            RESERVATION_NAME,
            detail,
            f"the block ends {cr['EndDate']}: EKS scales the nodegroup to 0 about 40 minutes before",
        )
    return ok(RESERVATION_NAME, detail)


# --- the checks, on the run's context ------------------------------------------------------------------


def _offered_azs(ctx: Context, extra_filters: list[dict[str, Any]]) -> list[str]:
    # Filtered EC2 describes may return empty pages with a NextToken: always paginate.
    pages = (
        ctx.client("ec2")
        .get_paginator("describe_instance_type_offerings")
        .paginate(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": [ctx.inp.gpu_instance_type]}, *extra_filters],
        )
    )
    return sorted({str(o["Location"]) for page in pages for o in page["InstanceTypeOfferings"]})


def check_gpu_offering(ctx: Context) -> CheckResult:
    inp = ctx.inp
    if _offered_azs(ctx, [{"Name": "location", "Values": [inp.gpu_az]}]):
        return ok("gpu-az-offering", f"{inp.gpu_instance_type} is offered in {inp.gpu_az}")
    offered = _offered_azs(ctx, [])
    if not offered:
        return fail(
            "gpu-az-offering",
            f"{inp.gpu_instance_type} is not offered in any AZ of {inp.region}",
            f"set GPU_NODE_TYPE to a type offered in {inp.region}, or deploy to another REGION",
        )
    return fail(
        "gpu-az-offering",
        f"{inp.gpu_instance_type} is not offered in {inp.gpu_az}",
        f"set GPU_AZ to one of: {', '.join(offered)}",
    )


def check_gpu_efa(ctx: Context) -> CheckResult:
    itype = ctx.inp.gpu_instance_type
    infos = ctx.client("ec2").describe_instance_types(InstanceTypes=[itype])["InstanceTypes"]
    network = infos[0].get("NetworkInfo", {}) if infos else {}
    efa = network.get("EfaSupported")
    if efa is True:
        interfaces = network.get("EfaInfo", {}).get("MaximumEfaInterfaces")
        suffix = f" (up to {int(interfaces)} EFA interfaces)" if interfaces is not None else ""
        return ok("gpu-efa", f"{itype} supports EFA{suffix}")
    fix = (
        "set GPU_NODE_TYPE to a type with EFA (`aws ec2 describe-instance-types --filters"
        " Name=network-info.efa-supported,Values=true`)"
    )
    if efa is False:
        return fail("gpu-efa", f"{itype} does not support EFA", fix)
    # Never assume EFA: the GPU nodegroup attaches EFA interfaces and would fail to launch.
    return fail(
        "gpu-efa",
        f"EFA support of {itype} unknown: DescribeInstanceTypes returned no NetworkInfo.EfaSupported",
        fix,
    )


def check_availability_zones(ctx: Context) -> CheckResult:
    return check_vpc_azs(ctx.client("ec2"), region=ctx.inp.region, vpc_azs=ctx.inp.vpc_azs)


def check_reservation(ctx: Context) -> CheckResult:
    inp = ctx.inp
    if not inp.gpu_capacity_reservation_id:
        detail = "none: On-Demand capacity (InsufficientInstanceCapacity possible)"
        if inp.autoscaling and inp.gpu_placement_group != "off" and inp.gpu_node_count:
            # EC2 (placement groups, cluster): instances added to a cluster placement group later, one launch at a
            # time, are likelier to meet InsufficientInstanceCapacity than those launched together; the Cluster
            # Autoscaler then backs the nodegroup off (5 min, doubling to 30: its flag defaults).
            return warn(
                RESERVATION_NAME,
                detail,
                "with PREFILL/DECODE_MAX_REPLICAS the Cluster Autoscaler adds GPU nodes one launch at a time into the"
                f" cluster placement group ({inp.gpu_placement_group}), where InsufficientInstanceCapacity is likelier"
                " and each failure backs the nodegroup off 5 to 30 minutes: reserve the maxima"
                " (GPU_CAPACITY_RESERVATION_ID), or GPU_PLACEMENT_GROUP=off to trade EFA locality for launches"
                " (docs/scaling.md)",
            )
        return ok(RESERVATION_NAME, detail)
    change = planned_nodegroup_change(ctx, inp.redeploy.gpu_nodegroup_name) if inp.redeploy else None
    held = ctx.nodes_in_reservation(inp.gpu_capacity_reservation_id)
    if change is not None and change.action == day2.REPLACE:
        held = 0  # the new nodegroup starts beside the old one: its nodes are all new to the reservation
    if (
        inp.gpu_capacity_reservation_type == "capacity-block"
        and held
        and (day2.rolls(change) or (change is not None and change.action == day2.REPLACE))
    ):
        # EKS updates a Capacity Block nodegroup only at desired size 0 (EKS user guide, Capacity Blocks for
        # managed node groups): the roll would stall with the nodes still in the block.
        return fail(
            RESERVATION_NAME,
            f"{inp.gpu_capacity_reservation_id}: this deploy rolls the Capacity Block nodegroup while {held} node(s)"
            " run in it",
            "park first (`GPU_NODE_COUNT=0 make deploy`), deploy the change parked, then unpark",
        )
    return check_capacity_reservation(
        ctx.client("ec2"),
        reservation_id=inp.gpu_capacity_reservation_id,
        reservation_type=inp.gpu_capacity_reservation_type,
        placement_group=inp.gpu_placement_group,
        instance_type=inp.gpu_instance_type,
        gpu_az=inp.gpu_az,
        # A rolling update with the default strategy launches its surge into the reservation too: only when
        # the plan rolls the nodegroup, as the quota check counts it.
        nodes=(
            inp.gpu_node_count + (inp.gpu_update_surge_nodes if day2.rolls(change) else 0) if inp.gpu_node_count else 0
        ),
        held=held,
    )
