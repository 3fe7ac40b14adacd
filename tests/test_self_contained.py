"""The repository stands on its own: a user clones it alone, without the steering folder beside it."""

from __future__ import annotations

import filecmp
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from settings import versions
from tests.conftest import REPO
from tests.validators import crd_errors
from tools.maintainer import import_crd

# Code that runs in the build, the tests or a make target: none of it may look outside the repository.
_OUTSIDE = re.compile(r"""\.\./|REPO\.parent|parent\.parent\.parent|/\s*["']shared["']|shared/schemas""")


def _tracked_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return [name for name in out.stdout.splitlines() if (REPO / name).is_file()]


def test_no_build_test_or_make_file_reads_outside_the_repository() -> None:
    code = [
        n
        for n in _tracked_files()
        if (n.endswith(".py") or n in ("Makefile", "cdk.json", ".ci/run", "pyproject.toml") or n.startswith(".github/"))
        and n != "tests/test_self_contained.py"
    ]
    offenders = [
        f"{name}:{number}: {line.strip()}"
        for name in code
        for number, line in enumerate((REPO / name).read_text().splitlines(), 1)
        if _OUTSIDE.search(line)
    ]
    assert offenders == []


def test_a_copy_of_the_repository_alone_validates_its_manifests(tmp_path: Path) -> None:
    """The CRD checks and the dist/ check pass in a copy with nothing beside it (what failed on a fresh clone)."""
    copy = tmp_path / "isolated" / "repo"
    for name in _tracked_files():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, copy / name)
    tests = [
        "tests/test_self_contained.py::test_dist_rayservice_validates_against_the_repository_crd",
        "tests/test_dist.py::test_dist_is_in_step_with_the_code",
    ]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "2 passed" in result.stdout


def test_dist_rayservice_validates_against_the_repository_crd() -> None:
    (ray_service,) = [
        o
        for o in yaml.safe_load_all((REPO / "dist" / "rayservice.k8s.yaml").read_text())
        if o and o["kind"] == "RayService"
    ]
    assert versions.KUBERAY_CRD_DIR.is_relative_to(REPO)
    assert crd_errors(ray_service) == []


def test_crds_are_of_the_pinned_kuberay_version() -> None:
    source = (versions.KUBERAY_CRD_DIR / "VERSION.txt").read_text()
    assert f"Tag: v{versions.KUBERAY_OPERATOR.version} " in source
    for name in versions.KUBERAY_CRD_FILES:
        crd = yaml.load(
            (versions.KUBERAY_CRD_DIR / name).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        )
        assert crd["kind"] == "CustomResourceDefinition" and crd["spec"]["group"] == "ray.io"
    assert "Apache License 2.0" in (versions.KUBERAY_CRD_DIR / "README.md").read_text()


def test_imports_are_what_make_imports_made_of_these_inputs() -> None:
    """imports/ is byte for byte what `make imports` wrote (the stamp holds its digest), from exactly the
    inputs it has now (the CRD, the generator, the pinned cdk8s-cli, PyYAML). When an input moves, the next
    test regenerates and compares; here the stamp says whether it must."""
    stamp = import_crd.read_stamp()
    assert stamp["imports"] == import_crd.tree_digest(REPO / "imports"), (
        "imports/ was edited by hand: run `make imports`"
    )


def test_imports_are_generated_from_exactly_the_repository_crd(tmp_path: Path) -> None:
    """`cdk8s import` of schemas/kuberay/ (the pinned cdk8s-cli) gives byte for byte what imports/ holds.
    Run when an input has moved since `make imports` wrote the stamp (or with FULL_IMPORTS_CHECK=1)."""
    import os

    if import_crd.read_stamp()["inputs"] == import_crd.inputs_digest() and os.environ.get("FULL_IMPORTS_CHECK") != "1":
        pytest.skip(
            "imports/ inputs unchanged since `make imports` generated and compared them (FULL_IMPORTS_CHECK=1"
            " regenerates)"
        )
    output = tmp_path / "imports"
    import_crd.generate(output)
    comparison = filecmp.dircmp(output, REPO / "imports", ignore=["__pycache__"])
    differing: list[str] = []

    def collect(cmp: filecmp.dircmp[str], prefix: str) -> None:
        differing.extend(f"{prefix}{n}" for n in cmp.left_only + cmp.right_only + cmp.funny_files)
        _, mismatch, errors = filecmp.cmpfiles(cmp.left, cmp.right, cmp.common_files, shallow=False)
        differing.extend(f"{prefix}{n}" for n in mismatch + errors)
        for name, sub in cmp.subdirs.items():
            collect(sub, f"{prefix}{name}/")

    collect(comparison, "")
    assert differing == [], f"imports/ differs from `make imports` output: {differing}"
    assert import_crd.read_stamp()["inputs"] == import_crd.inputs_digest(), (
        "imports/ is right but its stamp is stale: run `make imports`"
    )
