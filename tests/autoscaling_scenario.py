"""A real Ray 2.58 cluster with Ray's own autoscaler (its fake multi-node provider), run by tests/test_autoscaling.py
in a process of its own: `python -m tests.autoscaling_scenario INPUT.json` prints one JSON line of observations.

INPUT holds the worker node types (as Ray's KubeRay code derives them from our RayCluster), each phase's
placement bundles (as Ray Serve LLM builds them from our LLMConfig) and autoscaling config (ours, with the
delays shortened), and a control bundle. The scenario: start the head (no CPU, as ours) with the autoscaler;
it launches each group's minimum; deploy a stand-in of each phase (no GPU, no vLLM: a deployment that waits a
while per request, on our placement bundles, with our graceful_shutdown_timeout_s); keep the decode phase busy;
record which nodes join and where the replicas run; start a few streams that outlive Ray Serve's default shutdown
timeout and stop the load, ask for a placement group with the control bundle, and wait for the cluster to shrink back
(it cannot while a node launched for the control is up); then collect the streams, including those of the replica
the scale-down removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.loopback import free_port
from tests.ray_local import OBJECT_STORE_BYTES

RAY = str(Path(sys.executable).parent / "ray")


def _fake_config(node_types: dict[str, Any], gcs_address: str, idle_timeout_minutes: float) -> dict[str, Any]:
    """The fake multi-node provider's cluster config (Ray's fake_multi_node/example.yaml) with our node types."""
    return {
        "cluster_name": "pd",
        "max_workers": sum(t["max_workers"] for t in node_types.values()),
        "provider": {
            "type": "fake_multinode",
            "use_node_id_as_ip": True,
            "disable_node_updaters": True,
            "disable_launch_config_check": True,
            "gcs_address": gcs_address,
        },
        "available_node_types": {
            "ray.head.default": {"resources": {}, "node_config": {}, "max_workers": 0},
            **node_types,
        },
        "head_node_type": "ray.head.default",
        "auth": {},
        "upscaling_speed": 1000,
        "idle_timeout_minutes": idle_timeout_minutes,
        "docker": {},
        "initialization_commands": [],
        "setup_commands": [],
        "head_setup_commands": [],
        "worker_setup_commands": [],
        "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
        "file_mounts": {},
        "cluster_synced_files": [],
        "file_mounts_sync_continuously": False,
        "rsync_exclude": [],
        "rsync_filter": [],
    }


def _kill_cluster(markers: list[str]) -> None:
    """Every process of this cluster only (its GCS port or temp dir in the command line): never `ray stop`,
    which would take other tests' Ray clusters with it."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(m in cmdline for m in markers):
            with contextlib.suppress(OSError):
                os.kill(int(entry.name), signal.SIGKILL)


def _worker_nodes(ray: Any, phase_resources: dict[str, str]) -> dict[str, str]:
    """node id -> phase of every alive worker node."""
    nodes = {}
    for node in ray.nodes():
        if not node["Alive"]:
            continue
        for phase, resource in phase_resources.items():
            if resource in node["Resources"]:
                nodes[node["NodeID"]] = phase
    return nodes


def _replicas(phase: str) -> dict[str, str]:
    """replica id -> node id of every alive replica of the phase (the actor's name ends with the replica's id), from the
    GCS's actor table (no dashboard: it would add seconds to the head's start)."""
    from ray._private import state

    actors = state.actors(actor_state_name="ALIVE").values()
    return {
        a["Name"].rsplit("#", 1)[-1]: a["Address"]["NodeID"]
        for a in actors
        if a["ActorClassName"].startswith(f"ServeReplica:{phase}:")
    }


def _replica_nodes(phase: str) -> list[str]:
    return list(_replicas(phase).values())


def _running(phase: str) -> int:
    """How many of the phase's replicas Serve's controller has RUNNING: those its routers send requests to."""
    from ray import serve
    from ray.serve._private.common import ReplicaState

    application = serve.status().applications.get(phase)
    deployment = application.deployments.get(phase) if application else None
    return deployment.replica_states.get(ReplicaState.RUNNING, 0) if deployment else 0


def _wait(what: str, check: Any, timeout: float, log: list[str]) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            log.append(f"{what} after {timeout - (deadline - time.monotonic()):.0f}s")
            return True
        time.sleep(0.5)
    log.append(f"{what}: not within {timeout:.0f}s")
    return False


def run(spec: dict[str, Any]) -> dict[str, Any]:
    temp_dir = tempfile.mkdtemp(prefix="rayas", dir="/tmp")  # Ray's socket paths must stay short
    port = free_port()
    gcs = f"127.0.0.1:{port}"
    config_file = Path(temp_dir) / "autoscaling.json"
    config_file.write_text(json.dumps(_fake_config(spec["node_types"], gcs, spec["idle_timeout_minutes"])))
    env = {**os.environ, "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    start = [
        RAY, "start", "--head", f"--port={port}", "--num-cpus=0", "--num-gpus=0", "--node-ip-address=127.0.0.1",
        "--include-dashboard=false", "--include-log-monitor=false", f"--object-store-memory={OBJECT_STORE_BYTES}",
        f"--temp-dir={temp_dir}", f"--autoscaling-config={config_file}", "--disable-usage-stats",
    ]  # fmt: skip
    subprocess.run(start, check=True, capture_output=True, env=env, timeout=120)
    log: list[str] = []
    observed: dict[str, Any] = {"log": log}
    phases: dict[str, str] = spec["phase_resources"]
    try:
        import ray
        from ray import serve

        ray.init(address=gcs, log_to_driver=False)
        expected_min, timeout = spec["min_nodes"], spec["timeout_s"]
        # Two `ray start`s by the autoscaler, at the test session's busiest: 3-24 s measured on 2 cores.
        _wait("minimum nodes up", lambda: sorted(_worker_nodes(ray, phases).values()) == expected_min, timeout, log)
        observed["nodes_at_start"] = sorted(_worker_nodes(ray, phases).values())
        serve.start(http_options={"location": "NoServer"})

        apps = {}
        for phase, stand_in in spec["phases"].items():
            draining = (
                {"graceful_shutdown_timeout_s": stand_in["graceful_shutdown_timeout_s"]}
                if stand_in.get("graceful_shutdown_timeout_s")
                else {}
            )

            @serve.deployment(
                name=phase,
                ray_actor_options={"num_cpus": 0},
                placement_group_bundles=stand_in["bundles"],
                placement_group_strategy=stand_in["strategy"],
                autoscaling_config=stand_in["autoscaling_config"],
                max_ongoing_requests=1000,
                # Ray Serve's drain looks for requests every graceful_shutdown_wait_loop_s (2 s; not set by ours):
                # the removed replica leaves as soon as its streams have ended, up to ours timeout as before.
                graceful_shutdown_wait_loop_s=0.1,
                **draining,
            )
            class Engine:
                async def __call__(self) -> str:
                    import asyncio

                    await asyncio.sleep(2)
                    return "token"

                async def stream(self, seconds: int) -> Any:
                    """A long response: the replica's id, then one token a second."""
                    import asyncio

                    yield serve.get_replica_context().replica_id.unique_id
                    for _ in range(seconds):
                        await asyncio.sleep(1)
                        yield "token"

            apps[phase] = serve.run(Engine.bind(), name=phase, route_prefix=None)
        _wait("one replica per phase", lambda: all(len(_replica_nodes(p)) == 1 for p in phases), 90, log)
        # The ingress as the serve config deploys it (ingress_deployment_config): its replicas reserve no CPU, so
        # none of them keeps a GPU node the autoscaler adds from going idle.
        ingress_options = spec["ingress"]

        @serve.deployment(name="ingress", **ingress_options)
        class Ingress:
            def __call__(self) -> str:
                return "ok"

        serve.run(Ingress.bind(), name="ingress", route_prefix=None)
        _wait(
            "the ingress replicas", lambda: len(_replica_nodes("ingress")) == ingress_options["num_replicas"], 60, log
        )
        observed["ingress_replicas"] = len(_replica_nodes("ingress"))

        # Load on decode only: more requests in flight than its target_ongoing_requests.
        stop = threading.Event()
        handle = apps["decode"]

        def load() -> None:
            pending: list[Any] = []
            while not stop.is_set() or pending:
                while len(pending) < spec["decode_in_flight"] and not stop.is_set():
                    pending.append(handle.remote())
                with contextlib.suppress(Exception):  # a stand-in's answer: only the load matters
                    pending.pop(0).result(timeout_s=30)

        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        load_began, most = time.monotonic(), spec["phases"]["decode"]["autoscaling_config"]["max_replicas"]
        grown = _wait(f"decode scaled to {most} replicas", lambda: len(_replica_nodes("decode")) == most, timeout, log)
        observed["grew"], observed["grow_s"] = grown, round(time.monotonic() - load_began, 1)
        nodes = _worker_nodes(ray, phases)
        observed["nodes_under_load"] = sorted(nodes.values())
        observed["decode_replica_phases"] = sorted(nodes.get(n, "head") for n in _replica_nodes("decode"))
        observed["prefill_replicas_under_load"] = len(_replica_nodes("prefill"))
        # Streams longer than Ray Serve's default graceful_shutdown_timeout_s, started while the load still runs: both
        # replicas are up and busy, and the router spreads the streams over both. (Started after the load, on a loaded
        # machine the scale-down had begun by then and every stream went to the replica that stays.) Once the load
        # ends they are the only ongoing requests, fewer than the target, and the scale-down removes a decode replica
        # while they run.
        streams: list[list[tuple[float, str]]] = []  # each stream's chunks, with when each arrived
        readers: list[threading.Thread] = []

        def read(chunks: list[tuple[float, str]]) -> None:
            with contextlib.suppress(Exception):  # a cut stream ends early: what arrived is the observation
                for chunk in handle.options(stream=True, method_name="stream").remote(spec["stream_s"]):
                    chunks.append((time.monotonic(), chunk))

        def replica_ids() -> set[str]:
            return {chunks[0][1] for chunks in streams if chunks}

        # At least one stream on each replica, whichever is removed. The router chooses, and learns of the new replica
        # only once Serve's controller has it RUNNING: before that every stream goes to the first (a loaded CI machine
        # sent all 16 there in 1.6 s). So: wait for RUNNING, then add a stream a second, its first chunk naming its
        # replica, until both have one, within spread_s and no more streams than the target: more would keep both.
        observed["both_running"] = _wait(
            "both decode replicas running", lambda: _running("decode") == most, timeout, log
        )
        deadline = time.monotonic() + spec["spread_s"]
        while len(streams) < spec["streams"] or (
            len(replica_ids()) < most and len(streams) < spec["max_streams"] and time.monotonic() < deadline
        ):
            streams.append([])
            readers.append(threading.Thread(target=read, args=(streams[-1],), daemon=True))
            readers[-1].start()
            time.sleep(0.1 if len(streams) < spec["streams"] else 1)
        log.append(f"{len(streams)} streams on {len(replica_ids())} replica(s)")
        stop.set()
        loader.join(timeout=30)
        # The control, meanwhile: a bundle that also asks for Ray's accelerator_type resource, which a new node's
        # type lacks. If the autoscaler launched a node for it, the cluster could not return to its minimum.
        group, asked = ray.util.placement_group(spec["control_bundles"], strategy="STRICT_PACK"), time.monotonic()
        # When the scale-down began: the controller takes the replica out of RUNNING as it starts draining it.
        draining_from: list[float] = []

        def back_to_minimum() -> bool:
            if not draining_from and _running("decode") < most:
                draining_from.append(time.monotonic())
            return len(_replica_nodes("decode")) == 1 and sorted(_worker_nodes(ray, phases).values()) == expected_min

        shrunk = _wait("back to the minimum", back_to_minimum, timeout, log)
        observed["shrank"] = shrunk
        observed["nodes_after_load"] = sorted(_worker_nodes(ray, phases).values())
        observed["ingress_replicas_after_load"] = len(_replica_nodes("ingress"))
        for reader in readers:
            reader.join(timeout=spec["stream_s"] + 30)
        survivors = set(_replicas("decode"))
        observed["streams"] = [
            {
                "removed_replica": bool(chunks) and chunks[0][1] not in survivors,
                "tokens": len(chunks) - 1,
                # Tokens that arrived after the drain began (the stream's replica removed or not): more than Ray Serve's
                # default graceful_shutdown_timeout_s of them is a stream that default would have cut.
                "tokens_while_draining": sum(1 for at, _ in chunks[1:] if draining_from and at > draining_from[0]),
            }
            for chunks in streams
        ]
        # Pending for longer than the autoscaler took to add the decode node under load: time enough to have launched
        # one for it, had the bundle fit a node type.
        ready, _ = ray.wait([group.ready()], timeout=max(1.0, observed["grow_s"] + 5 - (time.monotonic() - asked)))
        observed["control_placed"] = bool(ready)
        observed["control_pending_s"] = round(time.monotonic() - asked)
        observed["control_nodes_added"] = len(_worker_nodes(ray, phases)) - len(expected_min)
        ray.util.remove_placement_group(group)
        # No serve.shutdown: it would drain every replica (seconds) of a cluster killed below, nothing read after it.
        ray.shutdown()
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        observed["error"] = traceback.format_exc()[-2000:]
        print(json.dumps(observed), flush=True)
        _stop(temp_dir, port)  # here: os._exit skips `finally`
        os._exit(1)  # not Ray's exit handlers: they would wait a minute for the GCS just killed
    _stop(temp_dir, port)
    return observed


def _stop(temp_dir: str, port: int) -> None:
    _kill_cluster([temp_dir, f"127.0.0.1:{port}", f"--gcs-address=127.0.0.1:{port}"])
    shutil.rmtree(temp_dir, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(run(json.loads(Path(sys.argv[1]).read_text()))))
