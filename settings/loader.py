"""Build the Settings from environment variables, `cdk -c key=value` and cdk.json, in that order.

Every setting has one name: its environment variable (the reference scripts' names). As a context key
it is the same name in lower case (`cdk synth -c gpu_node_count=0`). Every value is checked here, before
any construct exists, and a bad one raises SettingError naming the setting, the value and what is allowed.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from settings import versions
from settings.errors import SettingError
from settings.images import pinned_image
from settings.instance_types import (
    BUILT_IN,
    BUILT_IN_GPU_TYPES,
    INSTANCE_TYPE_PATTERN,
    InstanceFacts,
    instance_type_context_key,
)
from settings.model import Settings
from settings.registries import eks_addon_registry
from settings.sizing import check_engine_cpus, check_head_fits, gpu_worker_resources
from settings.zones import choose_zones

DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# Regions that must be opted in: AWS serves the Deep Learning Containers there from other accounts.
DLC_OPT_IN_REGIONS = frozenset(
    {
        "af-south-1", "ap-east-1", "ap-east-2", "ap-south-2", "ap-southeast-3", "ap-southeast-4", "ap-southeast-5",
        "ap-southeast-6", "ap-southeast-7", "ca-west-1", "eu-central-2", "eu-south-1", "eu-south-2", "il-central-1",
        "me-central-1", "me-south-1", "mx-central-1",
    }
)  # fmt: skip


@dataclass(frozen=True)
class SettingSpec:
    env: str
    default: str
    meaning: str
    allowed: str

    @property
    def context_key(self) -> str:
        return self.env.lower()


SPECS: tuple[SettingSpec, ...] = (
    SettingSpec(
        "CLUSTER_NAME", "ray-llm-multinode", "EKS cluster name; also the prefix of the stack names", "DNS label, starts with a letter, at most 40 characters"
    ),
    SettingSpec("REGION", "sa-east-1", "AWS Region of every stack", "an AWS commercial Region, e.g. us-east-2"),
    SettingSpec("K8S_VERSION", "1.35", "Kubernetes version of the control plane and nodes", ", ".join(versions.SUPPORTED_KUBERNETES_VERSIONS)),
    SettingSpec("NAMESPACE", "inference", "Namespace of the RayService", "DNS label, at most 63 characters"),
    SettingSpec("VPC_CIDR", "10.0.0.0/16", "IPv4 range of the VPC (3 private /19 and 3 public /24 subnets)", "a private IPv4 CIDR, /16 or /17"),
    SettingSpec("ENDPOINT_ACCESS", "public-and-private", "Where the Kubernetes API endpoint is reachable from", "public-and-private, private, public"),
    SettingSpec(
        "PUBLIC_ACCESS_CIDRS",
        "",
        "Allow-list for the public API endpoint (empty = anywhere)",
        "comma-separated IPv4 CIDRs; needs ENDPOINT_ACCESS=public-and-private",
    ),
    SettingSpec(
        "ADMIN_PRINCIPAL_ARNS", "", "IAM roles/users given cluster-admin access entries (CI deploy role, people)", "comma-separated IAM role or user ARNs"
    ),
    SettingSpec("SYSTEM_NODEGROUP_NAME", "system-nodes", "Name of the CPU system nodegroup", "DNS label, at most 63 characters"),
    SettingSpec(
        "SYSTEM_NODE_TYPE",
        "m7i.xlarge",
        "Instance type of the system nodes (operator, Ray head, CoreDNS)",
        "an x86_64 EC2 type with at least 4 vCPU and 16 GiB",
    ),
    SettingSpec("SYSTEM_NODE_COUNT", "1", "Number of system nodes", "integer 1-10"),
    SettingSpec("SYSTEM_ROOT_VOLUME_GIB", "100", "Encrypted gp3 root volume of each system node (the Ray head pulls the ~20 GB image)", "integer 80-1000"),
    SettingSpec("GPU_NODEGROUP_NAME", "gpu-workers", "Name of the EFA GPU nodegroup", "DNS label, at most 63 characters"),
    SettingSpec(
        "GPU_NODE_TYPE",
        "g6.8xlarge",
        "Instance type of the GPU nodes",
        "an x86_64 NVIDIA GPU type with EFA: " + ", ".join(BUILT_IN_GPU_TYPES) + ", or another after `make lookup`",
    ),
    SettingSpec(
        "GPU_NODE_COUNT",
        "",
        "Number of GPU nodes; empty = what the replicas need (prefill nodes + decode nodes); 0 parks the GPUs and keeps everything else",
        "empty, 0, or the nodes the replicas need",
    ),
    SettingSpec(
        "GPU_UPDATE_STRATEGY",
        "minimal",
        "How EKS replaces GPU nodes on a rolling update (new launch template, AMI or Kubernetes version)",
        "minimal (terminate, then launch: no extra GPU quota or placement-group room), default (launch 2 extra nodes first)",
    ),
    SettingSpec("GPU_ROOT_VOLUME_GIB", "200", "Encrypted gp3 root volume of each GPU node (image ~20 GB, weights ~18 GiB)", "integer 100-2000"),
    SettingSpec(
        "GPU_AZ", "", "AZ of the GPU nodes (EFA cannot cross AZs); empty = the cached look-up, else REGION + 'a'", "an AZ of REGION that offers GPU_NODE_TYPE"
    ),
    SettingSpec(
        "GPU_PLACEMENT_GROUP",
        "on",
        "Cluster placement group of the GPU nodes: on = one the GPU stack creates (lowest latency between them, but all nodes "
        "must fit one spot: InsufficientInstanceCapacity is likelier), off = none, or the name of an existing cluster placement "
        "group (the one a capacity reservation was made in)",
        "on, off, or a placement group name; not on with GPU_CAPACITY_RESERVATION_ID",
    ),
    SettingSpec(
        "GPU_CAPACITY_RESERVATION_ID",
        "",
        "EC2 capacity reservation the GPU nodes launch into (an On-Demand Capacity Reservation or a Capacity Block for ML); empty = none",
        "empty or a reservation ID cr-<17 hex>, in GPU_AZ, of GPU_NODE_TYPE, active, with free instances for the nodes (checked by the preflight)",
    ),
    SettingSpec(
        "GPU_CAPACITY_RESERVATION_TYPE",
        "on-demand",
        "What GPU_CAPACITY_RESERVATION_ID is: on-demand (a Capacity Reservation) or capacity-block (a Capacity Block for ML: the nodegroup's capacity type CAPACITY_BLOCK)",
        "on-demand or capacity-block (needs GPU_CAPACITY_RESERVATION_ID)",
    ),
    SettingSpec(
        "DLC_IMAGE",
        versions.DLC_IMAGE_TEMPLATE,
        "Ray LLM container image of the head and workers (${REGION} is replaced)",
        "an image reference with a tag or digest",
    ),
    SettingSpec(
        "KUBERAY_VERSION",
        versions.KUBERAY_OPERATOR.version,
        "KubeRay operator chart version",
        f"{versions.KUBERAY_OPERATOR.version} (the version of the CRDs in schemas/kuberay/, which the RayService is validated against)",
    ),
    SettingSpec("KUBERAY_NAMESPACE", "kuberay-operator", "Namespace of the KubeRay operator release", "DNS label, at most 63 characters"),
    SettingSpec(
        "RAY_VERSION", versions.RAY_VERSION, "Ray version inside DLC_IMAGE", "X.Y.Z, at least 2.52 (token authentication; build_pd_openai_app since 2.49)"
    ),
    SettingSpec("RAY_SERVICE_NAME", "ray-llm", "RayService name; the endpoint Service is NAME-serve-svc", "DNS label, at most 53 characters"),
    SettingSpec("MODEL_ID", "qwen3.5-9b", "Model name clients send in requests", "letters, digits, '.', '_', '-'"),
    SettingSpec("MODEL_SOURCE", "Qwen/Qwen3.5-9B", "Hugging Face repository of the weights", "ORG/NAME"),
    SettingSpec("PREFILL_REPLICAS", "1", "Prefill replicas (one vLLM engine of TENSOR_PARALLEL_SIZE GPUs each)", "integer 1-64"),
    SettingSpec("DECODE_REPLICAS", "1", "Decode replicas (one vLLM engine of TENSOR_PARALLEL_SIZE GPUs each)", "integer 1-64"),
    SettingSpec(
        "TENSOR_PARALLEL_SIZE",
        "1",
        "GPUs of one vLLM engine (tensor parallelism), inside one node; one value for both phases (NIXL cannot mix TP sizes for Qwen3.5's hybrid layers)",
        "1, 2, 4 or 8, at most the GPUs of GPU_NODE_TYPE",
    ),
    SettingSpec("MAX_MODEL_LEN", "4096", "vLLM max_model_len: sized to the KV cache that fits on the GPU", "integer 256-1048576"),
    SettingSpec(
        "SERVE_CLIENT_NAMESPACES",
        "",
        "Namespaces whose pods may call the OpenAI endpoint (port 8000; Ray's token does not cover it); empty = NAMESPACE only",
        "comma-separated namespace names",
    ),
    SettingSpec(
        "METRICS_NAMESPACE",
        "monitoring",
        "Namespace of an in-cluster metrics collector (your Prometheus) allowed to scrape the Ray pods' port 8080; OBSERVABILITY's managed collector is let in by address",
        "a namespace name",
    ),
    SettingSpec(
        "OBSERVABILITY",
        "off",
        "CloudWatch metrics (Container Insights with GPU and EFA; the Ray pods' Prometheus metrics through a managed collector, queried with PromQL), a dashboard and alarms; costs money while idle",
        "on or off",
    ),
    SettingSpec("HF_TOKEN_SECRET_NAME", "", "Secrets Manager secret holding a Hugging Face token (empty = none)", "a Secrets Manager secret name"),
)

SPECS_BY_CONTEXT_KEY: Mapping[str, SettingSpec] = {spec.context_key: spec for spec in SPECS}


@cache
def _known_instance_types() -> frozenset[str]:
    import botocore.session  # the EC2 API model's InstanceType enum: every type AWS has, offline

    model = botocore.session.get_session().get_service_model("ec2")
    return frozenset(model.shape_for("InstanceType").enum)


@cache
def _known_regions() -> tuple[str, ...]:
    """The commercial partition's Regions, from botocore's endpoint data (offline; importing boto3 and
    building a session would cost a quarter of a second on every synth)."""
    import json
    from pathlib import Path

    import botocore

    endpoints = json.loads((Path(botocore.__file__).parent / "data" / "endpoints.json").read_text())
    (aws,) = [p for p in endpoints["partitions"] if p["partition"] == "aws"]
    return tuple(sorted(aws["regions"]))


def _closest(value: str, choices: list[str] | tuple[str, ...]) -> str:
    match = difflib.get_close_matches(value, choices, n=1)
    return f" (did you mean {match[0]}?)" if match else ""


def check_context_keys(context: Mapping[str, Any]) -> None:
    """Reject context keys that look like ours but are not: a typo must not be silently ignored."""
    for key in sorted(context):
        # CDK's own keys: feature flags (@aws-cdk/...), aws:cdk:*, look-up caches (provider:...).
        if key.startswith("@") or ":" in key or key.startswith("aws-cdk") or key.startswith("cdk"):
            continue
        if key not in SPECS_BY_CONTEXT_KEY:
            hint = _closest(key, sorted(SPECS_BY_CONTEXT_KEY))
            raise SettingError(key, context[key], f"a known context key{hint}; see docs/settings.md")


def raw_values(environ: Mapping[str, str], context: Mapping[str, Any]) -> dict[str, str]:
    """Each setting's text by precedence: environment, then context (-c, cdk.json), then default."""
    values: dict[str, str] = {}
    for spec in SPECS:
        if spec.env in environ:
            values[spec.env] = environ[spec.env]
        elif spec.context_key in context:
            raw = context[spec.context_key]
            values[spec.env] = ",".join(str(v) for v in raw) if isinstance(raw, list) else str(raw)
        else:
            values[spec.env] = spec.default
    return values


def _integer(env: str, raw: str, low: int, high: int) -> int:
    text = raw.strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        raise SettingError(env, raw, f"a whole number from {low} to {high}")
    value = int(text)
    if not low <= value <= high:
        raise SettingError(env, raw, f"a whole number from {low} to {high}")
    return value


def _dns_label(env: str, raw: str, max_len: int = 63) -> str:
    if not DNS_LABEL.fullmatch(raw) or len(raw) > max_len:
        raise SettingError(env, raw, f"a DNS label: lowercase letters, digits and '-', starting with a letter, at most {max_len} characters")
    return raw


def _namespaces(env: str, raw: str) -> tuple[str, ...]:
    names = _csv(raw)
    if any(not DNS_LABEL.fullmatch(n) or len(n) > 63 for n in names):
        raise SettingError(env, raw, "comma-separated namespace names (each a DNS label: lowercase letters, digits and '-')")
    return names


def _csv(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _instance_facts(env: str, name: str, context: Mapping[str, Any]) -> InstanceFacts:
    if name in BUILT_IN:
        return BUILT_IN[name]  # known good: skip loading the EC2 API model
    if not INSTANCE_TYPE_PATTERN.fullmatch(name) or name not in _known_instance_types():
        hint = _closest(name, sorted(_known_instance_types()))
        raise SettingError(env, name, f"an EC2 instance type{hint}")
    cached = context.get(instance_type_context_key(name))
    if isinstance(cached, Mapping):
        return InstanceFacts.from_context(cached)
    return InstanceFacts(name=name, vcpus=0, memory_mib=0)  # unknown facts: the callers reject it clearly


def _gpu_facts(name: str, context: Mapping[str, Any]) -> InstanceFacts:
    facts = _instance_facts("GPU_NODE_TYPE", name, context)
    supported = ", ".join(BUILT_IN_GPU_TYPES)
    if facts.vcpus == 0:
        if not facts.family.startswith(("g", "p")):
            raise SettingError("GPU_NODE_TYPE", name, f"a GPU type with EFA ({name} has no GPU): {supported}")
        raise SettingError("GPU_NODE_TYPE", name, f"a built-in GPU type ({supported}), or run `make lookup` with AWS credentials to cache {name}'s facts")
    if facts.gpus == 0:
        raise SettingError("GPU_NODE_TYPE", name, f"a GPU type with EFA ({name} has no GPU): {supported}")
    if not facts.efa_supported:
        raise SettingError("GPU_NODE_TYPE", name, f"a GPU type with EFA ({name} has no EFA): {supported}")
    if facts.architecture != "x86_64" or facts.gpu_model.upper().startswith(("RADEON", "T4G")):
        raise SettingError("GPU_NODE_TYPE", name, f"an x86_64 NVIDIA GPU type (the AL2023 NVIDIA AMI): {supported}")
    return facts


def _system_facts(name: str, context: Mapping[str, Any]) -> InstanceFacts:
    facts = _instance_facts("SYSTEM_NODE_TYPE", name, context)
    if facts.vcpus == 0:
        raise SettingError(
            "SYSTEM_NODE_TYPE",
            name,
            "a built-in x86_64 type (m5-m7i, c5-c7i, r5-r7i, large to 16xlarge), or run `make lookup` with AWS credentials to cache its facts",
        )
    if facts.architecture != "x86_64":
        raise SettingError("SYSTEM_NODE_TYPE", name, "an x86_64 instance type (the nodegroup uses the AL2023 x86_64 AMI)")
    # The Ray head (2 vCPU / 8 GiB requested, 3 / 12 GiB limit) must fit beside the operator and CoreDNS.
    if facts.vcpus < 4 or facts.memory_mib < 16 * 1024:
        raise SettingError("SYSTEM_NODE_TYPE", name, f"a type with at least 4 vCPU and 16 GiB ({name} has {facts.vcpus} vCPU, {facts.memory_mib // 1024} GiB)")
    return facts


def _region(raw: str) -> str:
    if raw not in _known_regions():
        raise SettingError("REGION", raw, f"an AWS Region{_closest(raw, _known_regions())}, one of {', '.join(_known_regions())}")
    if eks_addon_registry(raw) is None:
        raise SettingError("REGION", raw, "a Region whose EKS add-on image registry settings/registries.py lists (add its row from the EKS user guide)")
    return raw


def _cidr(env: str, raw: str, *, private: bool, prefix: tuple[int, int]) -> str:
    try:
        network = ipaddress.IPv4Network(raw, strict=True)
    except ValueError:
        raise SettingError(env, raw, f"an IPv4 CIDR such as 10.0.0.0/16 (prefix /{prefix[0]} to /{prefix[1]})") from None
    if not prefix[0] <= network.prefixlen <= prefix[1] or (private and not network.is_private):
        kind = "a private " if private else "an "
        raise SettingError(env, raw, f"{kind}IPv4 CIDR with a prefix from /{prefix[0]} to /{prefix[1]}")
    return str(network)


def _principal_arn(raw: str) -> str:
    if not re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+", raw):
        raise SettingError("ADMIN_PRINCIPAL_ARNS", raw, "IAM role or user ARNs such as arn:aws:iam::123456789012:role/ci-deploy")
    return raw


def _principal_arns(raw: str) -> tuple[str, ...]:
    arns = tuple(_principal_arn(a) for a in _csv(raw))
    # EKS allows one access entry per principal: a second one fails the cluster stack about 12 minutes in.
    duplicates = sorted({a for a in arns if arns.count(a) > 1})
    if duplicates:
        raise SettingError("ADMIN_PRINCIPAL_ARNS", raw, f"each ARN once (EKS allows one access entry per principal; {duplicates[0]} is listed twice)")
    return arns


def _capacity(raw: Mapping[str, str]) -> tuple[str, str, str]:
    """(placement group, reservation ID, reservation type) of the GPU nodes."""
    reservation = raw["GPU_CAPACITY_RESERVATION_ID"].strip()
    if reservation and not re.fullmatch(r"cr-[0-9a-f]{17}", reservation):
        raise SettingError("GPU_CAPACITY_RESERVATION_ID", reservation, "empty or a capacity reservation ID: cr- and 17 hexadecimal digits")
    kind = _choice("GPU_CAPACITY_RESERVATION_TYPE", raw["GPU_CAPACITY_RESERVATION_TYPE"], ("on-demand", "capacity-block"))
    if kind == "capacity-block" and not reservation:
        raise SettingError("GPU_CAPACITY_RESERVATION_TYPE", kind, "on-demand unless GPU_CAPACITY_RESERVATION_ID names the Capacity Block")
    group = raw["GPU_PLACEMENT_GROUP"].strip()
    if group not in ("on", "off") and not re.fullmatch(r"[A-Za-z0-9][\w.+=@-]{0,254}", group):
        raise SettingError("GPU_PLACEMENT_GROUP", group, "on, off, or the name of an existing cluster placement group")
    if group == "on" and reservation:
        # A reservation serves instances launched into the placement group it was made in, and only those:
        # the one the stack would create is new, so no reservation can be in it.
        raise SettingError(
            "GPU_PLACEMENT_GROUP",
            group,
            "off, or the name of the cluster placement group the reservation was created in, while GPU_CAPACITY_RESERVATION_ID is set "
            "(a new placement group holds no reservation)",
        )
    return group, reservation, kind


def _image(raw: str, region: str) -> str:
    if raw == versions.DLC_IMAGE_TEMPLATE and region in DLC_OPT_IN_REGIONS:
        raise SettingError(
            "DLC_IMAGE",
            raw,
            f"an image you set explicitly for REGION={region}: opt-in Regions serve the DLCs from another account than "
            f"763104351884 (or use the public copy {versions.DLC_PUBLIC_IMAGE})",
        )
    image = raw.replace("${REGION}", region)
    if not re.fullmatch(r"[a-z0-9.-]+(:\d+)?(/[a-z0-9._-]+)+(:[\w][\w.-]{0,127}|@sha256:[a-f0-9]{64})", image) or image.endswith(":latest"):
        raise SettingError("DLC_IMAGE", raw, "REGISTRY/REPOSITORY:TAG or @sha256:DIGEST, not :latest (the image must be reproducible)")
    return image


def _choice(env: str, raw: str, allowed: tuple[str, ...]) -> str:
    if raw not in allowed:
        raise SettingError(env, raw, " or ".join(allowed))
    return raw


def _tensor_parallel_size(raw: str, gpu_node: InstanceFacts) -> int:
    size = _integer("TENSOR_PARALLEL_SIZE", raw, 1, 8)
    if size not in (1, 2, 4, 8) or size > gpu_node.gpus:
        allowed = ", ".join(str(n) for n in (1, 2, 4, 8) if n <= gpu_node.gpus)
        raise SettingError(
            "TENSOR_PARALLEL_SIZE", raw, f"{allowed}: a tensor-parallel engine stays inside one node, and {gpu_node.name} has {gpu_node.gpus} GPU(s)"
        )
    return size


def _kuberay_version(raw: str) -> str:
    # Only the version whose CRDs the repository carries: the typed RayService, its validation and
    # `make kuberay-crds` all use those files. Moving to another version means updating schemas/kuberay/,
    # imports/ and the pin together.
    pinned = versions.KUBERAY_OPERATOR.version
    if raw != pinned:
        raise SettingError(
            "KUBERAY_VERSION",
            raw,
            f"{pinned}, the version of the CRDs in schemas/kuberay/ (to move, update them, `make imports` and settings/versions.py together)",
        )
    return raw


def _semver(env: str, raw: str, allowed: str, check: Callable[[tuple[int, int, int]], bool]) -> str:
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", raw)
    if not match or not check((int(match[1]), int(match[2]), int(match[3]))):
        raise SettingError(env, raw, allowed)
    return raw


def _addon_versions(region: str, kubernetes_version: str, context: Mapping[str, Any]) -> tuple[tuple[str, str | None], ...]:
    from settings.lookups import addon_versions_context_key

    cached = context.get(addon_versions_context_key(region, kubernetes_version))
    resolved = cached if isinstance(cached, Mapping) else {}
    return tuple((name, pinned or (str(resolved[name]) if name in resolved else None)) for name, pinned in versions.EKS_ADDON_VERSIONS.items())


def load_settings(environ: Mapping[str, str], context: Mapping[str, Any]) -> Settings:
    """Parse and check every setting; raise SettingError on the first bad one."""
    check_context_keys(context)
    raw = raw_values(environ, context)

    region = _region(raw["REGION"])
    if raw["K8S_VERSION"] not in versions.SUPPORTED_KUBERNETES_VERSIONS:
        raise SettingError(
            "K8S_VERSION",
            raw["K8S_VERSION"],
            ", ".join(versions.SUPPORTED_KUBERNETES_VERSIONS) + f" (the kubectl {versions.KUBECTL_LAYER_KUBERNETES_MINOR} layer's skew)",
        )
    endpoint_access = raw["ENDPOINT_ACCESS"]
    if endpoint_access not in ("public-and-private", "private", "public"):
        raise SettingError("ENDPOINT_ACCESS", endpoint_access, "public-and-private, private or public")
    public_cidrs = tuple(_cidr("PUBLIC_ACCESS_CIDRS", c, private=False, prefix=(0, 32)) for c in _csv(raw["PUBLIC_ACCESS_CIDRS"]))
    if public_cidrs and endpoint_access != "public-and-private":
        # EKS keeps a private endpoint for the nodes whenever the public one is restricted.
        raise SettingError("PUBLIC_ACCESS_CIDRS", raw["PUBLIC_ACCESS_CIDRS"], f"empty unless ENDPOINT_ACCESS=public-and-private (it is {endpoint_access})")

    observability = _choice("OBSERVABILITY", raw["OBSERVABILITY"], ("on", "off")) == "on"
    if observability and endpoint_access == "public":
        # The managed Prometheus collector reads the pod list from inside the VPC.
        raise SettingError("OBSERVABILITY", "on", "off while ENDPOINT_ACCESS=public (the metrics collector needs the private endpoint)")

    gpu_node = _gpu_facts(raw["GPU_NODE_TYPE"], context)
    placement_group, reservation, reservation_type = _capacity(raw)
    zones = choose_zones(region=region, gpu_type=gpu_node.name, gpu_az=raw["GPU_AZ"].strip(), context=context)

    model_id = raw["MODEL_ID"]
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", model_id):
        raise SettingError("MODEL_ID", model_id, "letters, digits, '.', '_' and '-', at most 128 characters")
    model_source = raw["MODEL_SOURCE"]
    # Hugging Face only: the workers have no AWS identity to read s3:// with (IMDS is closed to pods).
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", model_source):
        raise SettingError(
            "MODEL_SOURCE", model_source, "a Hugging Face repository ORG/NAME (s3:// sources are not supported: the workers have no AWS identity)"
        )
    secret = raw["HF_TOKEN_SECRET_NAME"]
    if secret and not re.fullmatch(r"[A-Za-z0-9/_+=.@-]{1,512}", secret):
        raise SettingError("HF_TOKEN_SECRET_NAME", secret, "a Secrets Manager secret name (letters, digits and /_+=.@-)")

    settings = Settings(
        cluster_name=_dns_label("CLUSTER_NAME", raw["CLUSTER_NAME"], max_len=40),
        region=region,
        kubernetes_version=raw["K8S_VERSION"],
        namespace=_dns_label("NAMESPACE", raw["NAMESPACE"]),
        vpc_cidr=_cidr("VPC_CIDR", raw["VPC_CIDR"], private=True, prefix=(16, 17)),
        availability_zones=zones.vpc_azs,
        endpoint_access=endpoint_access,
        public_access_cidrs=public_cidrs,
        admin_principal_arns=_principal_arns(raw["ADMIN_PRINCIPAL_ARNS"]),
        system_nodegroup_name=_dns_label("SYSTEM_NODEGROUP_NAME", raw["SYSTEM_NODEGROUP_NAME"]),
        system_node=_system_facts(raw["SYSTEM_NODE_TYPE"], context),
        system_node_count=_integer("SYSTEM_NODE_COUNT", raw["SYSTEM_NODE_COUNT"], 1, 10),
        system_root_volume_gib=_integer("SYSTEM_ROOT_VOLUME_GIB", raw["SYSTEM_ROOT_VOLUME_GIB"], 80, 1000),
        gpu_nodegroup_name=_dns_label("GPU_NODEGROUP_NAME", raw["GPU_NODEGROUP_NAME"]),
        gpu_node=gpu_node,
        gpu_node_count=-1 if not raw["GPU_NODE_COUNT"].strip() else _integer("GPU_NODE_COUNT", raw["GPU_NODE_COUNT"], 0, 64),
        gpu_update_strategy=_choice("GPU_UPDATE_STRATEGY", raw["GPU_UPDATE_STRATEGY"], ("minimal", "default")),
        gpu_root_volume_gib=_integer("GPU_ROOT_VOLUME_GIB", raw["GPU_ROOT_VOLUME_GIB"], 100, 2000),
        gpu_az=zones.gpu_az,
        gpu_az_source=zones.source,
        dlc_image=pinned_image(_image(raw["DLC_IMAGE"], region), context)[0],
        dlc_image_source=pinned_image(_image(raw["DLC_IMAGE"], region), context)[1],
        kuberay_version=_kuberay_version(raw["KUBERAY_VERSION"]),
        kuberay_namespace=_dns_label("KUBERAY_NAMESPACE", raw["KUBERAY_NAMESPACE"]),
        ray_version=_semver(
            "RAY_VERSION", raw["RAY_VERSION"], "X.Y.Z, at least 2.52.0 (Ray's token authentication, which the RayCluster turns on)", lambda v: v >= (2, 52, 0)
        ),
        ray_service_name=_dns_label("RAY_SERVICE_NAME", raw["RAY_SERVICE_NAME"], max_len=53),
        model_id=model_id,
        model_source=model_source,
        prefill_replicas=_integer("PREFILL_REPLICAS", raw["PREFILL_REPLICAS"], 1, 64),
        decode_replicas=_integer("DECODE_REPLICAS", raw["DECODE_REPLICAS"], 1, 64),
        tensor_parallel_size=_tensor_parallel_size(raw["TENSOR_PARALLEL_SIZE"], gpu_node),
        max_model_len=_integer("MAX_MODEL_LEN", raw["MAX_MODEL_LEN"], 256, 1048576),
        hf_token_secret_name=secret,
        serve_client_namespaces=_namespaces("SERVE_CLIENT_NAMESPACES", raw["SERVE_CLIENT_NAMESPACES"]) or (raw["NAMESPACE"],),
        metrics_namespace=_dns_label("METRICS_NAMESPACE", raw["METRICS_NAMESPACE"]),
        observability=observability,
        eks_addon_versions=_addon_versions(region, raw["K8S_VERSION"], context),
        gpu_placement_group=placement_group,
        gpu_capacity_reservation_id=reservation,
        gpu_capacity_reservation_type=reservation_type,
    )
    if settings.gpu_node_count == -1:  # empty: what the replicas need
        settings = replace(settings, gpu_node_count=settings.gpu_nodes_needed)
    elif settings.gpu_node_count not in (0, settings.gpu_nodes_needed):
        raise SettingError(
            "GPU_NODE_COUNT",
            raw["GPU_NODE_COUNT"],
            f"empty or {settings.gpu_nodes_needed} (what the replicas need), or 0 (parked): {settings.prefill_nodes} prefill + "
            f"{settings.decode_nodes} decode node(s) of {gpu_node.name} ({gpu_node.gpus} GPU(s) each, {settings.engines_per_node} "
            f"engine(s) of TENSOR_PARALLEL_SIZE={settings.tensor_parallel_size} per node; the phases never share a node)",
        )
    check_head_fits(settings.system_node, observability=settings.observability)
    gpu_worker_resources(settings.gpu_node, observability=settings.observability)
    check_engine_cpus(settings.gpu_node, settings.engines_per_node, settings.tensor_parallel_size, observability=settings.observability)
    return settings


def settings_table_markdown() -> str:
    """The docs' settings table (docs/settings.md), generated from SPECS so the two cannot drift apart."""
    rows = ["| Environment variable | Context key (`-c`) | Default | Meaning | Allowed |", "|---|---|---|---|---|"]
    for spec in SPECS:
        default = f"`{spec.default}`" if spec.default else "(empty)"
        rows.append(f"| `{spec.env}` | `{spec.context_key}` | {default} | {spec.meaning} | {spec.allowed} |")
    return "\n".join(rows)
