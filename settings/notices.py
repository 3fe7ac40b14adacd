"""The synth's notices about a configuration that is valid but probably not what was meant: GPUs a phase leaves
idle, a context far below what fits, a gated model without a token, an image other than the one the synth-time
checks were vendored from. Each one line with the numbers; app.py prints them."""

from __future__ import annotations

from settings import versions
from settings.configuration import Settings
from settings.model_fit import fit

# A MAX_MODEL_LEN this many times below the longest sequence that fits is worth a word (an L4 with the default
# model fits 13x its 4,096; an L40S 64x).
CONTEXT_HEADROOM = 16


def idle_gpus(settings: Settings) -> list[str]:
    if settings.gpu_node_count == 0:  # parked: no GPU is paid for
        return []
    notices = []
    for phase, replicas, nodes in (
        ("prefill", settings.prefill_replicas, settings.prefill_nodes),
        ("decode", settings.decode_replicas, settings.decode_nodes),
    ):
        total, used = nodes * settings.gpu_node.gpus, replicas * settings.tensor_parallel_size
        if total > used:
            notices.append(
                f"notice: the {phase} phase uses {used} of the {total} GPU(s) of its {nodes} {settings.gpu_node.name}"
                f" node(s) ({total - used} idle, paid for): {phase.upper()}_REPLICAS or TENSOR_PARALLEL_SIZE would"
                " use them"
            )
    return notices


def short_context(settings: Settings) -> list[str]:
    facts = settings.model_facts
    if facts is None:
        return []
    eager = settings.eager("prefill") and settings.eager("decode")
    sizing = fit(
        facts, settings.gpu_node, settings.tensor_parallel_size, text_only=settings.text_only_multimodal, eager=eager
    )
    longest = min(sizing.largest_context, facts.native_context)
    if longest < CONTEXT_HEADROOM * settings.max_model_len:
        return []
    return [
        f"notice: MAX_MODEL_LEN={settings.max_model_len} where one sequence of up to {longest:,} tokens fits"
        f" {settings.gpu_node.name}'s GPU ({settings.model_source}'s own context: {facts.native_context:,}): a longer"
        " MAX_MODEL_LEN serves longer prompts (the fit table in docs/models.md)"
    ]


def gated_without_token(settings: Settings) -> list[str]:
    facts = settings.model_facts
    if facts is None or not facts.gated or settings.hf_token_secret_name:
        return []
    return [
        f"notice: {settings.model_source} is gated on the Hub and HF_TOKEN_SECRET_NAME is empty: the workers could not"
        " download it (the preflight refuses the deploy); put a token whose account accepted the licence in Secrets"
        " Manager and name it"
    ]


def other_image(settings: Settings) -> list[str]:
    default_image = versions.DLC_IMAGE_TEMPLATE.replace("${REGION}", settings.region)
    if settings.ray_version == versions.RAY_VERSION and settings.dlc_image_given in (
        default_image,
        versions.DLC_PUBLIC_IMAGE,
    ):
        return []
    return [
        f"notice: DLC_IMAGE/RAY_VERSION are not the image the synth-time checks were vendored from (Ray"
        f" {versions.RAY_VERSION}, vLLM {versions.VLLM_VERSION}): engine args, architectures and the fit are checked"
        " as of those, and the change re-creates the RayCluster; docs/upgrading.md (A new Ray LLM image)"
    ]


def synth_notices(settings: Settings) -> list[str]:
    return [*idle_gpus(settings), *short_context(settings), *gated_without_token(settings), *other_image(settings)]
