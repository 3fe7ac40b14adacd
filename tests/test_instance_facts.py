"""The built-in instance facts (settings/instance_types.py) against AWS's own data: moto's copy of EC2's
DescribeInstanceTypes (moto/ec2/resources/instance_types.json.gz, the figures `make lookup` caches for other types).
Every built-in type exists, with its vCPUs and memory; a GPU type with its GPUs, their model and memory, its network
cards, EFA and instance store."""

from __future__ import annotations

import gzip
import json
import math
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from settings.instance_types import BUILT_IN, BUILT_IN_GPU_TYPES, InstanceFacts


@cache
def aws() -> dict[str, Any]:
    import moto

    with gzip.open(Path(moto.__file__).parent / "ec2/resources/instance_types.json.gz") as packed:
        data: dict[str, Any] = json.loads(packed.read())
    return data


def aws_facts(name: str) -> dict[str, Any]:
    entry = aws()[name]
    gpus = ((entry.get("GpuInfo") or {}).get("Gpus") or [{}])[0]
    network = entry.get("NetworkInfo", {})
    return {
        "vcpus": entry["VCpuInfo"]["DefaultVCpus"],
        "memory_mib": entry["MemoryInfo"]["SizeInMiB"],
        "gpus": gpus.get("Count", 0),
        "gpu_model": gpus.get("Name", ""),
        "gpu_memory_mib": (gpus.get("MemoryInfo") or {}).get("SizeInMiB", 0),
        "network_cards": network.get("MaximumNetworkCards", 1),
        "efa_supported": network.get("EfaSupported", False),
        "local_nvme_gb": (entry.get("InstanceStorageInfo") or {}).get("TotalSizeInGB", 0),
        "architecture": "x86_64" if "x86_64" in entry["ProcessorInfo"]["SupportedArchitectures"] else "other",
        # "25 Gigabit", "Up to 12.5 Gigabit", "4x 100 Gigabit": the figures multiplied
        "network_gbps": math.prod(float(n) for n in re.findall(r"[0-9.]+", network["NetworkPerformance"])),
    }


def ours(facts: InstanceFacts, fields: tuple[str, ...]) -> dict[str, Any]:
    return {field: getattr(facts, field) for field in fields}


CPU_FIELDS = ("vcpus", "memory_mib", "architecture")
GPU_FIELDS = (
    *CPU_FIELDS, "gpus", "gpu_model", "gpu_memory_mib", "network_cards", "efa_supported", "local_nvme_gb",
    "network_gbps",
)  # fmt: skip


def test_every_built_in_type_exists() -> None:
    assert sorted(name for name in BUILT_IN if name not in aws()) == []


@pytest.mark.parametrize("name", BUILT_IN_GPU_TYPES)
def test_each_gpu_type_is_as_aws_describes_it(name: str) -> None:
    expected = {k: v for k, v in aws_facts(name).items() if k in GPU_FIELDS}
    assert ours(BUILT_IN[name], GPU_FIELDS) == expected


def test_each_system_type_is_as_aws_describes_it() -> None:
    wrong = {
        name: (ours(facts, CPU_FIELDS), {k: aws_facts(name)[k] for k in CPU_FIELDS})
        for name, facts in BUILT_IN.items()
        if not facts.gpus and ours(facts, CPU_FIELDS) != {k: aws_facts(name)[k] for k in CPU_FIELDS}
    }
    assert wrong == {}


def test_the_real_c5_sizes_are_accepted_and_the_missing_ones_refused() -> None:
    from settings import SettingError
    from tests.conftest import settings_for

    assert settings_for({"SYSTEM_NODE_TYPE": "c5.9xlarge"}).system_node.vcpus == 36
    with pytest.raises(SettingError, match=r"SYSTEM_NODE_TYPE='c5\.8xlarge'"):
        settings_for({"SYSTEM_NODE_TYPE": "c5.8xlarge"})


def test_each_built_in_gpu_model_has_what_the_fit_check_and_ray_need() -> None:
    # A new GPU model (docs/contributing.md, "Add a GPU type"): CUDA's total as measured, not the 94 % estimate the fit
    # check applies to a looked-up type, and Ray's accelerator type, without which the bundles go without one.
    from k8s_constructs.serve_config import RAY_ACCELERATOR_TYPES
    from settings.model_fit import CUDA_TOTAL_MIB, table_gpu_types

    models = {BUILT_IN[name].gpu_model for name in BUILT_IN_GPU_TYPES}
    assert models <= set(CUDA_TOTAL_MIB)
    assert models <= RAY_ACCELERATOR_TYPES
    for model in models:  # measured, within 1 % of EC2's figure: a mistyped digit fails
        ec2 = {BUILT_IN[name].gpu_memory_mib for name in BUILT_IN_GPU_TYPES if BUILT_IN[name].gpu_model == model}
        assert all(0.95 * mib <= CUDA_TOTAL_MIB[model] <= 1.01 * mib for mib in ec2), model
    assert {BUILT_IN[name].gpu_model for name in table_gpu_types()} == models  # the docs' table shows each
