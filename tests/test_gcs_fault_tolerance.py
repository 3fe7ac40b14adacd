"""GCS fault tolerance (GCS_FAULT_TOLERANCE=redis), proved on a real Ray 2.58 head and worker against a real Redis
server with TLS and a password (Debian's redis-server on 127.0.0.1; `.ci/run` installs it), in the form the
RayService gives them: KubeRay's rediss:// RAY_REDIS_ADDRESS, the password, RAY_REDIS_CA_CERT. The proof's whole run
(tests/gcs_ft_proof.py: the server, both clusters at once, the store's keys) starts with the session, in the
background (tests/conftest.py BACKGROUND); the test reads what it printed.

The head's GCS is killed (and the head's Serve proxy with it): with fault tolerance the worker keeps its replica
and its proxy answers every request of the outage, and after the GCS restarts the application is still there;
without it the worker's raylet gives up after its reconnect timeout and the replica is gone.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from k8s_constructs import gcs_ft
from tests.conftest import GCS_PROOF, scenario_result

PASSWORD = "local-test-password-not-a-secret"
NAMESPACE = "pd-test"
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


def scenario_spec() -> dict[str, Any]:
    """The proof's input (tests/gcs_ft_proof.py): the password, the outage, and each cluster's environment as the
    RayService gives it (the store's address and CA are the proof's own server's)."""
    assert REDIS is not None, "redis-server is not installed: .ci/run installs it (apt-get install redis-server)"
    return {
        "password": PASSWORD,
        "outage_s": OUTAGE_S,
        "namespace": NAMESPACE,
        # With the store, the worker's reconnect timeout KubeRay 1.7 sets (600 s); without it Ray's default (60 s),
        # shorter here so that the control shows its end within the test.
        "store_env": {
            "RAY_external_storage_namespace": NAMESPACE,
            gcs_ft.KUBERAY_WORKER_RECONNECT_ENV: str(gcs_ft.KUBERAY_WORKER_RECONNECT_TIMEOUT_S),
        },
        "control_env": {gcs_ft.KUBERAY_WORKER_RECONNECT_ENV: str(CONTROL_RECONNECT_S)},
    }


def test_the_worker_serves_through_a_gcs_outage_with_the_store_and_not_without(tmp_path: Path) -> None:
    proof = scenario_result(GCS_PROOF, scenario_spec(), tmp_path / "spec.json")
    seen, lost = proof["with_store"], proof["without"]
    shown = json.dumps(proof)
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
    assert proof["store_keys"] > 0, "no GCS key under the storage namespace in the store"
