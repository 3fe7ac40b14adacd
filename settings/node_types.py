"""GPU_NODE_TYPE and SYSTEM_NODE_TYPE: an instance type's facts (built in, or cached by `make lookup`) and what
each nodegroup needs of them; a type refused is named with the types this setting takes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from settings.errors import SettingError
from settings.instance_types import (
    BUILT_IN,
    BUILT_IN_GPU_TYPES,
    INSTANCE_TYPE_PATTERN,
    InstanceFacts,
    instance_type_context_key,
)
from settings.parsers import closest, known_instance_types


def _instance_facts(env: str, name: str, context: Mapping[str, Any], suggestions: tuple[str, ...]) -> InstanceFacts:
    if name in BUILT_IN:
        return BUILT_IN[name]  # known good: skip loading the EC2 API model
    if name != name.lower() and name.lower() in BUILT_IN:
        raise SettingError(env, name, f"an EC2 instance type, in lower case (did you mean {name.lower()}?)")
    if not INSTANCE_TYPE_PATTERN.fullmatch(name) or name not in known_instance_types():
        # A suggestion only among the types this setting takes (not g6.xlarge, which has no EFA, for g6.8xlarg); a
        # GPU's name (h100, L4) gets the types that carry it.
        carriers = [t for t in suggestions if BUILT_IN[t].gpu_model and BUILT_IN[t].gpu_model.lower() == name.lower()]
        hint = (
            f" ({BUILT_IN[carriers[0]].gpu_model} is a GPU; the types with it: {', '.join(carriers)})"
            if carriers
            else closest(name, suggestions)
        )
        raise SettingError(env, name, f"an EC2 instance type{hint}")
    cached = context.get(instance_type_context_key(name))
    if isinstance(cached, Mapping):
        return InstanceFacts.from_context(cached)
    return InstanceFacts(name=name, vcpus=0, memory_mib=0)  # unknown facts: the callers reject it clearly


def gpu_node_facts(name: str, context: Mapping[str, Any]) -> InstanceFacts:
    """GPU_NODE_TYPE's facts: an x86_64 NVIDIA type with EFA, built in or cached by `make lookup`."""
    facts = _instance_facts("GPU_NODE_TYPE", name, context, BUILT_IN_GPU_TYPES)
    supported = ", ".join(BUILT_IN_GPU_TYPES)
    if facts.vcpus == 0:
        if not facts.family.startswith(("g", "p")):
            raise SettingError("GPU_NODE_TYPE", name, f"a GPU type with EFA ({name} has no GPU): {supported}")
        raise SettingError(
            "GPU_NODE_TYPE",
            name,
            f"a built-in GPU type ({supported}), or run `make lookup` with AWS credentials to cache {name}'s facts",
        )
    if facts.gpus == 0:
        raise SettingError("GPU_NODE_TYPE", name, f"a GPU type with EFA ({name} has no GPU): {supported}")
    if not facts.efa_supported:
        raise SettingError("GPU_NODE_TYPE", name, f"a GPU type with EFA ({name} has no EFA): {supported}")
    if facts.architecture != "x86_64" or facts.gpu_model.upper().startswith(("RADEON", "T4G")):
        raise SettingError("GPU_NODE_TYPE", name, f"an x86_64 NVIDIA GPU type (the AL2023 NVIDIA AMI): {supported}")
    return facts


# The built-in types SYSTEM_NODE_TYPE takes: x86_64, no GPU, at least 4 vCPU and 16 GiB (see system_node_facts).
BUILT_IN_SYSTEM_TYPES = tuple(
    n
    for n, f in BUILT_IN.items()
    if f.gpus == 0 and f.architecture == "x86_64" and f.vcpus >= 4 and f.memory_mib >= 16 * 1024
)


def system_node_facts(name: str, context: Mapping[str, Any]) -> InstanceFacts:
    """SYSTEM_NODE_TYPE's facts: an x86_64 type with room for the Ray head beside the system pods."""
    facts = _instance_facts("SYSTEM_NODE_TYPE", name, context, BUILT_IN_SYSTEM_TYPES)
    if facts.vcpus == 0:
        raise SettingError(
            "SYSTEM_NODE_TYPE",
            name,
            "a built-in x86_64 type (m5-m7i, c5-c7i, r5-r7i, large to 16xlarge), or run `make lookup` with AWS"
            " credentials to cache its facts",
        )
    if facts.architecture != "x86_64":
        raise SettingError(
            "SYSTEM_NODE_TYPE", name, "an x86_64 instance type (the nodegroup uses the AL2023 x86_64 AMI)"
        )
    # The Ray head (2 vCPU / 8 GiB requested, 3 / 12 GiB limit) must fit beside the operator and CoreDNS.
    if facts.vcpus < 4 or facts.memory_mib < 16 * 1024:
        raise SettingError(
            "SYSTEM_NODE_TYPE",
            name,
            f"a type with at least 4 vCPU and 16 GiB ({name} has {facts.vcpus} vCPU, {facts.memory_mib // 1024} GiB)",
        )
    return facts
