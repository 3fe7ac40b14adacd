"""The local Ray cluster of the one-host check: a head and one raylet per worker pod of the RayCluster, each with
the pods' environment (what a host lacks replaced, each named), its GPUs and its group's resources."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tools.local_check.shape import Change, Host, cluster_shape, gpu_assignment
from tools.local_check.transfer import (
    NIXL_PORT_ENV,
    NIXL_TELEMETRY_ENV,
    RAY_DEFAULT_REPORT_INTERVAL_MS,
    REPORT_INTERVAL_MS,
)

# vLLM 0.26's Ray executor takes its torch.distributed store's port from a 32-port window at
# VLLM_DP_MASTER_PORT + 100 (v1/executor/ray_executor_v2.py _select_tcpstore_port; config/parallel.py reads the
# variable without data parallelism, default 0: the "port: 100" of the EADDRINUSE seen on the H200). Each node's
# engines get a window of their own.
DP_MASTER_PORT_BASE = 31000
DP_MASTER_PORT_STEP = 1000


def worker_env(rayservice: dict[str, Any], cache: Path) -> tuple[dict[str, str], list[Change]]:
    """The GPU worker container's environment as the raylets' (the engines inherit it); what a pod has and a host
    does not (the pod's IP, paths on the node's model cache) replaced, each named."""
    groups = rayservice["spec"]["rayClusterConfig"].get("workerGroupSpecs", [])
    env: dict[str, str] = {}
    changes: list[Change] = []
    for group in groups:
        for item in group["template"]["spec"]["containers"][0].get("env", []):
            if "value" in item:
                env[item["name"]] = str(item["value"])
            elif item["name"] == "VLLM_HOST_IP":
                env["VLLM_HOST_IP"] = "127.0.0.1"
                if not any(c.what == "env VLLM_HOST_IP" for c in changes):
                    changes.append(
                        Change("env VLLM_HOST_IP", "the pod's IP", "127.0.0.1", "every Ray node is on this host")
                    )
    node_cache = env.get("HF_HOME")
    if node_cache:
        for name, value in sorted(env.items()):
            if value == node_cache or value.startswith(node_cache + "/"):
                here = str(cache) + value[len(node_cache) :]
                changes.append(Change(f"env {name}", value, here, "a path on the GPU node's model cache"))
                env[name] = here
    return env, changes


# What the check adds to every process of the local cluster, each named in the report, so that it can read the
# engines' transfer statistics after each request: Ray's metrics pushed to the nodes' agents once a second (Ray's
# fastest) instead of every 10 s (Ray reads RAY_<name>), and NIXL's own exporter of its byte counters, on a port of
# each node's.
RAY_ENV = {"RAY_metrics_report_interval_ms": str(REPORT_INTERVAL_MS)}
CLUSTER_ENV = {**RAY_ENV, **NIXL_TELEMETRY_ENV}
NIXL_PORT_BASE = 30090  # between Ray Serve LLM's NIXL side channels (20000, 22000) and the DP master windows
RAY_CHANGES = [
    Change(
        "Ray metrics_report_interval_ms",
        f"{RAY_DEFAULT_REPORT_INTERVAL_MS} (Ray's default)",
        REPORT_INTERVAL_MS,
        "the check reads vLLM's transfer statistics from the nodes' metrics agents after each request",
    )
]
CLUSTER_CHANGES = [
    *RAY_CHANGES,
    Change(
        "env NIXL_TELEMETRY_ENABLE, NIXL_TELEMETRY_EXPORTER, NIXL_TELEMETRY_PROMETHEUS_PORT/_LOCAL",
        "unset",
        f"y, prometheus, {NIXL_PORT_BASE}+node on 127.0.0.1",
        "NIXL's own byte counters, exact, which the check reads after each request (vLLM's bytes reach it only"
        " as bucket midpoints)",
    ),
]


class LocalCluster:
    """A head and one raylet per worker pod on this host (ray.cluster_utils.Cluster), each GPU node with its
    CUDA_VISIBLE_DEVICES, the group's custom resources and KubeRay's node-group label."""

    def __init__(
        self,
        plan: dict[str, Any],
        host: Host,
        extra_resources: dict[str, float],
        env: dict[str, str],
        *,
        nixl_exporter: bool = True,
        nixl_port_base: int = NIXL_PORT_BASE,
    ) -> None:
        from ray.cluster_utils import Cluster

        shape = cluster_shape(plan["rayservice"])
        self.assignment, self.shared_gpu = gpu_assignment(shape, host.gpus)
        self.nixl_ports: dict[str, int] = {}  # Ray node id -> the port of NIXL's exporter on that node
        saved = dict(os.environ)
        try:
            visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v]
            os.environ.update(env)
            os.environ.update(CLUSTER_ENV if nixl_exporter else RAY_ENV)
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            self.cluster = Cluster(
                initialize_head=True,
                head_node_args={
                    "num_cpus": shape.head.num_cpus,
                    "num_gpus": shape.head.num_gpus,
                    "labels": shape.head.labels,
                    "include_dashboard": False,
                },
            )
            for number, (node, gpus) in enumerate(zip(shape.workers, self.assignment, strict=True)):
                # The host's GPU ids through the user's CUDA_VISIBLE_DEVICES, when one was given.
                os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(visible[g] if visible else str(g) for g in gpus)
                # Each pod has its own IP; on one host two engines starting at once took the same port.
                os.environ["VLLM_DP_MASTER_PORT"] = str(DP_MASTER_PORT_BASE + DP_MASTER_PORT_STEP * number)
                if nixl_exporter:
                    os.environ[NIXL_PORT_ENV] = str(nixl_port_base + number)
                added = self.cluster.add_node(
                    num_cpus=node.num_cpus,
                    num_gpus=node.num_gpus,
                    resources={**node.resources, **extra_resources},
                    labels=node.labels,
                )
                if nixl_exporter:
                    self.nixl_ports[added.node_id] = nixl_port_base + number
            self.cluster.wait_for_nodes()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        self.shape = shape

    @property
    def address(self) -> str:
        address: str = self.cluster.address
        return address

    def nixl_url(self, node_id: str) -> str | None:
        """NIXL's exporter on a Ray node (the decode engine's: its agent counts what it reads)."""
        port = self.nixl_ports.get(node_id)
        return f"http://127.0.0.1:{port}/metrics" if port else None

    def log_dir(self) -> Path:
        return Path(self.cluster.head_node.get_session_dir_path()) / "logs"

    def shutdown(self) -> None:
        self.cluster.shutdown()
