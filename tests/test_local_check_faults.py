"""The one-host check's PD steps can fail: stand-in engines with planted faults (a decode engine that recomputes
instead of receiving, that diverges after the first token, that never records a transfer, an engine without its
backend line or with another backend) and swapped placement bundles, each failing exactly the steps that see it
(tests/local_check_faults_scenario.py runs them on a real local Ray cluster, in the background)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import LOCAL_CHECK_FAULTS, scenario_result, settings_for
from tools.local_check.plan import build_plan

# Each case: the faults planted in the stand-in PD engines, whether the bundles are swapped, and exactly the steps
# that must fail. A decode engine that recomputes is invisible to parity (its answers are right): only the transfer
# step sees it. One that diverges after the first token is seen by parity; one engine without a backend line, by nixl.
# Each step fails for one planted cause only in its case, so a check that ignored that cause would leave it passing.
# The fault-free application comes first and must pass every step.
FAULT_CASES = [
    ([], False, set()),
    (["diverge", "one-backend"], True, {"placement", "parity (matched path)", "parity (other lengths)", "nixl"}),
    (["recompute", "wrong-backend"], False, {"transfer", "nixl"}),
    (["silent"], False, {"transfer", "nixl"}),
]


def scenario_spec() -> dict[str, Any]:
    return {"plan": build_plan(settings_for()), "cases": [[faults, swapped] for faults, swapped, _ in FAULT_CASES]}


def test_faults_in_the_pd_engines_fail_the_steps_that_see_them(tmp_path: Path) -> None:
    """The runner's own PD checks against stand-in engines with planted faults, on one real local Ray cluster shaped
    like the RayCluster (tests/local_check_faults_scenario.py, in the background from the session's start)."""
    seen = scenario_result(LOCAL_CHECK_FAULTS, scenario_spec(), tmp_path / "spec.json")
    for (faults, swapped, expected), case in zip(FAULT_CASES, seen["cases"], strict=True):
        assert set(case["failed"]) == expected, (faults, swapped, case["details"])
