"""A pytest plugin that changes defaults before any test runs: `pytest -p tests.flip_defaults -m "not defaults"`
shows that the tests read the configuration they pin (tests/pinned.py), not the code's defaults. Only the
tests marked `defaults` (and the golden dist/) may notice; tests/test_pinned.py runs it."""

from __future__ import annotations

import pytest

from settings.specs import SPECS_BY_CONTEXT_KEY

# Another Region and another GPU type, both valid together (the defaults' own tests would see them).
FLIPPED = {"REGION": "us-east-2", "GPU_NODE_TYPE": "g6e.8xlarge"}


def pytest_configure(config: pytest.Config) -> None:
    """Only as a plugin (`-p`), before collection: importing this module (tests/test_pinned.py does) changes nothing."""
    for env, value in FLIPPED.items():
        # The specs are frozen on purpose; this plugin alone rewrites them, in its own test process.
        object.__setattr__(SPECS_BY_CONTEXT_KEY[env.lower()], "default", value)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test whose app runs in a process of its own sees the code's defaults, not these: it cannot tell here
    whether it reads the defaults, and its run (a Python and a jsii kernel) is skipped."""
    if item.get_closest_marker("own_process"):
        pytest.skip("app.py in a process of its own: the defaults flipped in this process do not reach it")
