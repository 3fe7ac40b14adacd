"""What the stacks derive from an EC2 instance type, from one place.

A built-in table covers the common EFA GPU types and the usual x86 system node types, so the default
synth needs no AWS call. Any other type is described once with boto3 (`make lookup`) and the answer is
cached in cdk.context.json under ``instance_type_context_key(name)``, the way CDK caches its own look-ups.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

INSTANCE_TYPE_PATTERN = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$")

# On-Demand vCPU quotas of EC2 (Service Quotas code, name): what a GPU or system type counts against.
P_QUOTA = ("L-417A185B", "Running On-Demand P instances")
G_QUOTA = ("L-DB2E81BA", "Running On-Demand G and VT instances")
STANDARD_QUOTA = ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances")
# Families whose first letter matches a quota class above but that have quotas of their own
# (Inf, Trn, DL, HPC, Mac): without this, inf2 would count as "i" and trn1 as "t".
_OWN_QUOTA_PREFIXES = ("inf", "trn", "dl", "hpc", "mac")
_STANDARD_PREFIXES = ("a", "c", "d", "h", "i", "m", "r", "t", "z")


def on_demand_quota_of(instance_type: str) -> tuple[str, str] | None:
    """(Service Quotas code, name) of the On-Demand vCPU quota a type counts against, if one of the three above."""
    family = instance_type.split(".", 1)[0]
    if family.startswith(_OWN_QUOTA_PREFIXES):
        return None
    if family.startswith(("g", "vt")):
        return G_QUOTA
    if family.startswith("p"):
        return P_QUOTA
    if family.startswith(_STANDARD_PREFIXES):
        return STANDARD_QUOTA
    return None  # x, u-, f, ...: quotas of their own


@dataclass(frozen=True)
class InstanceFacts:
    """Facts about one EC2 instance type (x86_64 only: the AMIs we use are x86_64)."""

    name: str
    vcpus: int
    memory_mib: int
    gpus: int = 0
    gpu_model: str = ""
    gpu_memory_mib: int = 0  # per GPU
    network_cards: int = 1  # one EFA interface per network card
    efa_supported: bool = False
    local_nvme_gb: int = 0  # total instance store; 0 = none
    architecture: str = "x86_64"
    network_gbps: float = 0.0  # EC2's NetworkPerformance ("4x 100 Gigabit": 400); 0 = not known

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def efa_interfaces(self) -> int:
        return self.network_cards if self.efa_supported else 0

    @property
    def on_demand_quota(self) -> tuple[str, str]:
        """(Service Quotas code, name) of the On-Demand vCPU quota this type counts against."""
        # Families with quotas of their own are neither GPU nor system types this project accepts.
        return on_demand_quota_of(self.name) or STANDARD_QUOTA

    def to_context(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_context(value: Mapping[str, Any]) -> InstanceFacts:
        return InstanceFacts(**{k: value[k] for k in InstanceFacts.__dataclass_fields__ if k in value})

    @staticmethod
    def from_describe_instance_types(item: Mapping[str, Any]) -> InstanceFacts:
        """Build facts from one element of ec2:DescribeInstanceTypes' ``InstanceTypes``."""
        gpu_info = item.get("GpuInfo", {}).get("Gpus", [])
        gpus = sum(int(g.get("Count", 0)) for g in gpu_info)
        network = item.get("NetworkInfo", {})
        storage = item.get("InstanceStorageInfo", {})
        archs = item.get("ProcessorInfo", {}).get("SupportedArchitectures", ["x86_64"])
        return InstanceFacts(
            name=str(item["InstanceType"]),
            vcpus=int(item["VCpuInfo"]["DefaultVCpus"]),
            memory_mib=int(item["MemoryInfo"]["SizeInMiB"]),
            gpus=gpus,
            gpu_model=str(gpu_info[0].get("Name", "")) if gpu_info else "",
            gpu_memory_mib=int(gpu_info[0].get("MemoryInfo", {}).get("SizeInMiB", 0)) if gpu_info else 0,
            network_cards=int(network.get("MaximumNetworkCards", 1)),
            efa_supported=bool(network.get("EfaSupported", False)),
            local_nvme_gb=(
                int(storage.get("TotalSizeInGB", 0)) if storage.get("NvmeSupport") in ("required", "supported") else 0
            ),
            architecture="x86_64" if "x86_64" in archs else str(archs[0]),
            network_gbps=network_gbps(str(network.get("NetworkPerformance", ""))),
        )


_NETWORK_PERFORMANCE = re.compile(r"(?:(\d+)x\s*)?(\d+(?:\.\d+)?)\s*Gigabit")


def network_gbps(performance: str) -> float:
    """EC2's NetworkPerformance in Gbps: "25 Gigabit", "Up to 25 Gigabit" (its peak), "4x 100 Gigabit"; 0 if not."""
    found = _NETWORK_PERFORMANCE.search(performance)
    return int(found.group(1) or 1) * float(found.group(2)) if found else 0.0


def instance_type_context_key(name: str) -> str:
    """The cdk.context.json key under which a looked-up type's facts are cached."""
    return f"ray-llm:instance-type:{name}"


def _gpu(
    name: str, vcpus: int, memory_gib: int, gpus: int, model: str, gpu_mib: int, cards: int, nvme_gb: int, gbps: int
) -> InstanceFacts:
    return InstanceFacts(
        name=name,
        vcpus=vcpus,
        memory_mib=memory_gib * 1024,
        gpus=gpus,
        gpu_model=model,
        gpu_memory_mib=gpu_mib,
        network_cards=cards,
        efa_supported=True,
        local_nvme_gb=nvme_gb,
        network_gbps=float(gbps),
    )


# EFA-capable NVIDIA GPU types, in the figures of EC2's DescribeInstanceTypes (what `make lookup` caches for other
# types, so a built-in type and a looked-up one read alike): a GPU's memory as EC2 reports it (an L4's "24 GB" is
# 22,888 MiB there), the instance store's total. tests/test_instance_facts.py holds each row against moto's copy of
# that data. The last column is the network's Gbps (the KV transfer's link, beside `make verify`'s figure).
_L4, _A10G, _L40S, _A100, _H100 = 22888, 22888, 45776, 40960, 81920
_GPU_TYPES: tuple[InstanceFacts, ...] = (
    _gpu("g5.8xlarge", 32, 128, 1, "A10G", _A10G, 1, 900, 25),
    _gpu("g5.12xlarge", 48, 192, 4, "A10G", _A10G, 1, 3800, 40),
    _gpu("g5.16xlarge", 64, 256, 1, "A10G", _A10G, 1, 1900, 25),
    _gpu("g5.24xlarge", 96, 384, 4, "A10G", _A10G, 1, 3800, 50),
    _gpu("g5.48xlarge", 192, 768, 8, "A10G", _A10G, 1, 7600, 100),
    _gpu("g6.8xlarge", 32, 128, 1, "L4", _L4, 1, 900, 25),
    _gpu("g6.12xlarge", 48, 192, 4, "L4", _L4, 1, 3760, 40),
    _gpu("g6.16xlarge", 64, 256, 1, "L4", _L4, 1, 1880, 25),
    _gpu("g6.24xlarge", 96, 384, 4, "L4", _L4, 1, 3760, 50),
    _gpu("g6.48xlarge", 192, 768, 8, "L4", _L4, 1, 7520, 100),
    _gpu("g6e.8xlarge", 32, 256, 1, "L40S", _L40S, 1, 900, 25),
    _gpu("g6e.12xlarge", 48, 384, 4, "L40S", _L40S, 1, 3800, 100),
    _gpu("g6e.16xlarge", 64, 512, 1, "L40S", _L40S, 1, 1900, 35),
    _gpu("g6e.24xlarge", 96, 768, 4, "L40S", _L40S, 2, 3800, 200),
    _gpu("g6e.48xlarge", 192, 1536, 8, "L40S", _L40S, 4, 7600, 400),
    _gpu("p4d.24xlarge", 96, 1152, 8, "A100", _A100, 4, 8000, 400),
    _gpu("p5.48xlarge", 192, 2048, 8, "H100", _H100, 32, 30400, 3200),
)

# General-purpose, compute and memory x86 families for the system nodes: vCPUs follow the size and
# memory is a fixed GiB-per-vCPU ratio in each of these families.
_CPU_FAMILIES: dict[str, int] = {
    "m5": 4, "m6i": 4, "m6a": 4, "m7i": 4, "m7a": 4,
    "c5": 2, "c6i": 2, "c6a": 2, "c7i": 2, "c7a": 2,
    "r5": 8, "r6i": 8, "r6a": 8, "r7i": 8, "r7a": 8,
}  # fmt: skip
_CPU_SIZES: dict[str, int] = {
    "large": 2,
    "xlarge": 4,
    "2xlarge": 8,
    "4xlarge": 16,
    "8xlarge": 32,
    "12xlarge": 48,
    "16xlarge": 64,
}


# c5 predates the 8xlarge/16xlarge sizes: it has 9xlarge (36 vCPUs) and 18xlarge (72) instead.
_FAMILY_SIZES: dict[str, dict[str, int]] = {
    "c5": {**{k: v for k, v in _CPU_SIZES.items() if k not in ("8xlarge", "16xlarge")}, "9xlarge": 36}
}


def _cpu_types() -> tuple[InstanceFacts, ...]:
    return tuple(
        InstanceFacts(name=f"{family}.{size}", vcpus=vcpus, memory_mib=vcpus * gib_per_vcpu * 1024)
        for family, gib_per_vcpu in _CPU_FAMILIES.items()
        for size, vcpus in _FAMILY_SIZES.get(family, _CPU_SIZES).items()
    )


BUILT_IN: Mapping[str, InstanceFacts] = {facts.name: facts for facts in (*_GPU_TYPES, *_cpu_types())}
BUILT_IN_GPU_TYPES: tuple[str, ...] = tuple(facts.name for facts in _GPU_TYPES)
