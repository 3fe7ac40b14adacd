"""`make imports`: regenerate imports/ (typed cdk8s classes) from KubeRay's RayService CRD.

Only the storage version ray.io/v1 is imported: the CRD also carries the legacy v1alpha1, which we
never use and which doubles the generated module and its import time.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from settings.versions import KUBERAY_CRD_DIR

REPO = Path(__file__).resolve().parent.parent
CRD = KUBERAY_CRD_DIR / "ray.io_rayservices.yaml"
API_VERSION = "v1"


def generate(output: Path) -> None:
    """Run `cdk8s import` on the v1 part of the repository's RayService CRD, writing the module to ``output``."""
    crd = yaml.safe_load(CRD.read_text())
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
    print(f"imports/ regenerated from schemas/kuberay/{CRD.name} ({API_VERSION} only)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
