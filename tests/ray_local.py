"""What the tests' local Ray clusters share, and how a scenario (a tests.*_scenario module: a real local Ray in a
process of its own) is run and read. The scenario modules import it in processes of their own: nothing heavy here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

# Just over Ray's smallest object store (ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES, 75 MiB in 2.58): several
# raylets run at once on a 2-core CI machine, and no test puts large objects.
OBJECT_STORE_BYTES = 78 * 1024 * 1024

# A head as the RayCluster's (no CPU or GPU for work), without the daemons no test of a lean cluster reads: the
# dashboard, Ray's autoscaler monitor and its log monitor (the drivers take no worker logs).
QUIET_HEAD: dict[str, Any] = {
    "num_cpus": 0,
    "num_gpus": 0,
    "object_store_memory": OBJECT_STORE_BYTES,
    "include_dashboard": False,
    "no_monitor": True,
    "include_log_monitor": False,
}


def scenario_command(module: str, spec_file: Path) -> list[str]:
    return [sys.executable, "-m", module, str(spec_file)]


def scenario_output(returncode: int, stdout: str, stderr: str) -> dict[str, Any]:
    """What a scenario printed last, parsed; a scenario that failed fails the test with the end of its stderr."""
    assert returncode == 0, stderr[-3000:]
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return result


def run_scenario(
    module: str, spec: dict[str, Any], spec_file: Path, *, timeout: float, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A tests.*_scenario module (a real local Ray, in a process of its own) run on its spec: what it printed last,
    parsed. A scenario that fails fails the test with the end of its stderr."""
    spec_file.write_text(json.dumps(spec))
    done = subprocess.run(
        scenario_command(module, spec_file),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        env=None if env is None else {**os.environ, **env},
    )
    return scenario_output(done.returncode, done.stdout, done.stderr)
