"""kubectl against this cluster and no other: a kubeconfig of its own, written by `aws eks
update-kubeconfig` into a temporary file, whatever the user's current context points at.

Every command that talks to Kubernetes on behalf of a make target (the preflight's CRD check, the
teardown, wait-ready, kuberay-crds, status, verify-efa) goes through here, so `make destroy` for a dev
cluster can never delete load balancers of the cluster the user's kubectl happens to point at.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol


class Kubectl(Protocol):
    def __call__(self, args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]: ...


class ClusterUnreachable(Exception):
    """No kubeconfig could be made for the cluster (it does not exist, no access, no AWS CLI)."""


@contextmanager
def cluster_kubectl(region: str, cluster_name: str, *, timeout: int = 900) -> Iterator[Kubectl]:
    """A kubectl runner bound to ``cluster_name`` in ``region`` through a temporary kubeconfig."""
    for tool in ("aws", "kubectl"):
        if shutil.which(tool) is None:
            raise ClusterUnreachable(f"{tool} is not installed")
    with tempfile.TemporaryDirectory(prefix="kubeconfig-") as tmp:
        kubeconfig = Path(tmp) / "config"
        made = subprocess.run(
            [
                "aws",
                "eks",
                "update-kubeconfig",
                "--region",
                region,
                "--name",
                cluster_name,
                "--kubeconfig",
                str(kubeconfig),
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if made.returncode != 0:
            raise ClusterUnreachable(
                (made.stderr or made.stdout).strip().splitlines()[-1]
                if (made.stderr or made.stdout).strip()
                else "update-kubeconfig failed"
            )
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}

        def run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["kubectl", *args], input=stdin, env=env, capture_output=True, text=True, timeout=timeout, check=False
            )

        yield run
