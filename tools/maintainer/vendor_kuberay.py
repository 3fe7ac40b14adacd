"""`make vendor-kuberay VERSION=X.Y.Z`: move the project to another KubeRay release in one step.

Downloads the two CRDs of KubeRay's Helm chart at tag vX.Y.Z (helm-chart/kuberay-operator/crds/), writes them
to schemas/kuberay/ with their source (VERSION.txt, README.md), moves the pin in settings/versions.py,
regenerates imports/ (`make imports`) and dist/. Review the diff, run `make test`, then deploy with
`make kuberay-crds` first (the preflight says so): Helm never upgrades a chart's CRDs.

KUBERAY_SOURCE overrides where the files come from (the tests serve them from 127.0.0.1).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from settings import versions
from settings.context_files import REPO

VERSIONS_FILE = REPO / "settings" / "versions.py"
DEFAULT_SOURCE = "https://raw.githubusercontent.com/ray-project/kuberay"
CRD_PATH = "helm-chart/kuberay-operator/crds"


class VendorError(Exception):
    """One line for the user: what failed, and why."""


def download(source: str, version: str, name: str, timeout: float = 30) -> str:
    url = f"{source}/v{version}/{CRD_PATH}/{name}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            text: str = answer.read().decode()
    except (urllib.error.URLError, OSError) as error:
        raise VendorError(f"cannot fetch {url}: {error}") from None
    crd = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml: the CRDs are large
    if (
        not isinstance(crd, dict)
        or crd.get("kind") != "CustomResourceDefinition"
        or crd.get("spec", {}).get("group") != "ray.io"
    ):
        raise VendorError(f"{url} is not a ray.io CustomResourceDefinition")
    if "v1" not in {v.get("name") for v in crd["spec"].get("versions", [])}:
        raise VendorError(f"{url} has no ray.io/v1 version: the typed RayService needs it")
    return text


def write_crds(
    version: str, source: str, crd_dir: Path = versions.KUBERAY_CRD_DIR, versions_file: Path = VERSIONS_FILE
) -> None:
    files = {
        name: download(source, version, name) for name in versions.KUBERAY_CRD_FILES
    }  # every file first, then write
    for name, text in files.items():
        (crd_dir / name).write_text(text)
    today = dt.date.today().isoformat()
    (crd_dir / "VERSION.txt").write_text(
        "Source repository: https://github.com/ray-project/kuberay\n"
        f"Tag: v{version} (fetched {today} by `make vendor-kuberay` from {source})\n"
        f"Helm chart: kuberay-operator, version {version} (helm repo {versions.KUBERAY_OPERATOR.repository})\n"
        "Files:\n" + "".join(f"  {n}  <- {CRD_PATH}/{n} @ v{version}\n" for n in versions.KUBERAY_CRD_FILES)
    )
    readme = crd_dir / "README.md"
    readme.write_text(re.sub(r"v\d+\.\d+\.\d+", f"v{version}", readme.read_text()))
    text = versions_file.read_text()
    pinned = re.sub(
        r'(KUBERAY_OPERATOR: Final = HelmChartPin\("[^"]+", "kuberay-operator", ")[^"]+("\))',
        rf"\g<1>{version}\g<2>",
        text,
    )
    if pinned == text and f'"kuberay-operator", "{version}"' not in text:
        raise VendorError(f"cannot find the KubeRay pin in {versions_file}")
    versions_file.write_text(pinned)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", required=True, help="the KubeRay release, e.g. 1.7.1")
    parser.add_argument("--skip-generate", action="store_true", help="do not regenerate imports/ and dist/ (the tests)")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"\d+\.\d+\.\d+", args.version):
        print(f"error: VERSION={args.version!r} is not allowed: a KubeRay release X.Y.Z, e.g. 1.7.1", file=sys.stderr)
        return 2
    try:
        write_crds(args.version, os.environ.get("KUBERAY_SOURCE", DEFAULT_SOURCE))
    except VendorError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"schemas/kuberay/ and settings/versions.py now at KubeRay {args.version}")
    if not args.skip_generate:
        import subprocess

        # Fresh processes: they import the new pin and the new CRDs.
        for module in ("tools.maintainer.import_crd", "tools.maintainer.write_dist"):
            subprocess.run([sys.executable, "-m", module], cwd=REPO, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
