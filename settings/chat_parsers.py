"""What the endpoint does with tool calls and a thinking model's reasoning (TOOL_CALL_PARSER, REASONING_PARSER), and
the vLLM arguments a user adds to both engines (ENGINE_ARGS).

Ray Serve LLM 2.58 gives each engine_kwargs key of vLLM's FrontendArgs to vLLM's own OpenAI serving, and its PD
orchestrator sends the prefill engine a copy of every request (tools, response_format and chat_template_kwargs
kept): a request the prefill engine is not configured for is refused there, so every key here lands in both phases
alike. Parser names are checked against vLLM's registries, vendored with its engine arguments (settings/data/).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from settings.engine_args import REASONING_PARSERS, TOOL_PARSERS, parser_names, problem_of
from settings.errors import SettingError
from settings.parsers import closest
from settings.versions import VLLM_MINOR

AUTO: Final = "auto"
OFF: Final = "off"


@dataclass(frozen=True)
class ModelParsers:
    """The parsers a model family's own recipe names for vLLM (its model card's `vllm serve` line)."""

    tool_call: str
    reasoning: str  # OFF: not a thinking model
    source_pattern: str = ""  # a regex the model source must match too (one architecture, several formats)


# By architecture (the model's config.json, as its facts hold it): the first entry whose pattern matches.
MODEL_PARSERS: Final[Mapping[str, tuple[ModelParsers, ...]]] = {
    # Qwen3.5's card: --reasoning-parser qwen3 --tool-call-parser qwen3_coder (its XML tool-call format).
    "Qwen3_5ForConditionalGeneration": (ModelParsers("qwen3_coder", "qwen3"),),
    "Qwen3_5ForCausalLM": (ModelParsers("qwen3_coder", "qwen3"),),
    # Qwen3's card: hermes-style <tool_call> JSON, <think> reasoning.
    "Qwen3ForCausalLM": (ModelParsers("hermes", "qwen3"),),
    # Llama 3.1-3.3's JSON tool calls (vLLM's docs: --tool-call-parser llama3_json); Llama 2 has no tool format.
    "LlamaForCausalLM": (ModelParsers("llama3_json", OFF, r"(?i)llama-3"),),
}


@dataclass(frozen=True)
class ParserName:
    """TOOL_CALL_PARSER or REASONING_PARSER: auto (the model's own), off, or a name in vLLM's registry."""

    table: str
    env: str

    @property
    def allowed(self) -> str:
        return f"{AUTO}, {OFF} or a {self.kind} parser vLLM {VLLM_MINOR} registers (docs/serving-api.md)"

    @property
    def kind(self) -> str:
        return "tool-call" if self.table == TOOL_PARSERS else "reasoning"

    def __call__(self, env: str, raw: str) -> str:
        value = raw.strip()
        names = parser_names(self.table)
        if value in (AUTO, OFF) or value in names:
            return value
        raise SettingError(env, raw, f"{self.allowed}{closest(value, [AUTO, OFF, *names])}")


TOOL_CALL_PARSER: Final = ParserName(TOOL_PARSERS, "TOOL_CALL_PARSER")
REASONING_PARSER: Final = ParserName(REASONING_PARSERS, "REASONING_PARSER")


def model_parsers(architectures: tuple[str, ...], source: str) -> ModelParsers | None:
    """The parsers of a model's family, or None where none is known."""
    for architecture in architectures:
        for entry in MODEL_PARSERS.get(architecture, ()):
            if not entry.source_pattern or re.search(entry.source_pattern, source):
                return entry
    return None


@dataclass(frozen=True)
class ChatParsers:
    """The parsers both engines get ("" = none) and, for `auto` with no known parser, the synth's notice."""

    tool_call: str = ""
    reasoning: str = ""
    notices: tuple[str, ...] = ()

    def engine_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self.tool_call:
            # Auto tool choice too: `auto`, and tools with no tool_choice (the OpenAI default), need it.
            kwargs.update({"enable_auto_tool_choice": True, "tool_call_parser": self.tool_call})
        if self.reasoning:
            kwargs["reasoning_parser"] = self.reasoning
        return kwargs


def choose_parsers(tool_call: str, reasoning: str, architectures: tuple[str, ...] | None, source: str) -> ChatParsers:
    """Resolve `auto` from the model's facts (None: not known), and say where nothing is known."""
    known = model_parsers(architectures or (), source)
    notices = []
    chosen = {}
    for env, value, attribute in (
        ("TOOL_CALL_PARSER", tool_call, "tool_call"),
        ("REASONING_PARSER", reasoning, "reasoning"),
    ):
        if value == OFF:
            chosen[attribute] = ""
        elif value != AUTO:
            chosen[attribute] = value
        elif known is not None:
            chosen[attribute] = "" if getattr(known, attribute) == OFF else getattr(known, attribute)
        else:
            chosen[attribute] = ""
            what = "tool calls answer 400" if attribute == "tool_call" else "a thinking model's reasoning stays in"
            what += "" if attribute == "tool_call" else " the answer's content"
            notices.append(
                f"notice: {env}={AUTO}: no {'tool-call' if attribute == 'tool_call' else 'reasoning'} parser is known"
                f" for MODEL_SOURCE={source} ({', '.join(architectures or ()) or 'architecture not known'}), so"
                f" {what}; set {env} to one of vLLM {VLLM_MINOR}'s (docs/serving-api.md) or {OFF} to silence this"
            )
    return ChatParsers(chosen["tool_call"], chosen["reasoning"], tuple(notices))


# The engine_kwargs keys the project sets itself, and the setting (or the reason) that owns each: ENGINE_ARGS may not
# set them, or the two would disagree about what was deployed.
OWNED_ENGINE_ARGS: Final[Mapping[str, str]] = {
    "model": "MODEL_SOURCE (Ray Serve LLM passes the model itself)",
    "served_model_name": "MODEL_ID (Ray Serve LLM names the model itself)",
    "tokenizer": "MODEL_SOURCE (the tokenizer comes with the model)",
    "max_model_len": "MAX_MODEL_LEN",
    "tensor_parallel_size": "TENSOR_PARALLEL_SIZE",
    "pipeline_parallel_size": "TENSOR_PARALLEL_SIZE (the placement bundles count GPUs from it alone)",
    "data_parallel_size": "PREFILL_REPLICAS and DECODE_REPLICAS (one engine per replica)",
    "kv_transfer_config": "KV_TRANSPORT (the PD connector, one per phase)",
    "enforce_eager": "ENFORCE_EAGER",
    "language_model_only": "MODEL_IMAGES",
    "gpu_memory_utilization": "MAX_MODEL_LEN's fit check, which counts with 0.90 of each GPU",
    "dtype": "the fit check, which counts bfloat16 weights and KV cache",
    "tool_call_parser": "TOOL_CALL_PARSER",
    "enable_auto_tool_choice": "TOOL_CALL_PARSER (on with a parser)",
    "reasoning_parser": "REASONING_PARSER",
}


@dataclass(frozen=True)
class EngineArgsJson:
    """ENGINE_ARGS' parser: the object as canonical JSON (sorted keys), "" for none; Settings.extra_engine_kwargs
    reads it back."""

    @property
    def allowed(self) -> str:
        return (
            f"empty, or a JSON object of vLLM {VLLM_MINOR} EngineArgs and FrontendArgs fields that no other setting"
            " owns"
        )

    def __call__(self, env: str, raw: str) -> str:
        value = parse_engine_args(raw)
        return json.dumps(value, sort_keys=True, separators=(",", ":")) if value else ""


def parse_engine_args(raw: str) -> dict[str, Any]:
    """ENGINE_ARGS: a JSON object of vLLM arguments for both engines; each key one vLLM takes and the project does
    not own. Empty: none."""
    text = raw.strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise SettingError("ENGINE_ARGS", raw, f"a JSON object ({error.msg} at column {error.colno})") from None
    if not isinstance(value, dict):
        raise SettingError("ENGINE_ARGS", raw, 'a JSON object such as {"max_num_seqs": 64}')
    for key, item in value.items():
        if key in OWNED_ENGINE_ARGS:
            raise SettingError(f"ENGINE_ARGS.{key}", item, f"not set here: it is owned by {OWNED_ENGINE_ARGS[key]}")
        problem = problem_of(key, item)
        if problem:
            raise SettingError(f"ENGINE_ARGS.{key}", item, problem)
    return dict(sorted(value.items()))
