"""The tests read the configuration they pin (tests/pinned.py), not the code's defaults: a changed default breaks
only the tests marked `defaults` and the golden dist/."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

from settings import load_settings, versions
from settings.specs import SPECS, SPECS_BY_CONTEXT_KEY
from tests.conftest import REPO, settings_for
from tests.flip_defaults import FLIPPED
from tests.pinned import PINNED, VERSION_FOLLOWERS


def test_every_setting_is_pinned_or_follows_a_version_pin() -> None:
    assert [*PINNED, *VERSION_FOLLOWERS] and set(PINNED) | VERSION_FOLLOWERS == {s.env for s in SPECS}, (
        "tests/pinned_settings.json is out of step with the specs: run `make docs-tables`"
    )
    pins = {str(v) for v in vars(versions).values() if isinstance(v, str)} | {
        v.version for v in vars(versions).values() if isinstance(getattr(v, "version", None), str)
    }
    followers = {env: SPECS_BY_CONTEXT_KEY[env.lower()].default for env in VERSION_FOLLOWERS}
    assert {env: default for env, default in followers.items() if default not in pins} == {}, (
        "null in pinned_settings.json: only for an artifact's pin"
    )


@pytest.fixture
def flipped() -> Iterator[None]:
    """REGION and GPU_NODE_TYPE with other defaults, in this process (tests/flip_defaults.py does it for a whole
    run)."""
    before = {env: SPECS_BY_CONTEXT_KEY[env.lower()].default for env in FLIPPED}
    for env, value in FLIPPED.items():
        object.__setattr__(SPECS_BY_CONTEXT_KEY[env.lower()], "default", value)
    yield
    for env, value in before.items():
        object.__setattr__(SPECS_BY_CONTEXT_KEY[env.lower()], "default", value)


def test_the_tests_settings_do_not_move_with_the_defaults(flipped: None) -> None:
    pinned = settings_for()
    assert (pinned.region, pinned.gpu_node.name) == (PINNED["REGION"], PINNED["GPU_NODE_TYPE"])
    defaults = load_settings({}, {})
    assert (defaults.region, defaults.gpu_node.name) == (FLIPPED["REGION"], FLIPPED["GPU_NODE_TYPE"])


# The files the Region and the GPU type appear in most (the whole suite:
# `make test ARGS="-p tests.flip_defaults -m 'not defaults'"`).


def _pytest_flipped(*args: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
        "-n",
        "0",
        "-p",
        "tests.flip_defaults",
        "-rf",
        *args,
    ]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_a_flipped_default_breaks_only_the_defaults_tests() -> None:
    """One run of the files, both kinds of test (one start-up, one set of session synths): what fails is exactly
    four tests, each marked `defaults`; every other test passes (but for one marked `own_process`, skipped: its app
    runs in a process of its own, which the flipped defaults do not reach)."""
    flipped = _pytest_flipped(
        "tests/test_settings.py",
        "tests/test_settings_bad_values.py",
        "tests/test_lookup.py",
        "tests/test_model_fit.py",
        "tests/test_preflight_first_deploy.py",
        "tests/test_preflight_reservation.py",
        "tests/test_dist.py::test_dist_is_in_step_with_the_code",
        # It wrote the default Region into its example certificate (a second place for the default): it follows it now.
        "tests/test_accepted_findings.py::test_checkov_sees_the_pods_kuberay_makes",
    )
    failed = sorted(line.split()[1] for line in flipped.stdout.splitlines() if line.startswith("FAILED "))
    assert failed == [
        "tests/test_dist.py::test_dist_is_in_step_with_the_code",
        "tests/test_settings.py::test_defaults_are_the_references",
        "tests/test_settings.py::test_every_generated_part_of_the_docs_is_current",
        "tests/test_settings.py::test_the_docs_settings_table_is_generated_from_the_specs",
    ], flipped.stdout[-3000:]
    for name in failed:
        path, test = name.split("::")
        module = path.removesuffix(".py").replace("/", ".")
        function = getattr(importlib.import_module(module), test)
        module_marks = getattr(sys.modules[module], "pytestmark", [])
        module_marks = module_marks if isinstance(module_marks, list) else [module_marks]
        marks = [*getattr(function, "pytestmark", []), *module_marks]
        assert "defaults" in {mark.name for mark in marks}, name
    summary = flipped.stdout.strip().splitlines()[-1]
    assert " error" not in summary and summary.startswith("4 failed, "), flipped.stdout[-3000:]
    assert int(summary.split()[2]) > 100, flipped.stdout[-3000:]  # passed
