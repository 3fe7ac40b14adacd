"""Every setting lands where it declares (settings/specs*.py `lands`), and nowhere else: each is synthesized at its
`flip` beside the tests' pinned configuration and the output compared place by place (tests/landing.py). A setting
wired to the wrong phase, to nothing, or to more than it says fails here without a test of its own."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from settings import SettingError, Settings
from settings.spec_base import PREFLIGHT_ONLY, SettingSpec
from settings.specs import SPECS
from tests.conftest import settings_for
from tests.day2_helpers import synth
from tests.iam_documents import findings_of, identity_policies
from tests.landing import landed, places
from tests.pinned import PINNED
from tools.maintainer.accepted_findings import accepted, unaccepted

FLIPPED = [spec for spec in SPECS if spec.flip is not None]


def _synth(environ: tuple[tuple[str, str], ...]) -> tuple[Settings, dict[str, dict[str, Any]]]:
    # day 2's synth: cached in this process, no cdk-nag, no asset staged (the same templates).
    return synth(**dict(environ))


@cache
def _places(environ: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    return places(*_synth(environ))


@cache
def _unaccepted(environ: tuple[tuple[str, str], ...]) -> list[str]:
    """parliament's findings in one configuration's IAM documents that accepted-findings.yaml does not accept (once
    per configuration: the pinned one is the `before` of most flips)."""
    settings, templates = _synth(environ)
    named = {settings.stack_names[part]: template for part, template in templates.items()}
    found = [f for where, doc in identity_policies(named, settings.region) for f in findings_of(where, doc)]
    return [str(f) for f in unaccepted(found, accepted())]


def _flipped(spec: SettingSpec) -> tuple[tuple[str, str], ...]:
    assert spec.flip is not None
    return tuple(sorted((dict(spec.flip.given) | dict(spec.flip.needs) | {spec.env: spec.flip.value}).items()))


@pytest.mark.parametrize("spec", FLIPPED, ids=[spec.env for spec in FLIPPED])
def test_a_setting_changes_the_output_where_it_declares_and_nowhere_else(spec: SettingSpec) -> None:
    assert spec.flip is not None
    given = dict(spec.flip.given)
    assert spec.flip.value != given.get(spec.env, PINNED.get(spec.env)), f"{spec.env}'s flip is its pinned value"
    before = _places(spec.flip.given)  # flip() keeps `given` sorted
    after = _places(_flipped(spec))
    found = landed(before, after)
    assert found == set(spec.lands), (
        f"{spec.env}={spec.flip.value!r} changed {sorted(found)}; it declares {sorted(spec.lands)}"
        f" (missing: {sorted(set(spec.lands) - found)}, undeclared: {sorted(found - set(spec.lands))})"
    )


# The settings that cannot take another value, and why: the landing test cannot flip them, so their `lands` is
# declared for the reader and checked by nothing here (KUBERAY_VERSION: the chart's version in the system stack).
ONE_VALUE = {"KUBERAY_VERSION": ("1.7.1", "pinned to the CRDs in schemas/kuberay/: make vendor-kuberay moves both")}


def test_every_setting_has_a_flip_but_those_with_one_allowed_value() -> None:
    assert {spec.env for spec in SPECS if spec.flip is None} == set(ONE_VALUE)
    for env, (other, _why) in ONE_VALUE.items():
        with pytest.raises(SettingError):
            settings_for({env: other})


def test_only_a_setting_no_stack_reads_lands_nowhere() -> None:
    for spec in SPECS:
        assert (spec.lands == ()) == (spec.change is not None and spec.change[0] == PREFLIGHT_ONLY), spec.env


def test_the_places_are_cut_finely_enough_to_tell_wirings_apart() -> None:
    # The cut itself: each phase, each worker group and each NetworkPolicy a place of its own, with what sets them
    # apart inside (a cut that lumped them together would let a setting wired to the other one pass).
    found = _places(())
    assert found["serve:prefill"] != found["serve:decode"]  # their KV roles, at least
    assert found["workers:prefill"] != found["workers:decode"]
    policies = [place for place in found if place.startswith("k8s:NetworkPolicy/")]
    assert len(policies) >= 5 and "k8s:NetworkPolicy/metrics-collector" in policies


@pytest.mark.parametrize("spec", FLIPPED, ids=[spec.env for spec in FLIPPED])
def test_parliament_finds_nothing_new_in_each_configuration_synthesized_here(spec: SettingSpec) -> None:
    # Every configuration this suite synthesizes goes through parliament (tests/test_parliament.py: the named ones).
    assert spec.flip is not None
    for environ in (spec.flip.given, _flipped(spec)):
        assert _unaccepted(environ) == [], dict(environ)
