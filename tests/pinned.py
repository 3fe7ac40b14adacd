"""The configuration the tests were written for: every setting's value as the tests assume it, so that changing
a default in settings/specs.py breaks only the defaults' own tests (marked `defaults`) and the golden dist/.

tests/pinned_settings.json holds it; `make docs-tables` adds a new setting with its default (a pinned value is
never changed by it). `null`: the setting follows an artifact's pin in settings/versions.py (the image, Ray,
KubeRay), whose move is a change every test should see."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PINNED_FILE = Path(__file__).with_name("pinned_settings.json")
_PINS: dict[str, str | None] = json.loads(PINNED_FILE.read_text())
PINNED: dict[str, str] = {env: value for env, value in _PINS.items() if value is not None}
VERSION_FOLLOWERS = frozenset(env for env, value in _PINS.items() if value is None)


def pinned_environ(env: Mapping[str, str] | None = None, context: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The settings part of a subprocess's environment (app.py, ci_app.py, a tool): the pinned values the test does
    not set itself, in `env` or (lower case) in the context it passes, then `env`."""
    given = set(context or {})
    return {env_name: value for env_name, value in PINNED.items() if env_name.lower() not in given} | dict(env or {})
