"""`make imports`: regenerate imports/ (typed cdk8s classes) from KubeRay's RayService CRD.

Only the storage version ray.io/v1 is imported: the CRD also carries the legacy v1alpha1, which we
never use and which doubles the generated module and its import time.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from settings.context_files import REPO
from settings.versions import KUBERAY_CRD_DIR

CRD = KUBERAY_CRD_DIR / "ray.io_rayservices.yaml"
API_VERSION = "v1"
# What imports/ was generated from and what it then held: the test regenerates only when the inputs move.
STAMP = KUBERAY_CRD_DIR / "imports.sha256"


def inputs_digest() -> str:
    """The CRD, this generator, the pinned cdk8s-cli and the PyYAML that rewrites the CRD: all that decides imports/."""
    lock = json.loads((REPO / "package-lock.json").read_text())
    cli = lock["packages"]["node_modules/cdk8s-cli"]["version"]
    digest = hashlib.sha256()
    for part in (CRD.read_bytes(), Path(__file__).read_bytes(), cli.encode(), yaml.__version__.encode()):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def read_stamp() -> dict[str, str]:
    return dict(line.split(" ", 1) for line in STAMP.read_text().splitlines() if line.strip())


def write_stamp(imports: Path) -> None:
    STAMP.write_text(f"inputs {inputs_digest()}\nimports {tree_digest(imports)}\n")


def generate(output: Path) -> None:
    """Run `cdk8s import` on the v1 part of the repository's RayService CRD, writing the module to ``output``."""
    crd = yaml.load(CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml: the CRD is large
    crd["spec"]["versions"] = [v for v in crd["spec"]["versions"] if v["name"] == API_VERSION]
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / f"ray.io_rayservices.{API_VERSION}.yaml"
        source.write_text(yaml.safe_dump(crd, sort_keys=False))
        cdk8s = REPO / "node_modules" / ".bin" / "cdk8s"
        subprocess.run(
            [str(cdk8s), "import", str(source), "--language", "python", "--output", str(output), "--no-check-upgrade"],
            check=True,
            cwd=tmp,
            capture_output=True,
        )


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "imports"
        generate(output)
        shutil.rmtree(REPO / "imports", ignore_errors=True)
        shutil.copytree(output, REPO / "imports")
    write_stamp(REPO / "imports")
    print(f"imports/ regenerated from schemas/kuberay/{CRD.name} ({API_VERSION} only)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
