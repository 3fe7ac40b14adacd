"""GCS fault tolerance (GCS_FAULT_TOLERANCE=redis), proved on a real Ray 2.58 head and worker against a real Redis
server with TLS and a password (Debian's redis-server, started here on 127.0.0.1; `.ci/run` installs it), in the
form the RayService gives them: KubeRay's rediss:// RAY_REDIS_ADDRESS, the password, RAY_REDIS_CA_CERT.

The head's GCS is killed (and the head's Serve proxy with it): with fault tolerance the worker keeps its replica
and its proxy answers every request of the outage, and after the GCS restarts the application is still there;
without it the worker's raylet gives up after its reconnect timeout and the replica is gone.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from k8s_constructs import gcs_ft
from tests.conftest import run_scenario
from tests.loopback import free_port

PASSWORD = "local-test-password-not-a-secret"
# The control's worker raylet gives up on the GCS this long after it is killed (then its proxy dies with it: about a
# second later, seen on 2 cores), and the outage lasts long enough after that for the last 10 requests (0.2 s apart, a
# refused one returns at once) to find no proxy, with seconds to spare on a loaded machine; the store's worker keeps
# answering through the same outage.
CONTROL_RECONNECT_S = 3
OUTAGE_S = 8
REDIS = shutil.which("redis-server")
# In CI the server is installed by .ci/run: there the test must run, not skip.
pytestmark = pytest.mark.skipif(
    REDIS is None and os.environ.get("CI") != "true",
    reason="redis-server is not installed (.ci/run installs it: apt-get install redis-server)",
)


def _tls_files(directory: Path) -> dict[str, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it (openssl), as ElastiCache's chain to Amazon's roots."""
    files = {name: directory / f"{name}.pem" for name in ("ca", "ca-key", "server", "server-key")}
    run = lambda *args: subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)  # noqa: E731
    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=test CA",
        "-keyout",
        str(files["ca-key"]),
        "-out",
        str(files["ca"]),
    )
    csr = directory / "server.csr"
    run(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        str(files["server-key"]),
        "-out",
        str(csr),
    )
    ext = directory / "san.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(files["ca"]),
        "-CAkey",
        str(files["ca-key"]),
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        str(ext),
        "-out",
        str(files["server"]),
    )
    return files


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    assert REDIS is not None, "redis-server is not installed: .ci/run installs it (apt-get install redis-server)"
    directory = tmp_path_factory.mktemp("redis")
    files = _tls_files(directory)
    port = free_port()
    server = subprocess.Popen(
        [
            REDIS, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--requirepass", PASSWORD,
            "--tls-cert-file", str(files["server"]), "--tls-key-file", str(files["server-key"]),
            "--tls-ca-cert-file", str(files["ca"]),
            "--tls-auth-clients", "no", "--save", "", "--appendonly", "no", "--dir", str(directory),
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    try:
        yield f"rediss://127.0.0.1:{port}", files["ca"]
    finally:
        server.kill()
        server.wait(timeout=10)


# What Ray 2.58 raises when a node it starts has not registered with the GCS within 30 s (ray/_private/node.py).
RAY_START_TIMED_OUT = "The current node timed out during startup"


def _scenario(tmp_path: Path, name: str, spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    for attempt in (1, 2):
        try:
            return run_scenario(
                "tests.gcs_ft_scenario",
                spec,
                tmp_path / f"{name}.json",
                timeout=300,
                env={"RAY_USAGE_STATS_ENABLED": "0", **env},
            )
        except (subprocess.TimeoutExpired, AssertionError) as error:
            if attempt == 2 or (isinstance(error, AssertionError) and RAY_START_TIMED_OUT not in str(error)):
                raise
            # A hang or a start that Ray gave up on, not a failed observation: on a loaded 2-core machine the scenario
            # has hung once in about ten runs (the process waiting on Ray, no CPU used, in a fresh-clone CI run on
            # 2026-12-01), and a node missed Ray's own 30 s to register (ray/_private/node.py, not configurable) with
            # the suite run beside three busy loops. Once more, on fresh ports and a fresh store namespace; every
            # assertion below holds for the second run as for the first.
            spec = {**spec, "serve_port": free_port()}
            if "RAY_external_storage_namespace" in env:
                env = {**env, "RAY_external_storage_namespace": env["RAY_external_storage_namespace"] + "-again"}
    raise AssertionError("unreachable")


def test_the_worker_serves_through_a_gcs_outage_with_the_store_and_not_without(
    tls_redis: tuple[str, Path], tmp_path: Path
) -> None:
    address, ca = tls_redis
    # With the store, the worker's reconnect timeout KubeRay 1.7 sets (600 s); without it Ray's default (60 s), shorter
    # here so that the control shows its end within the test.
    store = {
        "RAY_REDIS_ADDRESS": address,
        "RAY_REDIS_CA_CERT": str(ca),
        "RAY_external_storage_namespace": "pd-test",
        gcs_ft.KUBERAY_WORKER_RECONNECT_ENV: str(gcs_ft.KUBERAY_WORKER_RECONNECT_TIMEOUT_S),
    }
    control = {gcs_ft.KUBERAY_WORKER_RECONNECT_ENV: str(CONTROL_RECONNECT_S)}
    with ThreadPoolExecutor(2) as pool:  # both at once: each is mostly waiting
        with_store = pool.submit(
            _scenario,
            tmp_path,
            "ft",
            {"serve_port": free_port(), "outage_s": OUTAGE_S, "restart": True, "redis_password": PASSWORD},
            store,
        )
        control_spec = {"serve_port": free_port(), "outage_s": OUTAGE_S, "restart": False}
        without = pool.submit(_scenario, tmp_path, "control", control_spec, control)
        seen, lost = with_store.result(), without.result()
    shown = json.dumps({"with_store": seen, "without": lost})
    print(shown)
    for result in (seen, lost):
        assert result["replica_on_worker"] and result["proxies"] == 2 and result["before"], shown
    # The store: the worker's proxy alone on the port, every request of the outage answered; the application
    # still there after.
    assert seen["listeners_in_outage"] == seen["worker_proxy_pids"] and len(seen["worker_proxy_pids"]) == 1, shown
    assert seen["outage_requests"] >= 10 and seen["outage_ok"] == seen["outage_requests"], shown
    assert seen["after_restart_status"] == "RUNNING" and seen["after_restart"] and seen["worker_alive"], shown
    # Without it: once the worker's raylet gives up on the GCS (CONTROL_RECONNECT_S), its replica and proxy are gone.
    assert lost["outage_ok_at_the_end"] == 0, shown
    # And the state was in the TLS store, under the namespace, written with the password.
    keys = subprocess.run(
        [
            "redis-cli", "--tls", "--cacert", str(ca), "-h", "127.0.0.1", "-p", address.rsplit(":", 1)[1],
            "--no-auth-warning", "-a", PASSWORD, "--scan", "--pattern", "*pd-test*",
        ],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert keys.stdout.split(), "no GCS key under the storage namespace in the store"
