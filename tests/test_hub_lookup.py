"""`make lookup`'s model facts from the Hugging Face Hub, on recorded answers served from 127.0.0.1 (HF_ENDPOINT):
a public model, a gated one (401 without the token, 200 with it) and a missing one (404)."""

from __future__ import annotations

import http.server
import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from preflight.hub import HubError, ShapeNotUnderstood, facts_from_files, hub_model_facts
from settings import SettingError
from settings.model_facts import BUILT_IN_MODELS, model_facts_context_key
from tests.conftest import settings_for
from tests.loopback import serving

# Qwen3.5-9B's config.json (its text part as published; vision config abridged) and index metadata.
QWEN35_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "text_config": {
        "num_hidden_layers": 32,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 8,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "hidden_size": 4096,
        "max_position_embeddings": 262144,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "mamba_ssm_dtype": "float32",
        "dtype": "bfloat16",
    },
    "vision_config": {"depth": 27, "hidden_size": 1152},
}
LLAMA_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "torch_dtype": "bfloat16",
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "max_position_embeddings": 131072,
}
TOKEN = "hf_test_token"


def _index(total: int) -> dict[str, Any]:
    return {"metadata": {"total_size": total}, "weight_map": {}}


FILES = {
    "Qwen/Qwen3.5-9B": {"config.json": QWEN35_CONFIG, "model.safetensors.index.json": _index(19_306_216_416)},
    "meta-llama/Llama-3.1-8B-Instruct": {
        "config.json": LLAMA_CONFIG,
        "model.safetensors.index.json": _index(16_060_522_496),
    },
    "acme/small-llama": {"config.json": LLAMA_CONFIG},  # one model.safetensors, no index
}
SINGLE_FILE_SIZE = 2_471_645_608
GATED = {"meta-llama/Llama-3.1-8B-Instruct"}
FORBIDDEN = {"meta-llama/Llama-3.3-70B-Instruct"}  # gated, and this account has not accepted the licence


@pytest.fixture(scope="module")
def hub() -> Iterator[str]:
    class Hub(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            repo, _, rest = self.path.lstrip("/").partition("/resolve/main/")
            if repo in FORBIDDEN:
                self.send_response(403)
                self.end_headers()
                return
            if repo in GATED and self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self.send_response(401)
                self.end_headers()
                return
            body = FILES.get(repo, {}).get(rest)
            if body is None:
                # As the Hub does: a repository it does not know is 401 to anyone, with X-Error-Code.
                self.send_response(401 if repo not in FILES else 404)
                self.send_header("X-Error-Code", "RepoNotFound" if repo not in FILES else "EntryNotFound")
                self.end_headers()
                return
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_HEAD(self) -> None:
            # As the Hub answers a file in LFS: a redirect to its CDN, the size in X-Linked-Size.
            if self.path == "/acme/small-llama/resolve/main/model.safetensors":
                self.send_response(302)
                self.send_header("Location", "http://127.0.0.1:9/cdn/never-asked")
                self.send_header("X-Linked-Size", str(SINGLE_FILE_SIZE))
                self.end_headers()
                return
            self.send_response(404)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with serving(Hub) as base:
        yield base


def test_a_public_hybrid_model_gives_the_built_in_figures(hub: str) -> None:
    facts = hub_model_facts("Qwen/Qwen3.5-9B", base=hub)
    built_in = BUILT_IN_MODELS["Qwen/Qwen3.5-9B"]
    same = (
        "architectures",
        "dtype",
        "weight_bytes",
        "layers",
        "attention_layers",
        "kv_heads",
        "head_dim",
        "native_context",
        "multimodal",
        "linear_state_bytes_per_layer",
    )
    assert {k: getattr(facts, k) for k in same} == {k: getattr(built_in, k) for k in same}


def test_a_gated_model_needs_the_token(hub: str) -> None:
    with pytest.raises(HubError) as caught:
        hub_model_facts("meta-llama/Llama-3.1-8B-Instruct", base=hub)
    assert caught.value.status == 401 and "set HF_TOKEN_SECRET_NAME" in str(caught.value)
    facts = hub_model_facts("meta-llama/Llama-3.1-8B-Instruct", token=TOKEN, base=hub)
    assert (facts.kv_heads, facts.head_dim, facts.attention_layers, facts.multimodal) == (
        8,
        128,
        32,
        False,
    )  # head_dim from hidden / heads
    with pytest.raises(HubError, match="the token cannot read it"):
        hub_model_facts("meta-llama/Llama-3.1-8B-Instruct", token="hf_wrong", base=hub)


def test_a_missing_model_is_one_line(hub: str) -> None:
    with pytest.raises(HubError) as caught:
        hub_model_facts("Qwen/Qwen3.5-9b-typo", base=hub)
    assert caught.value.status == 404 and "misspelt MODEL_SOURCE" in str(caught.value) and "\n" not in str(caught.value)


def test_an_index_without_its_size_is_refused() -> None:
    with pytest.raises(HubError, match=r"no metadata\.total_size"):
        facts_from_files("acme/x", LLAMA_CONFIG, {"weight_map": {}})


def test_the_cached_facts_drive_the_fit_check(hub: str) -> None:
    facts = hub_model_facts("Qwen/Qwen3.5-9B", base=hub)
    context = {
        model_facts_context_key("Qwen/Qwen3.5-9B"): json.loads(json.dumps(facts.to_context()))
    }  # as cdk.context.json holds it
    settings = settings_for({}, context)
    # What vLLM skips of a built-in model comes from the table (the index has no per-tensor sizes).
    assert settings.model_facts == replace(
        facts, text_only_skipped_bytes=BUILT_IN_MODELS["Qwen/Qwen3.5-9B"].text_only_skipped_bytes
    )
    assert settings.model_facts_source == "cached look-up"
    # And they decide: the same context fits as with the built-in facts, one past the largest does not.
    from settings.model_fit import fit

    largest = fit(BUILT_IN_MODELS["Qwen/Qwen3.5-9B"], settings.gpu_node, 1, text_only=True).largest_context
    assert settings_for({"MAX_MODEL_LEN": str(largest)}, context).max_model_len == largest
    with pytest.raises(SettingError, match="MAX_MODEL_LEN up to"):
        settings_for({"MAX_MODEL_LEN": str(largest + 1)}, context)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"layer_types": ["attention", "mamba"] * 16}, "layer kinds"),
        ({"sliding_window": 4096}, "sliding-window"),
        ({"kv_lora_rank": 512}, "latent attention"),
        ({"max_position_embeddings": None}, "lacks max_position_embeddings"),
    ],
)
def test_a_shape_the_check_cannot_size_gives_no_facts(change: dict[str, Any], fragment: str) -> None:
    """Better unchecked than wrongly refused: Granite-style layer kinds, sliding windows, MLA, unknown keys."""
    config = {**LLAMA_CONFIG, **{k: v for k, v in change.items() if v is not None}}
    for key in [k for k, v in change.items() if v is None]:
        config.pop(key)
    with pytest.raises(ShapeNotUnderstood, match=fragment):
        facts_from_files("acme/x", config, _index(1))


def test_rope_scaling_lengthens_the_native_context_as_vllm_does() -> None:
    config = {**LLAMA_CONFIG, "max_position_embeddings": 32768, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}
    assert facts_from_files("acme/x", config, _index(1)).native_context == 131072
    llama3 = {**LLAMA_CONFIG, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}  # already the long context
    assert facts_from_files("acme/x", llama3, _index(1)).native_context == 131072


def test_a_gated_model_whose_licence_is_not_accepted_is_403(hub: str) -> None:
    with pytest.raises(HubError) as caught:
        hub_model_facts("meta-llama/Llama-3.3-70B-Instruct", token=TOKEN, base=hub)
    assert caught.value.status == 403 and "accept the model's licence" in str(caught.value)


def test_make_lookup_caches_the_models_facts(
    hub: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """tools/lookup.py: the AWS answers (stubbed out here: tests/test_lookup.py has them on moto) and the
    Hub's, with the token of HF_TOKEN_SECRET_NAME for a gated model, into cdk.context.json."""
    from tools import lookup

    written: dict[str, Any] = {}
    monkeypatch.setenv("HF_ENDPOINT", hub)
    monkeypatch.setenv("MODEL_SOURCE", "meta-llama/Llama-3.1-8B-Instruct")
    monkeypatch.setenv("MODEL_ID", "llama-3.1-8b")
    monkeypatch.setenv("HF_TOKEN_SECRET_NAME", "prod/hf-token")
    monkeypatch.setattr(lookup, "look_up", lambda session, **kwargs: {})
    monkeypatch.setattr(lookup, "write_cached_lookups", written.update)
    monkeypatch.setattr(lookup, "_hub_token", lambda name, region: TOKEN if name == "prod/hf-token" else "")
    monkeypatch.setattr(lookup.boto3.session, "Session", lambda *a, **k: None)
    monkeypatch.setattr(lookup, "read_project_context", lambda: dict(written))
    assert lookup.main() == 0, capsys.readouterr().err
    cached = written[model_facts_context_key("meta-llama/Llama-3.1-8B-Instruct")]
    assert cached["weight_bytes"] == 16_060_522_496 and cached["architectures"] == ["LlamaForCausalLM"]
    # Without the token the gated model is one line and exit 1 (the AWS answers are still cached).
    monkeypatch.setattr(lookup, "_hub_token", lambda name, region: "")
    assert lookup.main() == 1
    assert "set HF_TOKEN_SECRET_NAME" in capsys.readouterr().err


def test_a_single_file_checkpoint_takes_its_size_from_the_hubs_head_answer(hub: str) -> None:
    facts = hub_model_facts("acme/small-llama", base=hub)
    assert facts.weight_bytes == SINGLE_FILE_SIZE and facts.architectures == ("LlamaForCausalLM",)
