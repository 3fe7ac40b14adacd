"""examples/: each configuration the docs describe, as a file a user exports; each is read as the shell reads it,
synthesized once (cdk-nag on), and its RayService validated against the KubeRay CRD and Ray's serve schema."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from settings import Settings
from settings.specs import SPECS
from tests.conftest import REPO, Synth, settings_for, synthesize
from tests.test_serving import deployed_manifest
from tests.validators import crd_errors, ray_serve_errors

EXAMPLES = sorted((REPO / "examples").glob("*.env"))

# What each example is for, as the settings show it (a new example fails until it says what it shows).
SHOWS: dict[str, Callable[[Settings], bool]] = {
    "p5-llama-70b-tp8.env": (
        lambda s: (s.gpu_node.name, s.tensor_parallel_size, s.prefill_nodes, s.decode_nodes) == ("p5.48xlarge", 8, 1, 1)
    ),
    "elastic-capacity.env": lambda s: s.autoscaling and (s.prefill_max_replicas, s.decode_max_replicas) == (2, 3),
    "s3-weights.env": lambda s: s.model_s3 is not None and s.model_s3.bucket == "my-models",
    "head-fault-tolerance.env": lambda s: s.gcs_redis and s.system_node_count == 2,
    "internal-endpoint.env": lambda s: (
        (s.serve_endpoint.exposure, s.serve_endpoint.https, s.serve_endpoint.api_keys, s.serve_endpoint.hosted_zone_id)
        == ("internal", True, True, "Z0123456789ABCDEFGHIJ")
        and s.serve_endpoint.allowed_cidrs == (s.vpc_cidr, "10.20.0.0/16")
    ),
}


def read_example(path: Path) -> dict[str, str]:
    """The variables `set -a; . FILE` exports, read by bash itself (so the file is what a user would source)."""
    script = f"set -a; . {shlex.quote(str(path))}; set +a; env -0"
    done = subprocess.run(
        ["bash", "-c", script], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True, timeout=30
    )
    exported = dict(item.split("=", 1) for item in done.stdout.split("\0") if "=" in item)
    names = {line.split("=", 1)[0] for line in path.read_text().splitlines() if line and not line.startswith("#")}
    return {name: exported[name] for name in names}


def test_every_example_sets_only_settings_and_says_what_it_shows() -> None:
    assert [p.name for p in EXAMPLES] and sorted(SHOWS) == [p.name for p in EXAMPLES]
    known = {s.env for s in SPECS}
    for path in EXAMPLES:
        assert set(read_example(path)) <= known, path.name
        assert path.read_text().startswith("# "), f"{path.name}: say what it deploys in its first comment"
        assert f"({path.name})" in (REPO / "examples" / "README.md").read_text(), (
            f"{path.name} is not in examples/README.md"
        )


@pytest.fixture(scope="module", params=[p.name for p in EXAMPLES])
def example(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Synth]:
    name: str = request.param
    return name, synthesize(
        settings_for(read_example(REPO / "examples" / name)), tmp_path_factory.mktemp(name.removesuffix(".env"))
    )


def test_each_example_synthesizes_clean_and_its_rayservice_validates(example: tuple[str, Synth]) -> None:
    name, synth = example
    assert SHOWS[name](synth.settings), name
    assert synth.nag_error == "", synth.nag_error
    (ray_service,) = [o for o in deployed_manifest(synth) if o["kind"] == "RayService"]
    assert crd_errors(ray_service) == []
    assert ray_serve_errors(yaml.safe_load(ray_service["spec"]["serveConfigV2"])) == []
