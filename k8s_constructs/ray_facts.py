"""What KubeRay and Ray fix about the pods, in one place: their ports and the labels KubeRay sets.

Read by the RayService (the head's ports), the NetworkPolicies, the observability scraper and the
post-deploy tools, so a port or a label is never written twice.
"""

from __future__ import annotations

from typing import Final

GCS_PORT: Final = 6379
DASHBOARD_PORT: Final = 8265
SERVE_PORT: Final = 8000
METRICS_PORT: Final = 8080  # KubeRay adds it to every Ray container, named METRICS_PORT_NAME
METRICS_PORT_NAME: Final = "metrics"

# Our container names in the head and worker pods.
HEAD_CONTAINER: Final = "ray-head"
WORKER_CONTAINER: Final = "ray-worker"

# Labels KubeRay puts on the pods of a RayCluster (not ray.io/cluster: under a RayService the cluster name
# has a random suffix that changes with every re-create).
RAY_NODE_LABEL: Final = ("ray.io/is-ray-node", "yes")
NODE_TYPE_LABEL: Final = "ray.io/node-type"  # "head" or "worker"
GROUP_LABEL: Final = "ray.io/group"  # "headgroup", or the worker group's name: "prefill", "decode"


# Labels the managed metrics collector (OBSERVABILITY=on) puts on every Ray series, read by the dashboard,
# the alarm and `make verify`: the cluster (the CloudWatch dataset is shared by the account and Region;
# a name apart from the cluster attributes the collector adds by itself) and KubeRay's group of the pod.
METRICS_CLUSTER_LABEL: Final = "eks_cluster"
METRICS_PHASE_LABEL: Final = "ray_group"
# A gauge every vLLM engine reports from its start (Ray exports vLLM's `vllm:*` metrics as `ray_vllm_*`):
# a dashboard panel, and what `make verify` asks CloudWatch for to see that metrics arrive.
ENGINE_REQUESTS_RUNNING: Final = "ray_vllm_num_requests_running"


def worker_service_account(ray_service_name: str) -> str:
    """The GPU workers' ServiceAccount, bound to their EKS Pod Identity role (the Hub token, the S3 weights)."""
    return f"{ray_service_name}-worker"


def selector(key: str, value: str) -> str:
    """A kubectl label selector."""
    return f"{key}={value}"


# The NIXL lines of the Ray logs, read by `make verify` / `make verify-efa` (kubectl exec grep in each worker) and by
# the one-host GPU check (tools/local_check) in its local session: one reader, so both judge the same lines.
RAY_LOG_DIR: Final = "/tmp/ray/session_latest/logs"
# What libfabric says when it cannot register the KV cache's GPU memory with the EFA device: on types without
# GPUDirect RDMA (g6, g6e) NIXL 1.3.1's efa fabric may copy through bounce buffers, or fail with these.
MEMORY_REGISTRATION_FAILURES: Final = ("fi_mr_reg failed", "Unable to register MR")
NIXL_LOG_PATTERN: Final = "|".join(("Backend [A-Z]+ was instantiated", *MEMORY_REGISTRATION_FAILURES))


def backend_of(log_lines: str) -> str:
    """LIBFABRIC, UCX, both or none: which NIXL backends a worker's logs say it instantiated; with a
    failed GPU memory registration, said after the backend (then it is not a working LIBFABRIC)."""
    lines = log_lines.splitlines()
    found = sorted(
        {line.split("Backend ", 1)[1].split()[0] for line in lines if "Backend " in line and "was instantiated" in line}
    )
    backend = "+".join(found) or "none"
    failures = sorted({marker for line in lines for marker in MEMORY_REGISTRATION_FAILURES if marker in line})
    return f"{backend}, GPU memory registration failed ({'; '.join(failures)})" if failures else backend
