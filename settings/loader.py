"""Build the Settings from environment variables, `cdk -c key=value` and cdk.json, in that order.

Every setting has one name: its environment variable (the reference scripts' names). As a context key
it is the same name in lower case (`cdk synth -c gpu_node_count=0`). Every value is checked here, before
any construct exists, and a bad one raises SettingError naming the setting, the value and what is allowed.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from settings import versions
from settings.configuration import Settings
from settings.endpoint import parse_endpoint
from settings.errors import SettingError
from settings.images import pinned_image
from settings.instance_types import InstanceFacts
from settings.model_facts import model_facts, vllm_architectures
from settings.model_fit import fit, misfit
from settings.model_source import parse_kms_key_arn, parse_model_id, parse_model_source, parse_next_source
from settings.node_types import gpu_node_facts, system_node_facts
from settings.parsers import cidr, closest, csv, integer, namespaces, region_name
from settings.sizing import check_engine_cpus, check_head_fits, gpu_worker_resources
from settings.specs import SPECS, SPECS_BY_CONTEXT_KEY
from settings.zones import choose_zones

# Regions that must be opted in: AWS serves the Deep Learning Containers there from other accounts.
DLC_OPT_IN_REGIONS = frozenset(
    {
        "af-south-1", "ap-east-1", "ap-east-2", "ap-south-2", "ap-southeast-3", "ap-southeast-4", "ap-southeast-5",
        "ap-southeast-6", "ap-southeast-7", "ca-west-1", "eu-central-2", "eu-south-1", "eu-south-2", "il-central-1",
        "me-central-1", "me-south-1", "mx-central-1",
    }
)  # fmt: skip


SPECS_BY_ENV = {spec.env: spec for spec in SPECS}


def check_context_keys(context: Mapping[str, Any]) -> None:
    """Reject context keys that look like ours but are not: a typo must not be silently ignored."""
    for key in sorted(context):
        # CDK's own keys: feature flags (@aws-cdk/...), aws:cdk:*, look-up caches (provider:...).
        if key.startswith("@") or ":" in key or key.startswith("aws-cdk") or key.startswith("cdk"):
            continue
        if key not in SPECS_BY_CONTEXT_KEY:
            hint = closest(key, sorted(SPECS_BY_CONTEXT_KEY))
            raise SettingError(key, context[key], f"a known context key{hint}; see docs/settings.md")


NEAR_MISS_CUTOFF = 0.88  # difflib's ratio from which a name reads as a misspelt setting (PREFIL_REPLICAS)


def _misspelt(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """(variable, the setting it looks like) for each environment variable that is no setting but reads like a
    misspelt one (PREFIL_REPLICAS)."""
    known = sorted(SPECS_BY_ENV)
    pairs = []
    for name in sorted(environ):
        if name in SPECS_BY_ENV or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
            continue
        if name.upper() in SPECS_BY_ENV:  # gpu_node_type=: a setting's name in the wrong case
            pairs.append((name, name.upper()))
            continue
        if name != name.upper():
            continue
        match = difflib.get_close_matches(name, known, n=1, cutoff=NEAR_MISS_CUTOFF)
        if match:
            pairs.append((name, match[0]))
    return pairs


def near_misses(environ: Mapping[str, str]) -> list[str]:
    """One warning per environment variable that looks like a misspelt setting: it would be ignored without a word,
    while a misspelt `-c` key is refused (check_context_keys)."""
    return [
        f"warning: {name} is not a setting and is ignored (did you mean {setting}?); see docs/settings.md"
        for name, setting in _misspelt(environ)
    ]


# Where a misspelt setting stops the synth instead of a warning: CI (GitHub Actions and most CI services set it), or
# anyone who asks. A warning scrolls past in a CI log while the deploy goes on with the default.
STRICT_SWITCHES = ("CI", "STRICT_SETTINGS")


def strict_settings(environ: Mapping[str, str]) -> bool:
    return any(environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off") for name in STRICT_SWITCHES)


def misspelt_settings(environ: Mapping[str, str]) -> list[str]:
    """near_misses' warnings; with CI or STRICT_SETTINGS set, the first misspelt setting stops the synth (one line)."""
    pairs = _misspelt(environ)
    if pairs and strict_settings(environ):
        name, setting = pairs[0]
        raise SettingError(
            name,
            environ[name],
            f"no such setting (did you mean {setting}?); with CI or STRICT_SETTINGS set a misspelt setting stops the"
            " synth instead of deploying the default; see docs/settings.md",
        )
    return near_misses(environ)


def raw_values(
    environ: Mapping[str, str], context: Mapping[str, Any], defaults: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Each setting's text by precedence: environment, then context (-c, cdk.json), then default: `defaults`
    (by environment name) where it has one, else the spec's (the tests pass the configuration they pin)."""
    values: dict[str, str] = {}
    for spec in SPECS:
        if spec.env in environ:
            values[spec.env] = environ[spec.env]
        elif spec.context_key in context:
            raw = context[spec.context_key]
            values[spec.env] = ",".join(str(v) for v in raw) if isinstance(raw, list) else str(raw)
        else:
            values[spec.env] = (defaults or {}).get(spec.env, spec.default)
    return values


def _principal_arn(raw: str) -> str:
    if not re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+", raw):
        assumed = re.fullmatch(r"arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([\w+=,.@-]+)/.*", raw)
        hint = (
            f" (an assumed-role session, as `aws sts get-caller-identity` prints it: did you mean"
            f" arn:{assumed[1]}:iam::{assumed[2]}:role/{assumed[3]}? A role with a path needs its path, as"
            " `aws iam get-role` prints it)"
            if assumed
            else ""
        )
        raise SettingError(
            "ADMIN_PRINCIPAL_ARNS", raw, f"IAM role or user ARNs such as arn:aws:iam::123456789012:role/ci-deploy{hint}"
        )
    return raw


def _principal_arns(raw: str) -> tuple[str, ...]:
    arns = tuple(_principal_arn(a) for a in csv(raw))
    # EKS allows one access entry per principal: a second one fails the cluster stack about 12 minutes in.
    duplicates = sorted({a for a in arns if arns.count(a) > 1})
    if duplicates:
        raise SettingError(
            "ADMIN_PRINCIPAL_ARNS",
            raw,
            f"each ARN once (EKS allows one access entry per principal; {duplicates[0]} is listed twice)",
        )
    return arns


def _capacity(raw: Mapping[str, str], kind: str) -> tuple[str, str]:
    """(placement group, reservation ID) of the GPU nodes, with the reservation's type."""
    reservation = raw["GPU_CAPACITY_RESERVATION_ID"].strip()
    if reservation and not re.fullmatch(r"cr-[0-9a-f]{17}", reservation):
        raise SettingError(
            "GPU_CAPACITY_RESERVATION_ID",
            reservation,
            "empty or a capacity reservation ID: cr- and 17 hexadecimal digits",
        )
    if kind == "capacity-block" and not reservation:
        raise SettingError(
            "GPU_CAPACITY_RESERVATION_TYPE",
            kind,
            "on-demand unless GPU_CAPACITY_RESERVATION_ID names the Capacity Block",
        )
    group = raw["GPU_PLACEMENT_GROUP"].strip()
    if group not in ("on", "off") and not re.fullmatch(r"[A-Za-z0-9][\w.+=@-]{0,254}", group):
        raise SettingError("GPU_PLACEMENT_GROUP", group, "on, off, or the name of an existing cluster placement group")
    if group == "on" and reservation:
        # A reservation serves instances launched into the placement group it was made in, and only those:
        # the one the stack would create is new, so no reservation can be in it.
        raise SettingError(
            "GPU_PLACEMENT_GROUP",
            group,
            "off, or the name of the cluster placement group the reservation was created in, while"
            " GPU_CAPACITY_RESERVATION_ID is set (a new placement group holds no reservation)",
        )
    return group, reservation


def _image(raw: str, region: str) -> str:
    if raw == versions.DLC_IMAGE_TEMPLATE and region in DLC_OPT_IN_REGIONS:
        # The user set REGION, not DLC_IMAGE: the message is about the Region, and says what to set.
        raise SettingError(
            "REGION",
            region,
            "a Region whose Deep Learning Containers the default DLC_IMAGE reaches; an opt-in Region serves them from"
            " another account than 763104351884: set DLC_IMAGE to that Region's image, or to the public copy"
            f" {versions.DLC_PUBLIC_IMAGE}",
        )
    image = raw.replace("${REGION}", region)
    if not re.fullmatch(
        r"[a-z0-9.-]+(:\d+)?(/[a-z0-9._-]+)+(:[\w][\w.-]{0,127}|@sha256:[a-f0-9]{64})", image
    ) or image.endswith(":latest"):
        raise SettingError(
            "DLC_IMAGE", raw, "REGISTRY/REPOSITORY:TAG or @sha256:DIGEST, not :latest (the image must be reproducible)"
        )
    return image


def _tensor_parallel_size(raw: str, gpu_node: InstanceFacts) -> int:
    size = integer("TENSOR_PARALLEL_SIZE", raw, 1, 8)
    if size not in (1, 2, 4, 8) or size > gpu_node.gpus:
        sizes = [str(n) for n in (1, 2, 4, 8) if n <= gpu_node.gpus]
        allowed = sizes[0] if len(sizes) == 1 else f"{', '.join(sizes[:-1])} or {sizes[-1]}"
        raise SettingError(
            "TENSOR_PARALLEL_SIZE",
            raw,
            f"{'only ' if len(sizes) == 1 else ''}{allowed} on {gpu_node.name}, which has {gpu_node.gpus} GPU(s): a"
            " tensor-parallel engine stays inside one node",
        )
    return size


def _kuberay_version(raw: str) -> str:
    # Only the version whose CRDs the repository carries: the typed RayService, its validation and
    # `make kuberay-crds` all use those files. `make vendor-kuberay VERSION=X.Y.Z` moves schemas/kuberay/,
    # imports/, dist/ and the pin together.
    pinned = versions.KUBERAY_OPERATOR.version
    if raw != pinned:
        raise SettingError(
            "KUBERAY_VERSION",
            raw,
            f"{pinned}, the version of the CRDs in schemas/kuberay/ (to move to another release: `make vendor-kuberay"
            " VERSION=X.Y.Z`)",
        )
    return raw


def _addon_versions(
    region: str, kubernetes_version: str, context: Mapping[str, Any]
) -> tuple[tuple[str, str | None], ...]:
    cached = context.get(versions.addon_versions_context_key(region, kubernetes_version))
    resolved = cached if isinstance(cached, Mapping) else {}
    return tuple(
        (name, pinned or (str(resolved[name]) if name in resolved else None))
        for name, pinned in versions.EKS_ADDON_VERSIONS.items()
    )


def _check_model(settings: Settings, raw: Mapping[str, str]) -> None:
    """With the model's facts: an architecture vLLM 0.26 serves, a context within the model's, and one
    sequence of it fitting each GPU (settings/model_fit.py)."""
    facts = settings.model_facts
    if facts is None:
        return
    served = [a for a in facts.architectures if a in vllm_architectures()]
    if not served:
        raise SettingError(
            "MODEL_SOURCE",
            settings.model_source,
            f"a model whose architecture vLLM {versions.VLLM_MINOR} serves"
            f" ({', '.join(facts.architectures)} is not in its registry)",
        )
    if settings.max_model_len > facts.native_context:
        raise SettingError(
            "MAX_MODEL_LEN",
            raw["MAX_MODEL_LEN"],
            f"at most {facts.native_context}, {settings.model_source}'s native context",
        )
    text_only = settings.text_only_multimodal
    # Every phase must start: a compiled one (ENFORCE_EAGER) needs its graphs' memory too.
    eager = settings.eager("prefill") and settings.eager("decode")
    why = misfit(
        facts,
        settings.gpu_node,
        settings.tensor_parallel_size,
        settings.max_model_len,
        text_only=text_only,
        eager=eager,
    )
    if why:
        # A shorter context that fits is the fix the user most likely wants: name that setting then.
        shorter = (
            fit(
                facts, settings.gpu_node, settings.tensor_parallel_size, text_only=text_only, eager=eager
            ).largest_context
            >= 256
        )
        env, value = ("MAX_MODEL_LEN", raw["MAX_MODEL_LEN"]) if shorter else ("MODEL_SOURCE", settings.model_source)
        raise SettingError(env, value, f"a model, context and GPUs that fit: {why}")


MAX_GPU_NODES = 64  # as GPU_NODE_COUNT


def _check_maxima(settings: Settings, raw: Mapping[str, str]) -> None:
    """Each maximum at least its phase's minimum, and the nodes of both maxima within what one nodegroup may hold
    here."""
    for env, minimum_env, maximum, minimum in (
        ("PREFILL_MAX_REPLICAS", "PREFILL_REPLICAS", settings.prefill_max_replicas, settings.prefill_replicas),
        ("DECODE_MAX_REPLICAS", "DECODE_REPLICAS", settings.decode_max_replicas, settings.decode_replicas),
    ):
        if maximum is not None and maximum < minimum:
            raise SettingError(
                env, raw[env], f"empty (fixed) or at least {minimum_env} ({minimum}): the phase scales between the two"
            )
    most = settings.prefill_max_nodes + settings.decode_max_nodes
    if settings.autoscaling and most > MAX_GPU_NODES:
        env = "PREFILL_MAX_REPLICAS" if settings.prefill_max_replicas is not None else "DECODE_MAX_REPLICAS"
        raise SettingError(
            env,
            raw[env],
            f"maxima whose nodes fit the GPU nodegroup's {MAX_GPU_NODES}: {settings.prefill_max_nodes} prefill +"
            f" {settings.decode_max_nodes} decode node(s) of {settings.gpu_node.name} ({settings.engines_per_node}"
            " engine(s) per node)",
        )


def load_settings(
    environ: Mapping[str, str], context: Mapping[str, Any], defaults: Mapping[str, str] | None = None
) -> Settings:
    """Parse and check every setting; raise SettingError on the first bad one. `defaults` replaces the specs'
    defaults (by environment name): the tests pin the configuration they were written for (tests/pinned.py)."""
    check_context_keys(context)
    raw = raw_values(environ, context, defaults)
    # Each setting whose value needs no other is parsed by its spec and handed over under its own name (the
    # Settings field is the context key, of its parser's type): a new one of those is its spec and its field.
    parsed: dict[str, Any] = {spec.context_key: spec.parse(raw[spec.env]) for spec in SPECS if spec.parser is not None}

    region = region_name(raw["REGION"])
    if raw["K8S_VERSION"] not in versions.SUPPORTED_KUBERNETES_VERSIONS:
        raise SettingError(
            "K8S_VERSION",
            raw["K8S_VERSION"],
            ", ".join(versions.SUPPORTED_KUBERNETES_VERSIONS)
            + f" (the kubectl {versions.KUBECTL_LAYER_KUBERNETES_MINOR} layer's skew)",
        )
    endpoint_access = parsed["endpoint_access"]
    public_cidrs = tuple(
        cidr("PUBLIC_ACCESS_CIDRS", c, private=False, prefix=(0, 32)) for c in csv(raw["PUBLIC_ACCESS_CIDRS"])
    )
    if public_cidrs and endpoint_access != "public-and-private":
        # EKS keeps a private endpoint for the nodes whenever the public one is restricted.
        raise SettingError(
            "PUBLIC_ACCESS_CIDRS",
            raw["PUBLIC_ACCESS_CIDRS"],
            f"empty unless ENDPOINT_ACCESS=public-and-private (it is {endpoint_access})",
        )

    observability = parsed["observability"]
    if observability and endpoint_access == "public":
        # The managed Prometheus collector reads the pod list from inside the VPC.
        raise SettingError(
            "OBSERVABILITY", "on", "off while ENDPOINT_ACCESS=public (the metrics collector needs the private endpoint)"
        )

    gpu_node = gpu_node_facts(raw["GPU_NODE_TYPE"], context)
    placement_group, reservation = _capacity(raw, parsed["gpu_capacity_reservation_type"])
    zones = choose_zones(region=region, gpu_type=gpu_node.name, gpu_az=raw["GPU_AZ"].strip(), context=context)

    model_source = parse_model_source(raw["MODEL_SOURCE"])

    settings = Settings(
        **parsed,
        region=region,
        kubernetes_version=raw["K8S_VERSION"],
        vpc_cidr=cidr("VPC_CIDR", raw["VPC_CIDR"], private=True, prefix=(16, 17)),
        availability_zones=zones.vpc_azs,
        public_access_cidrs=public_cidrs,
        admin_principal_arns=_principal_arns(raw["ADMIN_PRINCIPAL_ARNS"]),
        system_node=system_node_facts(raw["SYSTEM_NODE_TYPE"], context),
        gpu_node=gpu_node,
        gpu_node_count=(
            -1 if not raw["GPU_NODE_COUNT"].strip() else integer("GPU_NODE_COUNT", raw["GPU_NODE_COUNT"], 0, 64)
        ),
        gpu_az=zones.gpu_az,
        gpu_az_source=zones.source,
        dlc_image=pinned_image(_image(raw["DLC_IMAGE"], region), context)[0],
        dlc_image_source=pinned_image(_image(raw["DLC_IMAGE"], region), context)[1],
        dlc_image_given=_image(raw["DLC_IMAGE"], region),
        kuberay_version=_kuberay_version(raw["KUBERAY_VERSION"]),
        model_source=model_source,
        model_id=parse_model_id(raw["MODEL_ID"], model_source),
        tensor_parallel_size=_tensor_parallel_size(raw["TENSOR_PARALLEL_SIZE"], gpu_node),
        serve_client_namespaces=namespaces("SERVE_CLIENT_NAMESPACES", raw["SERVE_CLIENT_NAMESPACES"])
        or (raw["NAMESPACE"],),
        eks_addon_versions=_addon_versions(region, raw["K8S_VERSION"], context),
        gpu_placement_group=placement_group,
        gpu_capacity_reservation_id=reservation,
        serve_endpoint=parse_endpoint(raw, region=region, vpc_cidr=raw["VPC_CIDR"]),
        model_source_kms_key_arn=parse_kms_key_arn(
            "MODEL_SOURCE_KMS_KEY_ARN", raw["MODEL_SOURCE_KMS_KEY_ARN"].strip(), model_source
        ),
        model_next_source=parse_next_source("MODEL_NEXT_SOURCE", raw["MODEL_NEXT_SOURCE"].strip(), model_source),
    )
    facts, facts_source = model_facts(model_source, context)
    settings = replace(settings, model_facts=facts, model_facts_source=facts_source)
    if settings.gpu_node_count == -1:  # empty: what the replicas need
        settings = replace(settings, gpu_node_count=settings.gpu_nodes_needed)
    elif settings.gpu_node_count not in (0, settings.gpu_nodes_needed):
        raise SettingError(
            "GPU_NODE_COUNT",
            raw["GPU_NODE_COUNT"],
            f"empty or {settings.gpu_nodes_needed} (what the replicas need), or 0 (parked): {settings.prefill_nodes}"
            f" prefill + {settings.decode_nodes} decode node(s) of {gpu_node.name} ({gpu_node.gpus} GPU(s) each,"
            f" {settings.engines_per_node} engine(s) of TENSOR_PARALLEL_SIZE={settings.tensor_parallel_size} per node;"
            " the phases never share a node)",
        )
    _check_maxima(settings, raw)
    _check_model(settings, raw)
    if settings.unpark_at and settings.unpark_at == settings.park_at:
        raise SettingError("UNPARK_AT", raw["UNPARK_AT"], f"another hour than PARK_AT ({settings.park_at}), or empty")
    check_head_fits(settings.system_node, observability=settings.observability, autoscaling=settings.autoscaling)
    gpu_worker_resources(settings.gpu_node, observability=settings.observability)
    check_engine_cpus(
        settings.gpu_node,
        settings.engines_per_node,
        settings.tensor_parallel_size,
        observability=settings.observability,
    )
    return settings
