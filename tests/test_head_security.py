"""The Ray head runs with every Linux capability dropped and no privilege escalation.

The RayService's head container sets `allowPrivilegeEscalation: false`, `capabilities.drop: [ALL]` and the
RuntimeDefault seccomp profile. This is the evidence that Ray 2.58 needs none of them on the head: a real
local head started as root (the image's user) under `setpriv` with an empty capability bounding set and
no_new_privs — what the container runtime does with that securityContext — starts its GCS, raylet and
dashboard, runs the Serve controller and proxy, answers a request and stops on `ray stop`'s signals (the preStop hook).
Run as another user (a hosted CI runner), it holds no capability anyway and keeps no_new_privs. The
RuntimeDefault seccomp profile is not reproduced here (setpriv applies none): Ray makes no system call
that containerd's default profile blocks, which only a real node can show.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.loopback import free_port
from tests.ray_local import OBJECT_STORE_BYTES

SETPRIV = shutil.which("setpriv")
pytestmark = pytest.mark.skipif(SETPRIV is None, reason="needs util-linux's setpriv (Debian and Ubuntu have it)")
ROOT = os.geteuid() == 0
# As root (the image's user, what the container runs) the bounding set is emptied too: root with no
# capability. Any other user (a hosted CI runner) holds none to begin with; no_new_privs applies either way.
NO_CAPABILITIES = [
    str(SETPRIV),
    "--no-new-privs",
    *(["--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all"] if ROOT else []),
]


def _capabilities(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cap") or line.startswith("NoNewPrivs"):
            name, value = line.split(":")
            fields[name] = int(value.strip(), 16) if name.startswith("Cap") else int(value.strip())
    return fields


def _ray_processes(temp_dir: Path) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(temp_dir) in cmdline and ("gcs_server" in cmdline or "raylet" in cmdline):
                pids.append(int(entry.name))
    return pids


def test_the_head_container_drops_every_capability() -> None:
    from k8s_constructs.ray_service import build_rayservice_chart
    from tests.conftest import settings_for

    ray_service = build_rayservice_chart(settings_for()).ray_service.to_json()
    (head,) = ray_service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"]
    assert head["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


@pytest.fixture(scope="module")
def head_without_capabilities() -> Iterator[tuple[str, Path, int]]:
    temp_dir = Path("/tmp") / f"rayhead{os.getpid()}"  # Ray's socket paths must stay short
    gcs_port, serve_port, dashboard_port = free_port(), free_port(), free_port()
    ray = str(Path(sys.executable).parent / "ray")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    start = [
        *NO_CAPABILITIES,
        ray,
        "start",
        "--head",
        f"--port={gcs_port}",
        "--num-cpus=0",
        "--num-gpus=0",
        "--node-ip-address=127.0.0.1",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard_port}",
        f"--object-store-memory={OBJECT_STORE_BYTES}",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
    ]
    started = subprocess.run(start, capture_output=True, text=True, timeout=120, env=env)
    assert started.returncode == 0, started.stderr[-2000:]
    try:
        yield f"127.0.0.1:{gcs_port}", temp_dir, serve_port
    finally:
        # Stopped as `ray stop --force` does (SIGKILL to each Ray process), with no capability either; not `ray stop`
        # itself: it signals every Ray process on the machine, and under xdist it killed the clusters of the test
        # running beside this one (the GCS proof then waited out its 300 s timeout).
        pids = _this_heads_processes(temp_dir, gcs_port)
        kill = [*NO_CAPABILITIES, "kill", "-KILL", *map(str, pids)]
        stopped = subprocess.run(kill, capture_output=True, text=True, timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.2)
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert pids and stopped.returncode == 0, stopped.stderr[-2000:]
        assert not [pid for pid in pids if _alive(pid)], "a process of the head outlived SIGKILL"


def _this_heads_processes(temp_dir: Path, gcs_port: int) -> list[int]:
    """The head's processes (its temp dir or GCS port in the command line) and their descendants (the workers)."""
    parents, found = {}, set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if str(temp_dir) in cmdline or re.search(rf":{gcs_port}\b", cmdline):  # the client server names the node's IP
            found.add(int(entry.name))
    while grown := {pid for pid, parent in parents.items() if parent in found} - found:
        found |= grown
    return sorted(found)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_a_head_with_no_capabilities_serves(head_without_capabilities: tuple[str, Path, int]) -> None:
    address, temp_dir, serve_port = head_without_capabilities
    # The control can fail: the head's own processes really run with no capability and no_new_privs.
    pids = _ray_processes(temp_dir)
    assert pids, "no gcs_server or raylet of this head found"
    for pid in pids:
        caps = _capabilities(pid)
        assert caps["CapEff"] == caps["CapPrm"] == 0 and caps["NoNewPrivs"] == 1, caps
        assert caps["CapBnd"] == 0 or not ROOT, caps

    import ray
    from ray import serve

    ray.init(address=address, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": serve_port})

        # Drained in 0.1 s loops at serve.shutdown (not 2 s): the head's serving is what this test shows.
        @serve.deployment(ray_actor_options={"num_cpus": 0}, graceful_shutdown_wait_loop_s=0.1)
        class Echo:
            def __call__(self, request: Any) -> str:
                return "ok"

        serve.run(Echo.bind(), route_prefix="/")  # type: ignore[attr-defined]
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{serve_port}/", timeout=5) as answer:
                    assert answer.read() == b"ok"
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        # The Serve controller and proxy are the head's children: no capability either.
        for pid in _ray_processes(temp_dir):
            assert _capabilities(pid)["CapEff"] == 0
    finally:
        serve.shutdown()
        ray.shutdown()
