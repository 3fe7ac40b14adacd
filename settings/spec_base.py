"""What a setting's declaration holds (SettingSpec) and what a change does to a deployed stack: the vocabulary of
settings/specs.py and settings/specs_infra.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from settings.parsers import Parser

# What a change does to a deployed stack.
IN_PLACE = "in place"
ROLLING = "rolling update"
REPLACEMENT = "replacement"
RECREATE = "RayCluster re-created"
REFUSED = "refused"
NEW = "new deployment"
# Read by the preflight (or a tool) only: no stack or manifest reads it (tests/test_settings.py checks that).
PREFLIGHT_ONLY = "no effect on deployed stacks"
_RECREATE_HOW = (
    "`make diff` shows `RayClusterConfigFingerprint` changing; `make destroy STACKS=CLUSTER_NAME-serving && make"
    " deploy` (GPU nodes stay)"
)


@dataclass(frozen=True)
class Flip:
    """Another valid value of a setting, for tests/test_setting_landing.py, which synthesizes it beside the tests'
    pinned configuration and checks that the output changes in the setting's `lands` and nowhere else. `given`
    holds in both synths (what the value needs to be valid and to matter), `needs` only beside the new value (what
    the new value forces)."""

    value: str
    given: tuple[tuple[str, str], ...] = ()
    needs: tuple[tuple[str, str], ...] = ()


def flip(value: str, *, given: Mapping[str, str] | None = None, needs: Mapping[str, str] | None = None) -> Flip:
    return Flip(value, tuple(sorted((given or {}).items())), tuple(sorted((needs or {}).items())))


@dataclass(frozen=True)
class SettingSpec:
    env: str
    default: str
    meaning: str
    allowed: str = ""  # what is allowed, beyond what the parser says (or all of it, without a parser)
    # (effect, what happens or how to apply it) on a deployed stack: the docs' change table (tests/test_day2.py
    # checks the effects on pairs of real synths; the preflight enforces the refusals). None: not a service setting.
    change: tuple[str, str] | None = None
    # The parser of a value that needs no other setting: it checks it and says what is allowed (the "Allowed"
    # column starts with its text), from the same numbers. None: settings/loader.py parses it with the others.
    parser: Parser | None = None
    # The CI workflows pass a repository variable of this name to the app (.github/actions/settings-from-variables,
    # written by `make docs-tables`): what differs between accounts; the shape of a deployment stays in cdk.json.
    ci_variable: bool = False
    # Where a change of it lands in the synthesized output: places as tests/landing.py names them ("stack:gpu",
    # "serve:prefill", "workers:decode", "k8s:NetworkPolicy", ...); () for a setting only the preflight or a tool
    # reads. tests/test_setting_landing.py synthesizes `flip` and fails unless exactly these places change.
    lands: tuple[str, ...] = ()
    flip: Flip | None = None  # None only for a setting with one allowed value (the test checks it refuses another)

    @property
    def allowed_text(self) -> str:
        if self.parser is None:
            return self.allowed
        return f"{self.parser.allowed}; {self.allowed}" if self.allowed else self.parser.allowed

    def parse(self, raw: str) -> Any:
        if self.parser is None:
            raise TypeError(f"{self.env} is parsed with the settings it depends on, in settings/loader.py")
        return self.parser(self.env, raw)

    @property
    def context_key(self) -> str:
        return self.env.lower()
