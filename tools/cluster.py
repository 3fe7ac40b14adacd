"""Make targets that talk to the deployed cluster, with names from the same settings as the synth:
`make stacks`, `make kubeconfig`, `make kuberay-crds`, `make wait-ready`, `make status`, `make verify-efa`.

All but `make kubeconfig` (which writes your own kubeconfig) run kubectl against this cluster only,
through a kubeconfig of their own (preflight.cluster_access), whatever your current context is.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import yaml

from k8s_constructs.kv_path import KV_PATH_MARKERS, KvPath, kv_path
from k8s_constructs.ray_facts import (
    NIXL_LOG_PATTERN,
    NODE_TYPE_LABEL,
    RAY_LOG_DIR,
    WORKER_CONTAINER,
    backend_of,
    selector,
)
from preflight.cluster_access import ClusterUnreachable, Kubectl, cluster_kubectl
from preflight.redeploy_live import KUBERAY_CRD_LABEL
from settings import SettingError, Settings, versions
from settings.scheduling import GPU_NODE_LABELS
from tools.entry import one_line_errors, project_settings


def kuberay_crd_documents(settings: Settings) -> str:
    """The repository's KubeRay CRDs, labelled with their version so the preflight can tell they are applied."""
    documents = []
    for name in versions.KUBERAY_CRD_FILES:
        # libyaml's loader when PyYAML has it: the two CRDs are 2 MB of YAML.
        crd = yaml.load(
            (versions.KUBERAY_CRD_DIR / name).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        )
        crd["metadata"].setdefault("labels", {})[KUBERAY_CRD_LABEL] = settings.kuberay_version
        documents.append(yaml.dump(crd, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False))
    return "---\n".join(documents)


def ray_service_verdict(obj: dict[str, Any]) -> tuple[bool, str]:
    """(ready, what it is doing) of a RayService object: Ready=True for the spec KubeRay has seen, so an
    old Ready from before a change does not count."""
    status = obj.get("status", {}) or {}
    generation = obj.get("metadata", {}).get("generation")
    seen = status.get("observedGeneration")
    conditions = {c.get("type"): c for c in status.get("conditions", []) or []}
    ready = conditions.get("Ready", {})
    apps = (status.get("activeServiceStatus", {}) or {}).get("applicationStatuses", {}) or {}
    app_states = (
        ", ".join(f"{name} {app.get('status', '?')}" for name, app in sorted(apps.items()))
        or "no Serve application yet"
    )
    message = ready.get("message") or ready.get("reason") or "no Ready condition yet"
    if seen != generation:
        return False, f"KubeRay has not seen generation {generation} yet (observed {seen})"
    return ready.get("status") == "True", f"Ready={ready.get('status', 'Unknown')} ({message}); {app_states}"


def duration_seconds(text: str) -> int:
    match = re.fullmatch(r"(\d+)([smh]?)", text.strip())
    if not match:
        raise SettingError("WAIT_TIMEOUT", text, "a duration such as 45m, 90s or 1h")
    return int(match[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[match[2]]


def wait_ready(
    settings: Settings,
    kubectl: Kubectl,
    timeout_s: int,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    ns, name = settings.namespace, settings.ray_service_name
    start = clock()
    last = ""
    while True:
        got = kubectl(["get", "rayservice", "-n", ns, name, "-o", "json"])
        verdict = (
            (False, got.stderr.strip()[:200]) if got.returncode != 0 else ray_service_verdict(json.loads(got.stdout))
        )
        elapsed = int(clock() - start)
        if verdict[1] != last:
            print(f"[{elapsed // 60:02d}:{elapsed % 60:02d}] RayService {ns}/{name}: {verdict[1]}", flush=True)
            last = verdict[1]
        if verdict[0]:
            return 0
        if elapsed >= timeout_s:
            print(
                f"error: RayService {ns}/{name} not Ready within {timeout_s}s: see `kubectl describe rayservice -n {ns}"
                f" {name}`",
                file=sys.stderr,
            )
            return 1
        sleep(15)


def worker_exec(settings: Settings, kubectl: Kubectl, pod: str, *command: str) -> subprocess.CompletedProcess[str]:
    """A command in a Ray worker pod's container."""
    return kubectl(["exec", "-n", settings.namespace, pod, "-c", WORKER_CONTAINER, "--", *command])


def _grep_ray_logs(settings: Settings, kubectl: Kubectl, pod: str, options: str) -> str:
    """The lines of a pod's Ray logs that `grep -rh<options>` finds (none is not an error)."""
    return worker_exec(settings, kubectl, pod, "sh", "-c", f"grep -rh{options} {RAY_LOG_DIR}/ || true").stdout


def worker_backends(settings: Settings, kubectl: Kubectl, workers: list[str]) -> dict[str, str]:
    """Each Ray worker pod's NIXL backend, from the Ray logs in its container."""
    return {pod: backend_of(_grep_ray_logs(settings, kubectl, pod, f"E '{NIXL_LOG_PATTERN}'")) for pod in workers}


def worker_kv_paths(settings: Settings, kubectl: Kubectl, workers: list[str]) -> dict[str, KvPath]:
    """Each Ray worker pod's KV path and transfer-failure lines, from libfabric's and NIXL's lines in its Ray logs."""
    patterns = "F " + " ".join(f"-e {shlex.quote(marker)}" for marker in KV_PATH_MARKERS)
    return {
        pod: kv_path(_grep_ray_logs(settings, kubectl, pod, patterns), over_efa=settings.kv_over_efa) for pod in workers
    }


def verify_efa(settings: Settings, kubectl: Kubectl) -> int:
    """Which NIXL backend each GPU worker started: every one must be LIBFABRIC, not UCX."""
    pods = kubectl(
        [
            "get",
            "pods",
            "-n",
            settings.namespace,
            "-l",
            selector(NODE_TYPE_LABEL, "worker"),
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ]
    )
    if pods.returncode != 0:
        print(f"error: {pods.stderr.strip()}", file=sys.stderr)
        return 1
    backends = worker_backends(settings, kubectl, pods.stdout.split())
    for pod, backend in backends.items():
        print(f"{pod}: {backend}")
    return 0 if backends and all(b == "LIBFABRIC" for b in backends.values()) else 1


def status(settings: Settings, kubectl: Kubectl) -> int:
    gpu_role = GPU_NODE_LABELS["role"]
    columns = (
        "custom-columns=NAME:.metadata.name,GPU:.status.allocatable.nvidia\\.com/gpu,"
        "EFA:.status.allocatable.vpc\\.amazonaws\\.com/efa"
    )
    failed = 0
    for args in (
        ["get", "rayservice", "-n", settings.namespace, settings.ray_service_name],
        ["get", "pods", "-n", settings.namespace, "-o", "wide"],
        ["get", "nodes", "-l", f"role={gpu_role}", "-o", columns],
    ):
        result = kubectl(args)
        print(result.stdout.rstrip() or result.stderr.rstrip())
        failed |= result.returncode
    return 1 if failed else 0


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "action", choices=("stacks", "kubeconfig", "kuberay-crds", "wait-ready", "status", "verify-efa")
    )
    parser.add_argument(
        "--timeout", default=os.environ.get("WAIT_TIMEOUT", "45m"), help="wait-ready: how long to wait (e.g. 45m)"
    )
    args = parser.parse_args(argv)
    settings = project_settings()
    timeout_s = duration_seconds(args.timeout)
    if args.action == "stacks":
        print("\n".join(settings.stack_names.values()))
        return 0
    if args.action == "kubeconfig":
        return subprocess.run(
            ["aws", "eks", "update-kubeconfig", "--region", settings.region, "--name", settings.cluster_name],
            check=False,
        ).returncode
    try:
        with cluster_kubectl(settings.region, settings.cluster_name) as kubectl:
            if args.action == "kuberay-crds":
                applied = kubectl(
                    ["apply", "--server-side", "--force-conflicts", "-f", "-"], kuberay_crd_documents(settings)
                )
                print(applied.stdout.rstrip() or applied.stderr.rstrip())
                return 0 if applied.returncode == 0 else 1
            if args.action == "wait-ready":
                return wait_ready(settings, kubectl, timeout_s)
            if args.action == "status":
                return status(settings, kubectl)
            return verify_efa(settings, kubectl)
    except ClusterUnreachable as error:
        print(f"error: cannot reach cluster {settings.cluster_name} in {settings.region}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
