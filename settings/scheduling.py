"""Node labels and the GPU taint: set on the nodegroups (AWS side), selected and tolerated by the pods
(Kubernetes side). One definition for both."""

from __future__ import annotations

from typing import Final

SYSTEM_NODE_LABELS: Final = {"role": "system"}
GPU_NODE_LABELS: Final = {
    "role": "gpu-worker",
    # The NVIDIA device plugin chart's default node affinity selects nodes with this label (or NFD's).
    "nvidia.com/gpu.present": "true",
}
# Only pods that ask for GPUs land on the GPU nodes: CoreDNS and the like stay on the system nodes.
GPU_TAINT_KEY: Final = "nvidia.com/gpu"
GPU_TAINT_VALUE: Final = "true"


def gpu_toleration() -> dict[str, str]:
    return {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
