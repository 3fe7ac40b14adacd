"""`make review` with real synths: in a clone of this repository, a commit that changes vpc_cidr in
cdk.json is flagged (the VPC is replaced), one that changes max_model_len is not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


def _git(clone: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", *args],
        cwd=clone,
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This repository's committed state, with two commits on top: max_model_len, then vpc_cidr."""
    path = tmp_path_factory.mktemp("review") / "repo"
    # --shared: the clone reads this repository's objects in place (copying them took over a second); its own
    # commits and the review's worktrees are written in the clone.
    subprocess.run(["git", "clone", "--quiet", "--shared", str(REPO), str(path)], check=True)
    (path / "node_modules").symlink_to(REPO / "node_modules")  # the pinned CDK CLI, already installed
    for key, value in (("max_model_len", 2048), ("vpc_cidr", "10.1.0.0/16")):
        cdk_json = json.loads((path / "cdk.json").read_text())
        cdk_json["context"][key] = value
        (path / "cdk.json").write_text(json.dumps(cdk_json, indent=2) + "\n")
        _git(path, "commit", "--quiet", "-am", f"{key} = {value}")
    return path


def _review(clone: Path, base: str, *, allow: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ALLOW_REPLACEMENT", "VPC_CIDR", "MAX_MODEL_LEN")}
    env["ALLOW_REPLACEMENT"] = "1" if allow else ""
    return subprocess.run(
        [sys.executable, "-m", "tools.maintainer.review", "--base", base, "--output", "review.md"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_serving_only_change_passes(clone: Path) -> None:
    _git(clone, "checkout", "--quiet", "HEAD~1")  # the max_model_len commit
    try:
        result = _review(clone, "HEAD~1")
    finally:
        _git(clone, "checkout", "--quiet", "-")
    assert result.returncode == 0, result.stderr
    assert "No protected resource is replaced or destroyed." in result.stdout
    assert "| `ray-llm-multinode-serving` | 0 | 1 | 0 | 0 |" in result.stdout
    assert "| `ray-llm-multinode-network` | 0 | 0 | 0 | 0 |" in result.stdout
    assert "max_model_len: 2048" in result.stdout  # cdk diff of the manifest shows the serve config change
    # Only the serving stack's template changed: the CLI's diff runs for it alone (it would print "There were no
    # differences" for a stack it found unchanged), and each other stack is said to be unchanged.
    for stack in ("network", "cluster", "system", "gpu"):
        assert f"`cdk diff ray-llm-multinode-{stack}`: template unchanged (byte-identical to BASE's)." in result.stdout
    assert "There were no differences" not in result.stdout
    assert "<summary><code>cdk diff ray-llm-multinode-serving</code></summary>" in result.stdout
    assert (clone / "review.md").read_text() == result.stdout.rstrip("\n") + "\n"


def test_a_vpc_cidr_change_is_flagged_and_can_be_accepted(clone: Path) -> None:
    result = _review(clone, "HEAD~1")
    assert result.returncode == 1
    assert "AWS::EC2::VPC `Vpc8378EB38` is replaced: CidrBlock cannot change in place" in result.stdout
    assert "AWS::EC2::Subnet" in result.stdout
    assert "requires replacement" in result.stdout  # the CDK CLI's own diff says so too
    assert result.stderr.strip().startswith("error: ") and "ALLOW_REPLACEMENT=1" in result.stderr


def test_allow_replacement_accepts_what_the_review_flagged(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The exit code only, on the report the real review above produced: no second pair of synths."""
    from tools.maintainer import review

    flagged = ("report\n", ["AWS::EC2::VPC `Vpc8378EB38` is replaced: CidrBlock cannot change in place"])
    monkeypatch.setattr(review, "review", lambda base, workdir: flagged)
    monkeypatch.setenv("ALLOW_REPLACEMENT", "")
    assert review.main(["--base", "HEAD~1"]) == 1
    monkeypatch.setenv("ALLOW_REPLACEMENT", "1")
    assert review.main(["--base", "HEAD~1"]) == 0
    assert "report" in capsys.readouterr().out


@pytest.mark.parametrize("base", ["no-such-branch", ""])
def test_a_base_that_does_not_exist_is_one_line(clone: Path, base: str) -> None:
    result = _review(clone, base)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"error: BASE={base!r} is not a commit")
    assert "Traceback" not in result.stderr


def test_a_base_that_cannot_be_synthesized_is_one_line(clone: Path) -> None:
    _git(clone, "checkout", "--quiet", "-b", "broken", "HEAD")
    cdk_json = json.loads((clone / "cdk.json").read_text())
    cdk_json["context"]["gpu_node_count"] = 3
    (clone / "cdk.json").write_text(json.dumps(cdk_json))
    _git(clone, "commit", "--quiet", "-am", "broken")
    _git(clone, "checkout", "--quiet", "-")
    result = _review(clone, "broken")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "BASE='broken' cannot be synthesized: GPU_NODE_COUNT=" in result.stderr
