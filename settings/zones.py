"""Which availability zones the VPC spans and which one holds the GPU nodes.

EFA does not cross AZs, so the GPU nodegroup lives in one AZ that must offer GPU_NODE_TYPE. Synthesis
never calls AWS: it reads the answers of earlier look-ups from the context (cdk.context.json, written
by `make lookup`), and without them falls back to a built-in default that the synth announces.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from settings.errors import SettingError

# EKS needs subnets in at least two AZs; three keeps the control plane ENIs and NAT spread.
VPC_AZ_COUNT = 3


def zones_context_key(region: str) -> str:
    return f"ray-llm:availability-zones:region={region}"


def offerings_context_key(region: str, instance_type: str) -> str:
    return f"ray-llm:instance-type-offerings:region={region}:instance-type={instance_type}"


@dataclass(frozen=True)
class ZoneChoice:
    gpu_az: str
    vpc_azs: tuple[str, ...]
    source: str  # "GPU_AZ", "cached look-up" or "built-in default"


def _cached_list(context: Mapping[str, Any], key: str) -> list[str] | None:
    value = context.get(key)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return sorted(value)
    return None


def choose_zones(*, region: str, gpu_type: str, gpu_az: str, context: Mapping[str, Any]) -> ZoneChoice:
    region_azs = _cached_list(context, zones_context_key(region)) or [f"{region}{letter}" for letter in "abc"]
    offering_azs = _cached_list(context, offerings_context_key(region, gpu_type))

    if gpu_az:
        if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d[a-z]", gpu_az):
            raise SettingError(
                "GPU_AZ", gpu_az, f"an availability zone name such as {region}a, or empty to look one up"
            )
        if not gpu_az.startswith(region) or not re.fullmatch(r"[a-z]", gpu_az[len(region) :]):
            raise SettingError("GPU_AZ", gpu_az, f"an availability zone of REGION={region}, such as {region}a")
        if _cached_list(context, zones_context_key(region)) is not None and gpu_az not in region_azs:
            raise SettingError("GPU_AZ", gpu_az, f"an availability zone of {region}: {', '.join(region_azs)}")
        if offering_azs is not None and gpu_az not in offering_azs:
            offered = ", ".join(offering_azs) or "none (pick another GPU_NODE_TYPE or REGION)"
            raise SettingError("GPU_AZ", gpu_az, f"an AZ of {region} that offers {gpu_type}: {offered}")
        chosen, source = gpu_az, "GPU_AZ"
    elif offering_azs is not None:
        if not offering_azs:
            raise SettingError(
                "GPU_NODE_TYPE", gpu_type, f"a type offered in {region}; the cached look-up found no AZ offering it"
            )
        chosen, source = offering_azs[0], "cached look-up"
    else:
        chosen, source = f"{region}a", "built-in default"

    others = [az for az in region_azs if az != chosen][: VPC_AZ_COUNT - 1]
    return ZoneChoice(gpu_az=chosen, vpc_azs=tuple(sorted([chosen, *others])), source=source)
