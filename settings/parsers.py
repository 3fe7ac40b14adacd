"""The parsers every setting's value goes through: each returns the value or raises a SettingError naming the
setting, the value and what is allowed (one line). Shared by the service settings (settings/loader.py) and
the CI access settings (settings/ci_access.py)."""

from __future__ import annotations

import difflib
import ipaddress
import re
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

from settings.errors import SettingError
from settings.registries import eks_addon_registry

DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@cache
def known_instance_types() -> frozenset[str]:
    import botocore.session  # the EC2 API model's InstanceType enum: every type AWS has, offline

    model = botocore.session.get_session().get_service_model("ec2")
    return frozenset(model.shape_for("InstanceType").enum)


@cache
def known_regions() -> tuple[str, ...]:
    """The commercial partition's Regions, from botocore's endpoint data (offline; importing boto3 and
    building a session would cost a quarter of a second on every synth)."""
    import json
    from pathlib import Path

    import botocore

    endpoints = json.loads((Path(botocore.__file__).parent / "data" / "endpoints.json").read_text())
    (aws,) = [p for p in endpoints["partitions"] if p["partition"] == "aws"]
    return tuple(sorted(aws["regions"]))


def closest(value: str, choices: list[str] | tuple[str, ...]) -> str:
    match = difflib.get_close_matches(value, choices, n=1)
    return f" (did you mean {match[0]}?)" if match else ""


def integer(env: str, raw: str, low: int, high: int) -> int:
    text = raw.strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        raise SettingError(env, raw, f"a whole number from {low} to {high}")
    value = int(text)
    if not low <= value <= high:
        raise SettingError(env, raw, f"a whole number from {low} to {high}")
    return value


def dns_label(env: str, raw: str, max_len: int = 63) -> str:
    if not DNS_LABEL.fullmatch(raw) or len(raw) > max_len:
        raise SettingError(
            env,
            raw,
            f"a DNS label: lowercase letters, digits and '-', starting with a letter, at most {max_len} characters",
        )
    return raw


def namespaces(env: str, raw: str) -> tuple[str, ...]:
    names = csv(raw)
    if any(not DNS_LABEL.fullmatch(n) or len(n) > 63 for n in names):
        raise SettingError(
            env, raw, "comma-separated namespace names (each a DNS label: lowercase letters, digits and '-')"
        )
    return names


def csv(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def region_name(raw: str) -> str:
    if raw not in known_regions() and raw.strip().lower() in known_regions():
        how = "in lower case" if raw.strip() != raw.strip().lower() else "without blanks"
        raise SettingError("REGION", raw, f"an AWS Region, {how} (did you mean {raw.strip().lower()}?)")
    if raw not in known_regions():
        raise SettingError(
            "REGION", raw, f"an AWS Region{closest(raw, known_regions())}, one of {', '.join(known_regions())}"
        )
    if eks_addon_registry(raw) is None:
        raise SettingError(
            "REGION",
            raw,
            "a Region whose EKS add-on image registry settings/registries.py lists (add its row from the EKS user"
            " guide)",
        )
    return raw


def host_bits_hint(raw: str) -> str:
    """ " (did you mean NETWORK?)" for a CIDR with host bits set (203.0.113.7/24), else ""."""
    try:
        network = ipaddress.IPv4Network(raw.strip(), strict=False)
    except ValueError:
        return ""
    return f" (host bits set: did you mean {network}?)" if str(network) != raw.strip() else ""


def cidr(env: str, raw: str, *, private: bool, prefix: tuple[int, int]) -> str:
    try:
        network = ipaddress.IPv4Network(raw, strict=True)
    except ValueError:
        raise SettingError(
            env, raw, f"an IPv4 CIDR such as 10.0.0.0/16 (prefix /{prefix[0]} to /{prefix[1]}){host_bits_hint(raw)}"
        ) from None
    if not prefix[0] <= network.prefixlen <= prefix[1] or (private and not network.is_private):
        kind = "a private " if private else "an "
        raise SettingError(env, raw, f"{kind}IPv4 CIDR with a prefix from /{prefix[0]} to /{prefix[1]}")
    return str(network)


# --- parsers a SettingSpec carries: the check and the "Allowed" text from the same numbers -------------
# Each returns the type of the Settings field its setting fills (tests/test_settings.py compares them): the
# loader hands a spec's parsed value over under its context key, with no conversion of its own.


@dataclass(frozen=True)
class Integer:
    low: int
    high: int

    @property
    def allowed(self) -> str:
        return f"integer {self.low}-{self.high}"

    def __call__(self, env: str, raw: str) -> int:
        return integer(env, raw, self.low, self.high)


@dataclass(frozen=True)
class DnsLabel:
    max_len: int = 63

    @property
    def allowed(self) -> str:
        return (
            f"DNS label: lowercase letters, digits and '-', starting with a letter, at most {self.max_len} characters"
        )

    def __call__(self, env: str, raw: str) -> str:
        return dns_label(env, raw, self.max_len)


@dataclass(frozen=True)
class Choice:
    values: tuple[str, ...]

    @property
    def allowed(self) -> str:
        return ", ".join(self.values[:-1]) + f" or {self.values[-1]}" if len(self.values) > 1 else self.values[0]

    def __call__(self, env: str, raw: str) -> str:
        if raw not in self.values:
            raise SettingError(env, raw, self.allowed)
        return raw


@dataclass(frozen=True)
class OptionalInteger:
    """Empty (None: the feature off) or an integer in [low, high]."""

    low: int
    high: int

    @property
    def allowed(self) -> str:
        return f"empty, or integer {self.low}-{self.high}"

    def __call__(self, env: str, raw: str) -> int | None:
        if not raw.strip():
            return None
        try:
            return integer(env, raw.strip(), self.low, self.high)
        except SettingError:
            raise SettingError(env, raw, self.allowed) from None


@dataclass(frozen=True)
class Flag:
    """A switch: `on_value` is True, `off_value` False (on/off unless the setting's words are others, say
    true/false)."""

    on_value: str = "on"
    off_value: str = "off"

    @property
    def allowed(self) -> str:
        return f"{self.on_value} or {self.off_value}"

    def __call__(self, env: str, raw: str) -> bool:
        if raw not in (self.on_value, self.off_value):
            raise SettingError(env, raw, self.allowed)
        return raw == self.on_value


@dataclass(frozen=True)
class Pattern:
    """Text matching `regex` (whole), `allowed` saying it in words; empty too when `empty_ok`."""

    regex: str
    allowed: str
    empty_ok: bool = False
    strip: bool = False  # surrounding blanks are not part of the value

    # (regex searched in a refused value, what to say then): the mistake a value of that shape usually is.
    hints: tuple[tuple[str, str], ...] = ()

    def __call__(self, env: str, raw: str) -> str:
        value = raw.strip() if self.strip else raw
        if (value or not self.empty_ok) and not re.fullmatch(self.regex, value):
            hint = next((f" ({text})" for pattern, text in self.hints if re.search(pattern, value)), "")
            raise SettingError(env, value, self.allowed + hint)
        return value


@dataclass(frozen=True)
class Semver:
    """X.Y.Z at least `minimum`; `why` says what needs that version."""

    minimum: tuple[int, int, int]
    why: str

    @property
    def allowed(self) -> str:
        return f"X.Y.Z, at least {'.'.join(map(str, self.minimum))} ({self.why})"

    def __call__(self, env: str, raw: str) -> str:
        match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", raw)
        if not match or (int(match[1]), int(match[2]), int(match[3])) < self.minimum:
            raise SettingError(env, raw, self.allowed)
        return raw


@dataclass(frozen=True)
class WholeHour:
    """Empty (off) or HH:00 on a 24-hour clock: the park workflow runs once an hour."""

    @property
    def allowed(self) -> str:
        return "empty (off), or a whole hour HH:00 from 00:00 to 23:00 (the park workflow runs hourly)"

    def __call__(self, env: str, raw: str) -> str:
        value = raw.strip()
        if value and not re.fullmatch(r"([01]\d|2[0-3]):00", value):
            raise SettingError(env, raw, self.allowed)
        return value


WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


@dataclass(frozen=True)
class Weekdays:
    """Days of the week as comma-separated names or ranges (mon-fri,sun): their numbers, Monday 0."""

    @property
    def allowed(self) -> str:
        return "comma-separated days or ranges of " + "/".join(WEEKDAYS) + ", e.g. mon-fri"

    def __call__(self, env: str, raw: str) -> tuple[int, ...]:
        days: set[int] = set()
        for part in csv(raw.lower()):
            first, _, last = part.partition("-")
            if first.strip() not in WEEKDAYS or (last and last.strip() not in WEEKDAYS):
                raise SettingError(env, raw, self.allowed)
            start, end = WEEKDAYS.index(first.strip()), WEEKDAYS.index((last or first).strip())
            days.update(range(start, end + 1) if start <= end else [*range(start, 7), *range(end + 1)])
        if not days:
            raise SettingError(env, raw, self.allowed)
        return tuple(sorted(days))


@dataclass(frozen=True)
class TimeZone:
    """An IANA time zone name, as Python's zoneinfo (the runner's tz database) knows it."""

    @property
    def allowed(self) -> str:
        return "an IANA time zone name such as UTC, Europe/Berlin or America/Sao_Paulo"

    def __call__(self, env: str, raw: str) -> str:
        import zoneinfo

        value = raw.strip()
        try:
            zoneinfo.ZoneInfo(value)
        except (ValueError, zoneinfo.ZoneInfoNotFoundError):
            names = sorted(zoneinfo.available_timezones())
            same = [n for n in names if n.lower() == value.lower()]
            hint = f" (did you mean {same[0]}?)" if same else closest(value, names)
            raise SettingError(env, raw, self.allowed + hint) from None
        return value


class Parser(Protocol):
    """A setting's parser: what it allows (the docs' "Allowed" column), and the value from the text or SettingError."""

    @property
    def allowed(self) -> str: ...

    def __call__(self, env: str, raw: str) -> Any: ...
