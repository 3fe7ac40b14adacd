"""dist/ holds the golden manifests of the built-in defaults; it must match the code."""

from __future__ import annotations

import pytest

from tests.conftest import REPO
from tools.maintainer.write_dist import default_settings, render

# The golden manifests are the defaults' (tools/maintainer/write_dist.py), compared with the pinned base synth.
pytestmark = pytest.mark.defaults


def test_dist_is_in_step_with_the_code() -> None:
    stale = [
        name
        for name, text in render(default_settings()).items()
        if not (REPO / "dist" / name).exists() or (REPO / "dist" / name).read_text() != text
    ]
    assert stale == [], f"dist/ is out of date for {stale}: run `make synth` and commit dist/"


def test_dist_rayservice_matches_the_deployed_manifest(default_synth) -> None:  # type: ignore[no-untyped-def]
    import yaml

    from tests.test_serving import deployed_manifest

    deployed = deployed_manifest(default_synth)
    golden = list(yaml.safe_load_all((REPO / "dist" / "rayservice.k8s.yaml").read_text()))
    assert golden == deployed
