"""The preflight's GPU capacity reservation check (preflight/capacity.py): a reservation that holds the nodes
passes, one that cannot is one clear line, a park is never refused, the surge counts only when the plan rolls
the nodegroup, a Capacity Block nodegroup is rolled only empty, and scale-ups into a placement group without a
reservation are warned about.

EC2 DescribeCapacityReservations: moto 5.2.5 has no Capacity Reservations at all, so that one call goes to a
botocore Stubber'd EC2 client (the Stubber checks the request: the reservation ID), or, through run_checks, to
a before-call hook that answers it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from botocore.stub import Stubber  # type: ignore[import-untyped]

from preflight.capacity import check_capacity_reservation
from preflight.runner import run_checks
from tests import preflight_fakes
from tests.preflight_fakes import ACCOUNT, INPUT, REGION, by_name, create_bootstrap_stack, default_quotas

aws = preflight_fakes.aws  # fake credentials, everything served by moto

RESERVATION = "cr-0123456789abcdef0"


def _reservation(**changes: Any) -> dict[str, Any]:
    reservation = {
        "CapacityReservationId": RESERVATION,
        "InstanceType": "g6.8xlarge",
        "AvailabilityZone": "sa-east-1a",
        "State": "active",
        "ReservationType": "default",
        "InstanceMatchCriteria": "targeted",
        "AvailableInstanceCount": 2,
        "TotalInstanceCount": 2,
    }
    return {**reservation, **changes}


def _check(reservation: dict[str, Any] | None, **changes: Any) -> Any:
    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    kwargs: dict[str, Any] = {
        "reservation_id": RESERVATION,
        "reservation_type": "on-demand",
        "placement_group": "off",
        "instance_type": "g6.8xlarge",
        "gpu_az": "sa-east-1a",
        "nodes": 2,
        "held": 0,
    }
    kwargs.update(changes)
    with Stubber(ec2) as stub:
        if reservation is None:
            stub.add_client_error(
                "describe_capacity_reservations",
                "InvalidCapacityReservationId.NotFound",
                "not found",
                expected_params={"CapacityReservationIds": [RESERVATION]},
            )
        else:
            stub.add_response(
                "describe_capacity_reservations",
                {"CapacityReservations": [reservation]},
                {"CapacityReservationIds": [RESERVATION]},
            )
        return check_capacity_reservation(ec2, **kwargs)


def test_a_reservation_that_holds_the_nodes_passes() -> None:
    result = _check(_reservation())
    assert (result.verdict, result.detail) == (
        "PASS",
        f"{RESERVATION}: on-demand, active, g6.8xlarge in sa-east-1a, 2 of 2 free for 2 new node(s)",
    )


def test_nodes_already_in_the_reservation_count_as_held() -> None:
    assert _check(_reservation(AvailableInstanceCount=0), held=2).ok
    assert not _check(_reservation(AvailableInstanceCount=0), held=1).ok


def test_a_capacity_block_passes_and_says_when_it_ends() -> None:
    end = datetime(2026, 12, 8, 11, 30, tzinfo=UTC)
    result = _check(_reservation(ReservationType="capacity-block", EndDate=end), reservation_type="capacity-block")
    assert result.verdict == "WARN" and "ends 2026-12-08" in result.warning


@pytest.mark.parametrize(
    ("reservation", "changes", "detail", "fix"),
    [
        (
            _reservation(AvailabilityZone="sa-east-1b"),
            {},
            "it is in sa-east-1b, not GPU_AZ sa-east-1a",
            "set GPU_AZ=sa-east-1b",
        ),
        (
            _reservation(InstanceType="g6.12xlarge"),
            {},
            "it reserves g6.12xlarge, not g6.8xlarge",
            "set GPU_NODE_TYPE=g6.12xlarge",
        ),
        (_reservation(State="expired"), {}, "it is expired", "once it is active"),
        (
            _reservation(State="scheduled", StartDate=datetime(2026, 12, 2, 11, 30, tzinfo=UTC)),
            {},
            "it is scheduled (starts 2026-12-02",
            "once it is active",
        ),
        (_reservation(AvailableInstanceCount=1), {}, "1 of 2 instances free, the deploy adds 2", "larger reservation"),
        (
            _reservation(AvailableInstanceCount=2),
            {"nodes": 4},
            "2 of 2 instances free, the deploy adds 4",
            "larger reservation",
        ),
        (
            _reservation(ReservationType="capacity-block"),
            {},
            "it is a Capacity Block, capacity-block reservation",
            "GPU_CAPACITY_RESERVATION_TYPE=capacity-block",
        ),
        (
            _reservation(),
            {"reservation_type": "capacity-block"},
            "it is a on-demand reservation",
            "GPU_CAPACITY_RESERVATION_TYPE=on-demand",
        ),
        (
            _reservation(PlacementGroupArn=f"arn:aws:ec2:{REGION}:{ACCOUNT}:placement-group/gpu-pg"),
            {},
            "it was made in placement group gpu-pg",
            "GPU_PLACEMENT_GROUP=gpu-pg",
        ),
        (
            _reservation(),
            {"placement_group": "my-pg"},
            "it is in no placement group, the nodes would launch into my-pg",
            "GPU_PLACEMENT_GROUP=off",
        ),
        (None, {}, "not found in this account and Region", "GPU_CAPACITY_RESERVATION_ID"),
    ],
)
def test_a_reservation_that_cannot_hold_the_nodes_is_one_clear_line(
    reservation: dict[str, Any] | None, changes: dict[str, Any], detail: str, fix: str
) -> None:
    result = _check(reservation, **changes)
    assert result.verdict == "FAIL"
    assert detail in result.detail and fix in result.fix, (result.detail, result.fix)
    assert "\n" not in result.detail + result.fix


def test_a_reservation_in_its_placement_group_passes() -> None:
    arn = f"arn:aws:ec2:{REGION}:{ACCOUNT}:placement-group/gpu-pg"
    assert _check(_reservation(PlacementGroupArn=arn), placement_group="gpu-pg").ok


def test_no_reservation_needs_no_call() -> None:
    result = check_capacity_reservation(
        None,
        reservation_id="",
        reservation_type="on-demand",
        placement_group="on",
        instance_type="g6.8xlarge",
        gpu_az="sa-east-1a",
        nodes=2,
        held=0,
    )
    assert result.ok


def test_the_preflight_counts_this_clusters_nodes_in_the_reservation(aws: None) -> None:
    """Through run_checks: the reservation is full, but both its instances are this cluster's nodes. moto has
    no Capacity Reservations, so DescribeCapacityReservations is answered by a before-call hook (the stubbed
    answer) and the instances moto runs are marked as in it by an after-call hook on DescribeInstances."""
    create_bootstrap_stack()
    ec2 = boto3.client("ec2", region_name=REGION)
    tags = [{"ResourceType": "instance", "Tags": [{"Key": "eks:cluster-name", "Value": INPUT.cluster_name}]}]
    ec2.run_instances(ImageId="ami-12c6146b", MinCount=2, MaxCount=2, InstanceType="g6.8xlarge", TagSpecifications=tags)
    session, _ = default_quotas()
    asked: list[dict[str, Any]] = []

    def reservations(params: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]]:
        from botocore.awsrequest import AWSResponse  # type: ignore[import-untyped]

        asked.append(params["body"])
        return AWSResponse("https://ec2", 200, {}, None), {
            "CapacityReservations": [_reservation(AvailableInstanceCount=0)]
        }

    def in_the_reservation(parsed: dict[str, Any], **_: Any) -> None:
        for reservation in parsed.get("Reservations", []):
            for instance in reservation["Instances"]:
                instance["CapacityReservationId"] = RESERVATION

    session.events.register("before-call.ec2.DescribeCapacityReservations", reservations)
    session.events.register("after-call.ec2.DescribeInstances", in_the_reservation)
    inp = replace(INPUT, gpu_capacity_reservation_id=RESERVATION, gpu_placement_group="off")
    result = by_name(run_checks(inp, session))["gpu-capacity-reservation"]
    assert [body["CapacityReservationId.1"] for body in asked] == [RESERVATION]
    assert result.ok, result
    assert result.detail.endswith("0 of 2 free for 0 new node(s)")


def test_a_park_is_never_refused_for_its_reservation() -> None:
    """GPU_NODE_COUNT=0 launches nothing: an expired or scheduled reservation is said, not refused (the nightly
    park must work whatever the reservation does)."""
    for reservation in (_reservation(State="expired"), _reservation(State="scheduled", AvailabilityZone="sa-east-1b")):
        result = _check(reservation, nodes=0)
        assert result.verdict == "WARN" and "parked" in result.warning, result


def test_the_surge_counts_only_when_the_plan_rolls_the_nodegroup(aws: None) -> None:
    """A first deploy (no plan) with GPU_UPDATE_STRATEGY=default needs the nodes, not the surge."""
    create_bootstrap_stack()
    session, _ = default_quotas()

    def reservations(**_: Any) -> tuple[Any, dict[str, Any]]:
        from botocore.awsrequest import AWSResponse  # type: ignore[import-untyped]

        return AWSResponse("https://ec2", 200, {}, None), {"CapacityReservations": [_reservation()]}

    session.events.register("before-call.ec2.DescribeCapacityReservations", reservations)
    inp = replace(INPUT, gpu_capacity_reservation_id=RESERVATION, gpu_placement_group="off", gpu_update_surge_nodes=2)
    result = by_name(run_checks(inp, session))["gpu-capacity-reservation"]
    assert result.ok and result.detail.endswith("2 of 2 free for 2 new node(s)"), result


def test_a_roll_of_a_capacity_block_nodegroup_with_nodes_in_it_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """EKS updates a Capacity Block nodegroup only at desired size 0: a roll with nodes in the block is refused
    before the reservation is even read; with nothing running in it, it is checked as usual."""
    from types import SimpleNamespace

    from preflight import capacity
    from preflight import redeploy as day2

    rolling = day2.ResourceChange(
        logical_id="GpuNodesNodegroup",
        resource_type="AWS::EKS::Nodegroup",
        action=day2.MODIFY,
        properties=("LaunchTemplate",),
    )
    assert day2.rolls(rolling)
    monkeypatch.setattr(capacity, "planned_nodegroup_change", lambda ctx, name: rolling)
    inp = replace(
        INPUT,
        gpu_capacity_reservation_id=RESERVATION,
        gpu_capacity_reservation_type="capacity-block",
        gpu_placement_group="off",
    )
    inp = replace(inp, redeploy=SimpleNamespace(gpu_nodegroup_name="gpu-workers"))  # type: ignore[arg-type]

    def client(_: str) -> Any:
        raise AssertionError("refused before the reservation is read")

    ctx = SimpleNamespace(inp=inp, nodes_in_reservation=lambda _: 2, client=client)
    result = capacity.check_reservation(ctx)  # type: ignore[arg-type]
    assert result.verdict == "FAIL" and "rolls the Capacity Block nodegroup while 2 node(s) run in it" in result.detail
    assert "park first" in result.fix


@pytest.mark.parametrize(
    ("changes", "verdict"),
    [
        ({"autoscaling": True}, "WARN"),  # the maxima into the stack's own cluster placement group, no reservation
        ({"autoscaling": True, "gpu_placement_group": "my-cluster-group"}, "WARN"),
        ({"autoscaling": True, "gpu_placement_group": "off"}, "PASS"),
        ({"autoscaling": True, "gpu_node_count": 0}, "PASS"),  # parked
        ({"autoscaling": False}, "PASS"),
    ],
)
def test_autoscaling_into_a_placement_group_without_a_reservation_is_warned_about(
    changes: dict[str, Any], verdict: str
) -> None:
    """Scale-ups add one GPU node at a time into the cluster placement group, where EC2's InsufficientInstanceCapacity
    is likelier, and the Cluster Autoscaler backs the nodegroup off after each failure (issue 28.7)."""
    from types import SimpleNamespace

    from preflight import capacity

    def client(_: str) -> Any:
        raise AssertionError("no reservation: nothing to read")

    ctx = SimpleNamespace(inp=replace(INPUT, **changes), client=client)
    result = capacity.check_reservation(ctx)  # type: ignore[arg-type]
    assert result.verdict == verdict, result
    if verdict == "WARN":
        assert (
            "InsufficientInstanceCapacity" in result.warning
            and "GPU_CAPACITY_RESERVATION_ID" in result.warning
            and "\n" not in result.warning
        )
