"""What the hourly park workflow does at a given moment: park, unpark or nothing, from PARK_AT, UNPARK_AT,
UNPARK_DAYS, PARK_TIME_ZONE and the KEEP_GPUS_UNTIL repository variable (tools/park_schedule.py acts on it).

A run acts on the events that fell due in the hour that ended at the top of its own hour (the hour it was
scheduled for), so a run that GitHub starts late still acts once, and two runs never act on the same event.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from zoneinfo import ZoneInfo

PARK, UNPARK, NOTHING = "park", "unpark", "nothing"
# The GPU stack's output that says how many GPU nodes its last deploy approved: what an unpark restores.
GPU_NODE_COUNT_OUTPUT = "GpuNodeCount"
_HOUR = dt.timedelta(hours=1)


@dataclass(frozen=True)
class ParkSchedule:
    park_at: str  # "HH:00", "" = off
    unpark_at: str
    unpark_days: tuple[int, ...]  # Monday 0
    time_zone: str


@dataclass(frozen=True)
class Decision:
    action: str  # PARK, UNPARK or NOTHING
    reason: str  # one line, printed by the workflow
    warning: bool = False  # the reason is a ::warning:: (a setting that cannot mean what was meant)


def _due(at: str, days: tuple[int, ...], zone: ZoneInfo, start: dt.datetime, end: dt.datetime) -> dt.datetime | None:
    """The moment `at` falls due in (start, end] on one of `days` (local dates), or None. A wall-clock hour that a
    daylight-saving change skips or repeats falls due once (zoneinfo's fold 0)."""
    if not at:
        return None
    hour = int(at[:2])
    for local_date in sorted({start.astimezone(zone).date(), end.astimezone(zone).date()}):
        moment = dt.datetime.combine(local_date, dt.time(hour), tzinfo=zone)
        if local_date.weekday() in days and start < moment.astimezone(dt.UTC) <= end:
            return moment
    return None


def decide(schedule: ParkSchedule, now: dt.datetime, *, keep_until: str = "") -> Decision:
    """The action of the run that started at `now` (aware), for the hour before the top of its hour."""
    zone = ZoneInfo(schedule.time_zone)
    end = now.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
    start = end - _HOUR
    park = _due(schedule.park_at, tuple(range(7)), zone, start, end)
    unpark = _due(schedule.unpark_at, schedule.unpark_days, zone, start, end)
    window = f"{start:%H:%M}-{end:%H:%M} UTC"
    if unpark and (not park or unpark > park):
        return Decision(UNPARK, f"UNPARK_AT={schedule.unpark_at} {schedule.time_zone} fell due ({window}): unparking")
    if not park:
        times = f"PARK_AT={schedule.park_at or 'off'}, UNPARK_AT={schedule.unpark_at or 'off'} {schedule.time_zone}"
        return Decision(NOTHING, f"nothing fell due in {window} ({times})")
    today = park.date().isoformat()
    if not keep_until:
        return Decision(PARK, f"PARK_AT={schedule.park_at} {schedule.time_zone} fell due ({window}): parking")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", keep_until):
        # A typo must not keep $4/hour of GPUs running.
        return Decision(PARK, f"KEEP_GPUS_UNTIL='{keep_until}' is not a date YYYY-MM-DD: parking", warning=True)
    if keep_until >= today:
        kept = f"KEEP_GPUS_UNTIL={keep_until} (today is {today} in {schedule.time_zone})"
        return Decision(NOTHING, f"{kept}: the GPUs stay up")
    return Decision(PARK, f"KEEP_GPUS_UNTIL={keep_until} has passed (today is {today}): parking")
