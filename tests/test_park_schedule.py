"""Parking on a schedule: the hourly decision (time zones, daylight saving, late runs, KEEP_GPUS_UNTIL), its command
without any package installed, and the park and unpark of the GPU nodegroup through the EKS API (moto)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3  # type: ignore[import-untyped]
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from settings.park_schedule import NOTHING, PARK, UNPARK, ParkSchedule, decide
from settings.scheduling import AUTOSCALER_GPU_LABEL
from tests.conftest import REPO
from tools import park_schedule
from tools.park_schedule import AUTOSCALED_EXIT, ScheduleRefused, scale

WEEKDAYS = (0, 1, 2, 3, 4)
BERLIN = ParkSchedule("22:00", "07:00", WEEKDAYS, "Europe/Berlin")


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def week_of_runs(schedule: ParkSchedule, first: str, *, minute: int = 0) -> list[tuple[str, dt.datetime]]:
    """What the hourly runs of seven days do: (action, run time) for each run that acts."""
    start = at(first)
    runs = (start + dt.timedelta(hours=h, minutes=minute) for h in range(7 * 24))
    return [(d.action, run) for run in runs if (d := decide(schedule, run)).action != NOTHING]


@pytest.mark.parametrize(
    "first",
    [
        "2026-12-07T00:00+00:00",  # a plain week
        "2026-03-23T00:00+00:00",  # Berlin's clocks go forward on Sunday 29 March
        "2026-10-19T00:00+00:00",  # and back on Sunday 25 October
    ],
)
@pytest.mark.parametrize("minute", [0, 59])  # on the hour, or started by GitHub 59 minutes late
def test_a_week_parks_every_night_and_unparks_every_weekday_morning(first: str, minute: int) -> None:
    acted = week_of_runs(BERLIN, first, minute=minute)
    parks = [run for action, run in acted if action == PARK]
    unparks = [run for action, run in acted if action == UNPARK]
    assert len(parks) == 7 and len(unparks) == 5, acted
    zone = BERLIN.time_zone
    from zoneinfo import ZoneInfo

    # Each at the hour's run that follows the local time, whatever the offset that day.
    assert {r.astimezone(ZoneInfo(zone)).strftime("%H") for r in parks} == {"22"}
    assert {r.astimezone(ZoneInfo(zone)).strftime("%H") for r in unparks} == {"07"}
    assert {r.astimezone(ZoneInfo(zone)).weekday() for r in unparks} == set(WEEKDAYS)


def test_an_hour_that_daylight_saving_skips_or_repeats_falls_due_once() -> None:
    schedule = ParkSchedule("02:00", "", WEEKDAYS, "Europe/Berlin")
    for sunday in ("2026-03-28T12:00+00:00", "2026-10-24T12:00+00:00"):
        acted = [run for action, run in week_of_runs(schedule, sunday)[:2] if action == PARK]
        assert len(acted) == 2 and acted[1] - acted[0] in (dt.timedelta(hours=23), dt.timedelta(hours=25)), acted


def test_nothing_is_scheduled_when_both_times_are_off() -> None:
    assert week_of_runs(ParkSchedule("", "", WEEKDAYS, "UTC"), "2026-12-07T00:00+00:00") == []


def test_a_half_hour_time_zone() -> None:
    schedule = ParkSchedule("22:00", "", WEEKDAYS, "Asia/Kolkata")  # UTC+05:30: 22:00 is 16:30 UTC
    assert decide(schedule, at("2026-12-07T17:00+00:00")).action == PARK
    assert decide(schedule, at("2026-12-07T16:59+00:00")).action == NOTHING


@pytest.mark.parametrize(
    ("keep_until", "action", "warning"),
    [
        ("", PARK, False),
        ("2026-12-07", NOTHING, False),  # through today (in the schedule's zone)
        ("2026-12-31", NOTHING, False),
        ("2026-12-06", PARK, False),  # passed
        ("07.12.2026", PARK, True),  # a typo parks, with a warning
    ],
)
def test_keep_gpus_until(keep_until: str, action: str, warning: bool) -> None:
    # 22:00 Berlin on 7 December is 21:00 UTC.
    decision = decide(BERLIN, at("2026-12-07T21:05+00:00"), keep_until=keep_until)
    assert (decision.action, decision.warning) == (action, warning), decision.reason


def test_keep_gpus_until_never_holds_an_unpark() -> None:
    assert decide(BERLIN, at("2026-12-07T06:05+00:00"), keep_until="2026-01-01").action == UNPARK


def _decide_command(env: dict[str, str], tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], str]:
    out = tmp_path / "github_output"
    out.write_text("")
    # -S: no site-packages at all, as on the runner before any install.
    result = subprocess.run(
        [sys.executable, "-S", "-m", "tools.park_schedule", "decide", *args],
        cwd=REPO,
        env={"PATH": os.environ["PATH"], "GITHUB_OUTPUT": str(out), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result, out.read_text()


def test_the_decision_needs_no_package_and_writes_the_action(tmp_path: Path) -> None:
    env = {"PARK_AT": "22:00", "UNPARK_AT": "07:00", "PARK_TIME_ZONE": "Europe/Berlin"}
    result, output = _decide_command(env, tmp_path, "--now", "2026-12-07T21:40+00:00")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "PARK_AT=22:00 Europe/Berlin fell due (20:00-21:00 UTC): parking\n"
    assert output == "action=park\n"
    result, output = _decide_command({**env, "KEEP_GPUS_UNTIL": "soon"}, tmp_path, "--now", "2026-12-07T21:40+00:00")
    assert result.stdout.startswith("::warning::KEEP_GPUS_UNTIL='soon' is not a date") and output == "action=park\n"
    result, output = _decide_command(env, tmp_path, "--requested", "unpark")
    assert (result.stdout, output) == ("asked by hand: unpark\n", "action=unpark\n")


def test_a_bad_schedule_setting_is_one_line(tmp_path: Path) -> None:
    result, output = _decide_command({"UNPARK_AT": "7:30"}, tmp_path)
    assert result.returncode == 2 and output == ""
    assert result.stderr.splitlines() == [
        "error: UNPARK_AT='7:30' is not allowed: empty (off), or a whole hour HH:00 from 00:00 to 23:00 (the park"
        " workflow runs hourly)"
    ]


# --- park and unpark through the EKS API (moto) -----------------------------------------------------------------------

REGION = "sa-east-1"
CLUSTER = "ray-llm-multinode"
NODEGROUP = "gpu-workers"
GPU_STACK = f"{CLUSTER}-gpu"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[boto3.session.Session]:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        yield boto3.session.Session(region_name=REGION)


def _deployed(
    aws: boto3.session.Session, *, count: int, maximum: int | None = None, labels: dict[str, str] | None = None
) -> None:
    """A cluster, its GPU nodegroup at `count` and the GPU stack's output, as a deploy leaves them."""
    eks = aws.client("eks")
    iam = aws.client("iam")
    role = iam.create_role(RoleName="node", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    eks.create_cluster(name=CLUSTER, roleArn=role, resourcesVpcConfig={"subnetIds": ["subnet-1"]})
    eks.create_nodegroup(
        clusterName=CLUSTER,
        nodegroupName=NODEGROUP,
        nodeRole=role,
        subnets=["subnet-1"],
        scalingConfig={"minSize": count, "desiredSize": count, "maxSize": maximum or max(1, count)},
        labels=labels or {},
    )
    template = (
        '{"Resources": {"H": {"Type": "AWS::SNS::Topic"}},'
        f' "Outputs": {{"GpuNodeCount": {{"Value": "{count}"}}}}}}'
    )
    aws.client("cloudformation").create_stack(StackName=GPU_STACK, TemplateBody=template)


def _scale(aws: boto3.session.Session, action: str) -> str:
    return scale(
        aws.client("eks"),
        aws.client("cloudformation"),
        action=action,
        cluster=CLUSTER,
        nodegroup=NODEGROUP,
        gpu_stack=GPU_STACK,
    )


def _scaling(aws: boto3.session.Session) -> tuple[int, int, int]:
    config = aws.client("eks").describe_nodegroup(clusterName=CLUSTER, nodegroupName=NODEGROUP)["nodegroup"]
    scaling = config["scalingConfig"]
    return scaling["minSize"], scaling["desiredSize"], scaling["maxSize"]


def test_park_then_unpark_returns_to_the_approved_count(aws: boto3.session.Session) -> None:
    _deployed(aws, count=2)
    assert _scale(aws, PARK) == "nodegroup gpu-workers: parked, now min 0, desired 0, max 2 (was min 2, desired 2)"
    assert _scaling(aws) == (0, 0, 2)
    assert _scale(aws, PARK) == "nodegroup gpu-workers is already at min 0, desired 0, max 2: nothing to do"
    assert _scale(aws, UNPARK).startswith("nodegroup gpu-workers: unparked, now min 2, desired 2, max 2")
    assert _scaling(aws) == (2, 2, 2)


def test_unpark_of_a_parked_deploy_starts_nothing(aws: boto3.session.Session) -> None:
    """GPU_NODE_COUNT=0 was what a reviewer approved: the schedule never starts a node for it."""
    _deployed(aws, count=0)
    assert "the deployed configuration is parked (GPU_NODE_COUNT=0)" in _scale(aws, UNPARK)
    assert _scaling(aws) == (0, 0, 1)


def test_no_cluster_is_nothing_to_do(aws: boto3.session.Session) -> None:
    assert _scale(aws, UNPARK) == "no nodegroup gpu-workers in cluster ray-llm-multinode (unpark): nothing to do"


def test_an_autoscaled_nodegroup_is_refused(aws: boto3.session.Session) -> None:
    _deployed(aws, count=2, maximum=3, labels={AUTOSCALER_GPU_LABEL: "l4"})
    with pytest.raises(ScheduleRefused, match=r"autoscaled .* `make park`") as refused:
        _scale(aws, PARK)
    assert refused.value.exit_code == AUTOSCALED_EXIT
    assert _scaling(aws) == (2, 2, 3)


def test_a_stack_without_the_count_is_not_guessed(aws: boto3.session.Session) -> None:
    _deployed(aws, count=2)
    _scale(aws, PARK)
    cloudformation = aws.client("cloudformation")
    cloudformation.delete_stack(StackName=GPU_STACK)
    cloudformation.create_stack(StackName=GPU_STACK, TemplateBody='{"Resources": {"H": {"Type": "AWS::SNS::Topic"}}}')
    with pytest.raises(ScheduleRefused, match="no GpuNodeCount output"):
        _scale(aws, UNPARK)
    assert _scaling(aws) == (0, 0, 2)


def test_the_update_is_followed_until_it_ends() -> None:
    """moto's updates end at once: botocore's Stubber plays one still in progress, then failed."""
    eks = boto3.session.Session(
        region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    ).client("eks")
    group = {"status": "ACTIVE", "labels": {}, "scalingConfig": {"minSize": 2, "desiredSize": 2, "maxSize": 2}}
    ids = {"clusterName": CLUSTER, "nodegroupName": NODEGROUP}
    follow = {"name": CLUSTER, "nodegroupName": NODEGROUP, "updateId": "u-1"}
    slept: list[float] = []
    with Stubber(eks) as stub:
        stub.add_response("describe_nodegroup", {"nodegroup": group}, ids)
        stub.add_response("update_nodegroup_config", {"update": {"id": "u-1", "status": "InProgress"}})
        stub.add_response("describe_update", {"update": {"id": "u-1", "status": "InProgress"}}, follow)
        stub.add_response(
            "describe_update",
            {"update": {"id": "u-1", "status": "Failed", "errors": [{"errorMessage": "quota"}]}},
            follow,
        )
        with pytest.raises(ScheduleRefused, match="update u-1 Failed: quota"):
            scale(eks, None, action=PARK, cluster=CLUSTER, nodegroup=NODEGROUP, gpu_stack=GPU_STACK, sleep=slept.append)
        stub.assert_no_pending_responses()
    assert slept == [park_schedule.POLL_S, park_schedule.POLL_S]


def test_make_park_now_runs_on_the_settings_and_says_autoscaled_to_the_workflow(
    aws: boto3.session.Session, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.pinned import PINNED

    for key, value in PINNED.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    _deployed(aws, count=2, maximum=3, labels={AUTOSCALER_GPU_LABEL: "l4"})
    assert park_schedule.main(["park"]) == AUTOSCALED_EXIT
    assert out.read_text() == "autoscaled=true\n"
    assert capsys.readouterr().err.startswith("error: nodegroup gpu-workers is autoscaled")
