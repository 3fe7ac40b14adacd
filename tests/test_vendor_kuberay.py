"""`make vendor-kuberay`: the CRDs of a KubeRay tag from a server on 127.0.0.1 standing in for GitHub."""

from __future__ import annotations

import http.server
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from settings import versions
from tests.loopback import serving
from tools.maintainer import vendor_kuberay

PIN = versions.KUBERAY_OPERATOR.version


@pytest.fixture
def kuberay_tags(tmp_path: Path) -> Iterator[str]:
    """v{PIN} and v9.9.9 both serve the repository's CRDs; v0.0.1 serves a file that is no CRD."""
    root = tmp_path / "github"
    for tag in (PIN, "9.9.9"):
        crds = root / f"v{tag}" / vendor_kuberay.CRD_PATH
        crds.mkdir(parents=True)
        for name in versions.KUBERAY_CRD_FILES:
            shutil.copy(versions.KUBERAY_CRD_DIR / name, crds / name)
    broken = root / "v0.0.1" / vendor_kuberay.CRD_PATH
    broken.mkdir(parents=True)
    for name in versions.KUBERAY_CRD_FILES:
        (broken / name).write_text("kind: ConfigMap\n")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

        def log_message(self, format: str, *args: object) -> None:
            pass

    with serving(Quiet) as base:
        yield base


def _copy(tmp_path: Path) -> tuple[Path, Path]:
    crd_dir, versions_file = tmp_path / "kuberay", tmp_path / "versions.py"
    shutil.copytree(versions.KUBERAY_CRD_DIR, crd_dir)
    shutil.copy(vendor_kuberay.VERSIONS_FILE, versions_file)
    return crd_dir, versions_file


def test_the_same_tag_gives_the_same_crds(kuberay_tags: str, tmp_path: Path) -> None:
    crd_dir, versions_file = _copy(tmp_path)
    vendor_kuberay.write_crds(PIN, kuberay_tags, crd_dir, versions_file)
    for name in versions.KUBERAY_CRD_FILES:
        assert (crd_dir / name).read_bytes() == (versions.KUBERAY_CRD_DIR / name).read_bytes()
    assert versions_file.read_text() == vendor_kuberay.VERSIONS_FILE.read_text()


def test_another_tag_moves_the_pin_and_says_where_the_crds_came_from(kuberay_tags: str, tmp_path: Path) -> None:
    crd_dir, versions_file = _copy(tmp_path)
    vendor_kuberay.write_crds("9.9.9", kuberay_tags, crd_dir, versions_file)
    assert '"kuberay-operator", "9.9.9")' in versions_file.read_text()
    assert (
        "Tag: v9.9.9" in (crd_dir / "VERSION.txt").read_text() and kuberay_tags in (crd_dir / "VERSION.txt").read_text()
    )
    assert "v9.9.9" in (crd_dir / "README.md").read_text() and f"v{PIN}" not in (crd_dir / "README.md").read_text()


@pytest.mark.parametrize(
    ("version", "fragment"), [("0.0.1", "is not a ray.io CustomResourceDefinition"), ("5.5.5", "cannot fetch")]
)
def test_a_tag_without_good_crds_is_one_line_and_writes_nothing(
    kuberay_tags: str, tmp_path: Path, version: str, fragment: str
) -> None:
    crd_dir, versions_file = _copy(tmp_path)
    before = {p.name: p.read_bytes() for p in crd_dir.iterdir()}
    with pytest.raises(vendor_kuberay.VendorError, match=fragment):
        vendor_kuberay.write_crds(version, kuberay_tags, crd_dir, versions_file)
    assert {p.name: p.read_bytes() for p in crd_dir.iterdir()} == before


def test_a_bad_version_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert vendor_kuberay.main(["--version", "latest"]) == 2
    assert capsys.readouterr().err.startswith("error: VERSION='latest' is not allowed")
