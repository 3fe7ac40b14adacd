"""Node facts both sides rely on: labels and the GPU taint (set on the nodegroups, selected and tolerated
by the pods) and where the GPU nodes mount their local NVMe. One definition for both."""

from __future__ import annotations

from typing import Final

SYSTEM_NODE_LABELS: Final = {"role": "system"}
GPU_NODE_LABELS: Final = {
    "role": "gpu-worker",
    # The NVIDIA device plugin chart's default node affinity selects nodes with this label (or NFD's).
    "nvidia.com/gpu.present": "true",
}
# The Cluster Autoscaler's GPU label on AWS (cloudprovider/aws/aws_cloud_provider.go's GPULabel): a node with it is a
# GPU node before its GPUs are allocatable. Only an autoscaled GPU nodegroup carries it.
AUTOSCALER_GPU_LABEL: Final = "k8s.amazonaws.com/accelerator"
# Only pods that ask for GPUs land on the GPU nodes: CoreDNS and the like stay on the system nodes.
GPU_TAINT_KEY: Final = "nvidia.com/gpu"
GPU_TAINT_VALUE: Final = "true"


# nodeadm's RAID0 local-storage strategy (the GPU launch template asks for it) assembles the instance-store
# disks into one array and mounts it here; the pods keep their model cache on it.
LOCAL_NVME_MOUNT: Final = "/mnt/k8s-disks/0"


def gpu_toleration() -> dict[str, str]:
    return {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
