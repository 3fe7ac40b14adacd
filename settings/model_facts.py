"""What the synth knows about MODEL_SOURCE: enough to tell, before anything is deployed, whether vLLM 0.26 can
serve it and whether it fits the GPUs.

Sources, in order: `make lookup` (the model's config.json and safetensors index from the Hugging Face Hub,
cached in cdk.context.json); else the built-in table below, from the models' published files; else nothing
(the synth says so and checks nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from functools import cache
from typing import Any

from settings.versions import vllm_data_file

VLLM_ARCHITECTURES_FILE = vllm_data_file("architectures.txt")
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
ENGINE_DTYPE_BYTES = 2  # the serve config's dtype: bfloat16


@dataclass(frozen=True)
class ModelFacts:
    source: str  # the Hugging Face repository
    architectures: tuple[str, ...]
    dtype: str
    weight_bytes: int  # the safetensors index's total_size: every tensor of the checkpoint
    layers: int
    attention_layers: int  # the layers that keep a KV cache (hybrid models: the full-attention ones only)
    kv_heads: int
    head_dim: int
    native_context: int  # max_position_embeddings
    multimodal: bool
    # Hybrid models (Mamba, Gated DeltaNet): the fixed state each of the other layers keeps per sequence.
    linear_state_bytes_per_layer: int = 0
    # Weights vLLM does not load for a text-only endpoint (a vision tower with language_model_only, an MTP head).
    text_only_skipped_bytes: int = 0
    where: str = ""  # where the figures come from
    gated: bool = False  # the Hub asks for an accepted licence: the workers need HF_TOKEN_SECRET_NAME's token

    @property
    def linear_layers(self) -> int:
        return self.layers - self.attention_layers if self.linear_state_bytes_per_layer else 0

    def kv_bytes_per_token(self, tensor_parallel_size: int) -> int:
        """Full-attention KV cache per token on one GPU: K and V, the GPU's share of the KV heads, every attention
        layer."""
        heads = max(1, self.kv_heads // tensor_parallel_size)
        # The engines run dtype bfloat16 (the serve config), whatever the checkpoint's: the cache is bf16 too.
        return 2 * heads * self.head_dim * ENGINE_DTYPE_BYTES * self.attention_layers

    def to_context(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @staticmethod
    def from_context(value: Mapping[str, Any]) -> ModelFacts:
        fields = ModelFacts.__dataclass_fields__
        known: dict[str, Any] = {k: tuple(v) if k == "architectures" else v for k, v in value.items() if k in fields}
        return ModelFacts(**known)


def model_facts_context_key(source: str) -> str:
    """Where `make lookup` caches a model's facts (cdk.context.json)."""
    return f"ray-llm:model:{source}"


# The state pages a hybrid layer keeps per sequence: one. vLLM 0.26 leaves prefix caching off for hybrid models
# (engine/arg_utils.py, _set_default_chunked_prefill_and_prefix_caching_args; the serve config does not turn it on),
# so the Mamba cache mode stays "none" and MambaSpec.max_memory_usage_bytes counts one page per request
# (v1/kv_cache_interface.py; "align", two pages, only comes with prefix caching). Read by the Hub look-up too.
HYBRID_STATE_PAGES = 1
# Qwen3.5's Gated DeltaNet state per layer and sequence, as vLLM 0.26 sizes it (mamba_utils.py): a conv
# state of (16*128*2 + 32*128) x (4-1) in bf16 and a temporal state of 32 x 128 x 128 in float32.
_QWEN35_STATE = HYBRID_STATE_PAGES * ((16 * 128 * 2 + 32 * 128) * 3 * 2 + 32 * 128 * 128 * 4)

BUILT_IN_MODELS: Mapping[str, ModelFacts] = {
    facts.source: facts
    for facts in (
        ModelFacts(
            source="Qwen/Qwen3.5-9B",
            architectures=("Qwen3_5ForConditionalGeneration",),
            dtype="bfloat16",
            weight_bytes=19_306_216_416,
            layers=32,
            attention_layers=8,  # layer_types: (3 linear_attention + 1 full_attention) x 8
            kv_heads=4,
            head_dim=256,
            native_context=262_144,
            multimodal=True,
            linear_state_bytes_per_layer=_QWEN35_STATE,
            # The vision tower (~0.45B parameters) with language_model_only, and the MTP head (~0.24B), in bf16.
            text_only_skipped_bytes=2 * (450_000_000 + 240_000_000),
            where=(
                "config.json and model.safetensors.index.json of Qwen/Qwen3.5-9B at c2022362 (copies quoted in public"
                " tests and logs)"
            ),
        ),
        ModelFacts(
            source="Qwen/Qwen3-32B",
            architectures=("Qwen3ForCausalLM",),
            dtype="bfloat16",
            weight_bytes=65_524_246_528,
            layers=64,
            attention_layers=64,
            kv_heads=8,
            head_dim=128,
            native_context=40_960,
            multimodal=False,
            where=(
                "config.json of Qwen/Qwen3-32B at 9216db57; total_size 65524246528 (17 shards, 32,762,123,264 BF16"
                " parameters)"
            ),
        ),
        ModelFacts(
            source="meta-llama/Llama-3.1-8B-Instruct",
            architectures=("LlamaForCausalLM",),
            dtype="bfloat16",
            weight_bytes=16_060_522_496,
            layers=32,
            attention_layers=32,
            kv_heads=8,
            head_dim=128,
            native_context=131_072,
            multimodal=False,
            where="config.json and model.safetensors.index.json of meta-llama/Llama-3.1-8B-Instruct at 0e9e39f2",
            gated=True,  # Meta's licence, accepted on the Hub
        ),
        ModelFacts(
            source="meta-llama/Llama-3.3-70B-Instruct",
            architectures=("LlamaForCausalLM",),
            dtype="bfloat16",
            weight_bytes=141_107_412_992,
            layers=80,
            attention_layers=80,
            kv_heads=8,
            head_dim=128,
            native_context=131_072,
            multimodal=False,
            where=(
                "meta-llama/Llama-3.3-70B-Instruct at 6f6073b4: 70,553,706,496 BF16 parameters (the Hub's count) x 2"
                " bytes"
            ),
            gated=True,
        ),
    )
}


def model_facts(source: str, context: Mapping[str, Any]) -> tuple[ModelFacts | None, str]:
    """(facts, where they came from): the cached look-up, the built-in table, or (None, why)."""
    cached = context.get(model_facts_context_key(source))
    if isinstance(cached, Mapping):
        facts = ModelFacts.from_context(cached)
        if source in BUILT_IN_MODELS and not facts.text_only_skipped_bytes:
            # The Hub's index has no per-tensor sizes: what vLLM skips of a built-in model comes from the table.
            facts = replace(facts, text_only_skipped_bytes=BUILT_IN_MODELS[source].text_only_skipped_bytes)
        return facts, "cached look-up"
    if source in BUILT_IN_MODELS:
        return BUILT_IN_MODELS[source], "built-in table"
    return None, "unknown model"


@cache
def vllm_architectures() -> frozenset[str]:
    """Every architecture vLLM 0.26 serves (settings/data/, from its model registry)."""
    lines = VLLM_ARCHITECTURES_FILE.read_text().splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))
