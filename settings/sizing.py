"""Pod resources derived from the instance facts, so that the pods fit the nodes' allocatable.

Allocatable follows the EKS AL2023 bootstrap: kube-reserved memory is 255 MiB + 11 MiB per pod
(max pods capped at 110 below 30 vCPU and 250 above), the hard eviction threshold is 100 MiB, and
kube-reserved CPU is 6% of the first core, 1% of the second, 0.5% of the next two and 0.25% above.
Kubelet starts from the memory the kernel reports, not the instance's nominal memory: the kernel keeps
a few percent (page tables, crash kernel, firmware), so we count only 92.5% of it, Karpenter's default.
"""

from __future__ import annotations

from dataclasses import dataclass

from settings.errors import SettingError
from settings.instance_types import InstanceFacts

# What the DaemonSets on every node ask for, with headroom (vpc-cni, kube-proxy, pod identity agent,
# and on GPU nodes the NVIDIA and EFA device plugins).
DAEMONSET_CPU_MILLI = 500
DAEMONSET_MEMORY_MIB = 1024
# OBSERVABILITY=on adds the amazon-cloudwatch-observability add-on's pods to every GPU node: the CloudWatch
# agent, the DCGM exporter and the log forwarder (DaemonSets), and possibly its controller, which tolerates
# every taint — about 840m CPU together. A whole core and a GiB more keep room for one more DaemonSet, so a
# worker never stays Pending behind them while CloudFormation reports success.
OBSERVABILITY_CPU_MILLI = 1000
OBSERVABILITY_MEMORY_MIB = 1024
# A GPU worker keeps the ~18 GiB checkpoint in the page cache (charged to its cgroup) beside vLLM's
# host memory and Ray's object store in /dev/shm: below this it would reload weights from disk.
MIN_WORKER_MEMORY_MIB = 48 * 1024
MIN_WORKER_CPU_MILLI = 4000
VM_MEMORY_OVERHEAD = 0.075

# The Ray head (CPU only) on a system node, as the reference sizes it for an m7i.xlarge.
HEAD_REQUEST_CPU_MILLI, HEAD_REQUEST_MEMORY_MIB = 2000, 8 * 1024
# PREFILL/DECODE_MAX_REPLICAS: the Ray autoscaler sidecar of the head pod (requests = limits) and the Cluster
# Autoscaler's pod, both on the system nodes.
AUTOSCALER_CPU_MILLI, AUTOSCALER_MEMORY_MIB = 500, 512
CLUSTER_AUTOSCALER_CPU_MILLI, CLUSTER_AUTOSCALER_MEMORY_MIB = 100, 600
HEAD_LIMIT_CPU_MILLI, HEAD_LIMIT_MEMORY_MIB = 3000, 12 * 1024
# The KubeRay operator and two CoreDNS replicas share the first system node with the head.
SYSTEM_PODS_CPU_MILLI, SYSTEM_PODS_MEMORY_MIB = 300, 768


# CPUs of each engine GPU bundle (the vLLM worker process). Ray Serve LLM adds the replica actor's
# default CPU to an engine's first bundle. What is left on a GPU worker must hold Ray Serve's ingress and
# the PD router: the head advertises no CPU, so they run on the GPU workers.
CPUS_PER_GPU_BUNDLE = 1
REPLICA_ACTOR_CPUS = 1
SERVE_CPU_HEADROOM = 2


@dataclass(frozen=True)
class Allocatable:
    cpu_milli: int
    memory_mib: int


def allocatable(instance: InstanceFacts) -> Allocatable:
    max_pods = 250 if instance.vcpus > 30 else 110
    memory = int(instance.memory_mib * (1 - VM_MEMORY_OVERHEAD)) - (255 + 11 * max_pods) - 100
    reserved_cpu = 60 + (10 if instance.vcpus > 1 else 0) + 5 * min(2, max(0, instance.vcpus - 2))
    reserved_cpu += int(2.5 * max(0, instance.vcpus - 4))
    return Allocatable(cpu_milli=instance.vcpus * 1000 - reserved_cpu, memory_mib=memory)


@dataclass(frozen=True)
class WorkerResources:
    cpu_milli: int
    memory_mib: int

    @property
    def cpu(self) -> str:
        return f"{self.cpu_milli // 1000}" if self.cpu_milli % 1000 == 0 else f"{self.cpu_milli}m"

    @property
    def memory(self) -> str:
        return f"{self.memory_mib // 1024}Gi" if self.memory_mib % 1024 == 0 else f"{self.memory_mib}Mi"


def gpu_worker_resources(instance: InstanceFacts, *, observability: bool) -> WorkerResources:
    """Requests = limits (Guaranteed QoS) for the one worker of a GPU node: the node's allocatable less
    the DaemonSets (and the observability add-on's pods when it is on), rounded down to whole cores and
    GiB. The memory limit is far above the checkpoint, so the page cache keeps the weights between
    restarts (on g6.8xlarge: ~145 s to ~2 s to load)."""
    node = allocatable(instance)
    extra_cpu, extra_memory = (OBSERVABILITY_CPU_MILLI, OBSERVABILITY_MEMORY_MIB) if observability else (0, 0)
    cpu = (node.cpu_milli - DAEMONSET_CPU_MILLI - extra_cpu) // 1000 * 1000
    memory = (node.memory_mib - DAEMONSET_MEMORY_MIB - extra_memory) // 1024 * 1024
    if cpu < MIN_WORKER_CPU_MILLI or memory < MIN_WORKER_MEMORY_MIB:
        raise SettingError(
            "GPU_NODE_TYPE",
            instance.name,
            f"a type whose allocatable leaves the Ray worker at least {MIN_WORKER_CPU_MILLI // 1000} vCPU and "
            f"{MIN_WORKER_MEMORY_MIB // 1024} GiB (it leaves {cpu // 1000} vCPU, {memory // 1024} GiB)",
        )
    return WorkerResources(cpu_milli=cpu, memory_mib=memory)


def check_head_fits(instance: InstanceFacts, *, observability: bool, autoscaling: bool = False) -> None:
    node = allocatable(instance)
    extra_cpu, extra_memory = (OBSERVABILITY_CPU_MILLI, OBSERVABILITY_MEMORY_MIB) if observability else (0, 0)
    if autoscaling:  # the Ray autoscaler beside the head, and the Cluster Autoscaler
        extra_cpu += AUTOSCALER_CPU_MILLI + CLUSTER_AUTOSCALER_CPU_MILLI
        extra_memory += AUTOSCALER_MEMORY_MIB + CLUSTER_AUTOSCALER_MEMORY_MIB
    free_cpu = node.cpu_milli - DAEMONSET_CPU_MILLI - SYSTEM_PODS_CPU_MILLI - extra_cpu
    free_memory = node.memory_mib - DAEMONSET_MEMORY_MIB - SYSTEM_PODS_MEMORY_MIB - extra_memory
    if free_cpu < HEAD_REQUEST_CPU_MILLI or free_memory < HEAD_REQUEST_MEMORY_MIB:
        raise SettingError(
            "SYSTEM_NODE_TYPE",
            instance.name,
            f"a type with room for the Ray head ({HEAD_REQUEST_CPU_MILLI // 1000} vCPU,"
            f" {HEAD_REQUEST_MEMORY_MIB // 1024} GiB) beside the operator and"
            f" CoreDNS{' and the observability add-on' if observability else ''}"
            f"{' and the autoscalers' if autoscaling else ''};"
            f" {instance.name} leaves {free_cpu}m CPU, {free_memory} MiB",
        )


def check_engine_cpus(
    instance: InstanceFacts, engines_per_node: int, tensor_parallel_size: int, *, observability: bool
) -> None:
    """The engines' bundles of a full GPU node must leave the ingress and router room on its worker."""
    worker_cpus = gpu_worker_resources(instance, observability=observability).cpu_milli // 1000
    bundles = engines_per_node * (tensor_parallel_size * CPUS_PER_GPU_BUNDLE + REPLICA_ACTOR_CPUS)
    if worker_cpus - bundles < SERVE_CPU_HEADROOM:
        raise SettingError(
            "GPU_NODE_TYPE",
            instance.name,
            f"a type whose Ray worker keeps {SERVE_CPU_HEADROOM} CPUs for Ray Serve's ingress and router beside the"
            f" engines' {bundles} ({worker_cpus} CPUs in all)",
        )
