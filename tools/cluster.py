"""Make targets that talk to the deployed cluster, with names from the same settings as the synth:
`make stacks`, `make kubeconfig`, `make kuberay-crds`, `make wait-ready`, `make status`, `make verify-efa`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

import yaml

from preflight.redeploy import KUBERAY_CRD_LABEL
from settings import SettingError, Settings, load_settings, versions
from settings.context_files import read_project_context
from settings.scheduling import GPU_NODE_LABELS


def kuberay_crd_documents(settings: Settings) -> str:
    """The repository's KubeRay CRDs, labelled with their version so the preflight can tell they are applied."""
    documents = []
    for name in versions.KUBERAY_CRD_FILES:
        crd = yaml.safe_load((versions.KUBERAY_CRD_DIR / name).read_text())
        crd["metadata"].setdefault("labels", {})[KUBERAY_CRD_LABEL] = settings.kuberay_version
        documents.append(yaml.safe_dump(crd, sort_keys=False))
    return "---\n".join(documents)


def commands(settings: Settings, action: str, timeout: str) -> list[list[str]]:
    ns, name = settings.namespace, settings.ray_service_name
    gpu_role = GPU_NODE_LABELS["role"]
    return {
        "kubeconfig": [["aws", "eks", "update-kubeconfig", "--region", settings.region, "--name", settings.cluster_name]],
        # Server-side: the CRDs are too large for the last-applied annotation of a client-side apply.
        "kuberay-crds": [["kubectl", "apply", "--server-side", "--force-conflicts", "-f", "-"]],
        "wait-ready": [
            ["kubectl", "wait", "-n", ns, f"rayservice/{name}", "--for=condition=Ready", f"--timeout={timeout}"],
        ],
        "status": [
            ["kubectl", "get", "rayservice", "-n", ns, name],
            ["kubectl", "get", "pods", "-n", ns, "-o", "wide"],
            [
                "kubectl",
                "get",
                "nodes",
                "-l",
                f"role={gpu_role}",
                "-o",
                "custom-columns=NAME:.metadata.name,GPU:.status.allocatable.nvidia\\.com/gpu,EFA:.status.allocatable.vpc\\.amazonaws\\.com/efa",
            ],
        ],
    }[action]


def verify_efa(settings: Settings) -> int:
    """Which NIXL backend each GPU worker started: every one must be LIBFABRIC, not UCX."""
    pods = subprocess.run(
        ["kubectl", "get", "pods", "-n", settings.namespace, "-l", "ray.io/node-type=worker", "-o", "jsonpath={.items[*].metadata.name}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if pods.returncode != 0:
        print(f"error: {pods.stderr.strip()}", file=sys.stderr)
        return 1
    verdicts = []
    for pod in pods.stdout.split():
        found = subprocess.run(
            ["kubectl", "exec", "-n", settings.namespace, pod, "-c", "ray-worker", "--", "sh", "-c",
             "grep -rhoE 'Backend (LIBFABRIC|UCX) was instantiated' /tmp/ray/session_latest/logs/ | sort -u"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        backends = sorted({line.split()[1] for line in found.stdout.splitlines() if line.startswith("Backend ")})
        verdicts.append(backends == ["LIBFABRIC"])
        print(f"{pod}: {', '.join(backends) or 'no NIXL backend line yet'}")
    return 0 if verdicts and all(verdicts) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("stacks", "kubeconfig", "kuberay-crds", "wait-ready", "status", "verify-efa"))
    parser.add_argument("--timeout", default=os.environ.get("WAIT_TIMEOUT", "45m"), help="wait-ready: how long to wait (kubectl duration)")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(os.environ, read_project_context())
    except SettingError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.action == "stacks":
        print("\n".join(settings.stack_names.values()))
        return 0
    if args.action == "verify-efa":
        return verify_efa(settings)
    for command in commands(settings, args.action, args.timeout):
        if shutil.which(command[0]) is None:
            print(f"error: {command[0]} is not installed (needed for `make {args.action}`)", file=sys.stderr)
            return 2
        stdin = kuberay_crd_documents(settings) if args.action == "kuberay-crds" else None
        result = subprocess.run(command, input=stdin, text=True, check=False)
        if result.returncode != 0:
            if args.action == "wait-ready":
                print(
                    f"error: RayService {settings.namespace}/{settings.ray_service_name} not Ready within {args.timeout}: "
                    f"see `kubectl describe rayservice -n {settings.namespace} {settings.ray_service_name}`",
                    file=sys.stderr,
                )
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
