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
