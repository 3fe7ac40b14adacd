"""`make test-fast` leaves out what tests/conftest.py marks slow: a full synth, a real Ray cluster, a scenario."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.conftest import AUTOSCALER_PROOF, _slow


def _item(nodeid: str, fixtures: tuple[str, ...] = (), marker: str = "") -> Any:
    path = Path(nodeid.split("::")[0])
    return SimpleNamespace(
        nodeid=nodeid,
        path=path,
        fixturenames=fixtures,
        get_closest_marker=lambda name: object() if name == marker else None,
    )


def test_a_plain_test_is_fast_and_each_kind_of_slow_one_is_not() -> None:
    assert not _slow(_item("tests/test_plan.py::test_x", ("tmp_path", "monkeypatch")))
    assert not _slow(_item("tests/test_synth_notices.py::test_two_synths"))  # "synth" in a name is not one
    assert _slow(_item("tests/test_autoscaling.py::test_x", ("autoscaling_synth",)))  # a full synth
    assert _slow(_item("tests/test_autoscaling.py::test_x[default_synth]", ("request",)))  # one, named
    assert _slow(_item("tests/test_other.py::test_x", ("ray_cluster",)))  # a real Ray cluster
    assert _slow(_item("tests/test_topology.py::test_x"))  # a module of them
    assert _slow(_item(AUTOSCALER_PROOF))  # a background scenario
    assert _slow(_item("tests/test_pinned.py::test_x", marker="own_process"))
