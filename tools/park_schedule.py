"""Parking on a schedule, with no deploy and no person: the park workflow's hourly run, `make park-now` and `make
unpark-now`.

  decide   what this hour's run does (PARK_AT, UNPARK_AT, UNPARK_DAYS, PARK_TIME_ZONE, KEEP_GPUS_UNTIL; no AWS, no
           packages): prints why and writes action=park|unpark|nothing to $GITHUB_OUTPUT
  park     the GPU nodegroup's minSize and desiredSize to 0 through the EKS API (maxSize stays: EKS allows no less
           than 1)
  unpark   minSize and desiredSize back to the count the last deploy approved: the GPU stack's GpuNodeCount output

Only the scaling of the nodegroup the deploy made is touched, so the scheduled runs need no approval. An autoscaled
nodegroup (PREFILL/DECODE_MAX_REPLICAS) is refused, exit 3: its Cluster Autoscaler would start a GPU node for the Ray
workers' Pending pods, so it parks with `make park` (a deploy) instead.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from settings.context_files import read_project_context
from settings.loader import raw_values
from settings.park_schedule import GPU_NODE_COUNT_OUTPUT, PARK, UNPARK, ParkSchedule, decide
from settings.scheduling import AUTOSCALER_GPU_LABEL
from settings.specs import SPECS
from tools.entry import one_line_errors

AUTOSCALED_EXIT = 3
WAIT_S = 900  # an EKS scaling update takes a minute or two; a node launch is not waited for
POLL_S = 15
_SPECS = {spec.env: spec for spec in SPECS}


def schedule_settings(environ: dict[str, str] | os._Environ[str], context: dict[str, Any]) -> ParkSchedule:
    """The four schedule settings alone, parsed by their specs: the decision needs no other (and no botocore)."""
    raw = raw_values(environ, context)
    value = {env: _SPECS[env].parse(raw[env]) for env in ("PARK_AT", "UNPARK_AT", "UNPARK_DAYS", "PARK_TIME_ZONE")}
    return ParkSchedule(value["PARK_AT"], value["UNPARK_AT"], value["UNPARK_DAYS"], value["PARK_TIME_ZONE"])


def _write_output(name: str, value: str) -> None:
    path = os.environ.get("GITHUB_OUTPUT")
    if path:
        with Path(path).open("a") as out:
            out.write(f"{name}={value}\n")


class ScheduleRefused(RuntimeError):
    """The nodegroup cannot be parked or unparked through the API (one line; exit 1, or 3 when autoscaled)."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def approved_node_count(cloudformation: Any, gpu_stack: str) -> int:
    """The GPU node count of the GPU stack's last deploy (its GpuNodeCount output)."""
    (stack,) = cloudformation.describe_stacks(StackName=gpu_stack)["Stacks"]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    if GPU_NODE_COUNT_OUTPUT not in outputs:
        raise ScheduleRefused(
            f"stack {gpu_stack} has no {GPU_NODE_COUNT_OUTPUT} output (deployed before scheduled parking):"
            " `make deploy` once, then the schedule can unpark it"
        )
    return int(outputs[GPU_NODE_COUNT_OUTPUT])


def scale(
    eks: Any,
    cloudformation: Any,
    *,
    action: str,
    cluster: str,
    nodegroup: str,
    gpu_stack: str,
    wait_s: float = WAIT_S,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Park or unpark the nodegroup; one line saying what was done (or that nothing needed doing)."""
    try:
        group = eks.describe_nodegroup(clusterName=cluster, nodegroupName=nodegroup)["nodegroup"]
    except eks.exceptions.ResourceNotFoundException:
        # After a destroy: nothing to park, and an unpark must not build anything.
        return f"no nodegroup {nodegroup} in cluster {cluster} ({action}): nothing to do"
    if AUTOSCALER_GPU_LABEL in group.get("labels", {}):
        raise ScheduleRefused(
            f"nodegroup {nodegroup} is autoscaled (PREFILL/DECODE_MAX_REPLICAS): with the Cluster Autoscaler running,"
            " an API park would not hold; it parks with `make park` and unparks with `make deploy`",
            AUTOSCALED_EXIT,
        )
    if group["status"] != "ACTIVE":
        raise ScheduleRefused(f"nodegroup {nodegroup} is {group['status']}, not ACTIVE: try again when it is")
    now = group["scalingConfig"]
    if action == PARK:
        wanted = {"minSize": 0, "desiredSize": 0, "maxSize": now["maxSize"]}
    else:
        count = approved_node_count(cloudformation, gpu_stack)
        if count == 0:
            return (
                f"nodegroup {nodegroup}: the deployed configuration is parked (GPU_NODE_COUNT=0): `make deploy` unparks"
            )
        wanted = {"minSize": count, "desiredSize": count, "maxSize": max(now["maxSize"], count)}
    shown = f"min {wanted['minSize']}, desired {wanted['desiredSize']}, max {wanted['maxSize']}"
    if all(now[key] == wanted[key] for key in wanted):
        return f"nodegroup {nodegroup} is already at {shown}: nothing to do"
    update = eks.update_nodegroup_config(clusterName=cluster, nodegroupName=nodegroup, scalingConfig=wanted)["update"]
    waited = 0.0
    while update["status"] == "InProgress":
        if waited >= wait_s:
            raise ScheduleRefused(
                f"nodegroup {nodegroup}: update {update['id']} still in progress after {waited:.0f} s"
            )
        sleep(POLL_S)
        waited += POLL_S
        update = eks.describe_update(name=cluster, nodegroupName=nodegroup, updateId=update["id"])["update"]
    if update["status"] != "Successful":
        errors = "; ".join(e.get("errorMessage", "") for e in update.get("errors", []))
        raise ScheduleRefused(f"nodegroup {nodegroup}: update {update['id']} {update['status']}: {errors}")
    return f"nodegroup {nodegroup}: {action}ed, now {shown} (was min {now['minSize']}, desired {now['desiredSize']})"


def _act(action: str) -> int:
    import boto3

    from tools.entry import project_settings

    settings = project_settings()
    session = boto3.session.Session(region_name=settings.region)
    try:
        line = scale(
            session.client("eks"),
            session.client("cloudformation"),
            action=action,
            cluster=settings.cluster_name,
            nodegroup=settings.gpu_nodegroup_name,
            gpu_stack=settings.stack_names["gpu"],
        )
    except ScheduleRefused as refused:
        print(f"error: {refused}", file=sys.stderr)
        _write_output("autoscaled", "true" if refused.exit_code == AUTOSCALED_EXIT else "false")
        return refused.exit_code
    _write_output("autoscaled", "false")
    print(line)
    return 0


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.park_schedule", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    decide_cmd = commands.add_parser("decide", help="what this hour's run does (no AWS)")
    decide_cmd.add_argument("--now", help="ISO time with offset (default: now); for trying a schedule out")
    decide_cmd.add_argument("--requested", choices=(PARK, UNPARK, ""), default="", help="a manual run's choice")
    commands.add_parser(PARK, help="park the GPU nodegroup now (EKS API)")
    commands.add_parser(UNPARK, help="unpark it to the approved GPU node count now (EKS API)")
    args = parser.parse_args(argv)
    if args.command != "decide":
        return _act(args.command)
    schedule = schedule_settings(os.environ, read_project_context())
    if args.requested:
        action, reason, warning = args.requested, f"asked by hand: {args.requested}", False
    else:
        now = dt.datetime.fromisoformat(args.now) if args.now else dt.datetime.now(dt.UTC)
        if now.tzinfo is None:
            parser.error(f"--now {args.now}: give an offset, e.g. {args.now}+00:00")
        decision = decide(schedule, now, keep_until=os.environ.get("KEEP_GPUS_UNTIL", "").strip())
        action, reason, warning = decision.action, decision.reason, decision.warning
    print(f"::warning::{reason}" if warning else reason)
    _write_output("action", action)
    return 0


if __name__ == "__main__":
    sys.exit(main())
