"""The model check at synth (settings/model_facts.py, settings/model_fit.py): served by vLLM 0.26, within its
context, one sequence of MAX_MODEL_LEN fitting each GPU — with vLLM 0.26's own memory arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from settings import SettingError
from settings.instance_types import BUILT_IN
from settings.model_facts import (
    BUILT_IN_MODELS,
    VLLM_ARCHITECTURES_FILE,
    ModelFacts,
    model_facts_context_key,
    vllm_architectures,
)
from settings.model_fit import GIB, fit, gpu_budget, misfit
from tests.conftest import run_entry_point, settings_for

QWEN35 = BUILT_IN_MODELS["Qwen/Qwen3.5-9B"]
LLAMA70 = BUILT_IN_MODELS["meta-llama/Llama-3.3-70B-Instruct"]
L4 = BUILT_IN["g6.8xlarge"]
P5 = BUILT_IN["p5.48xlarge"]


def test_the_default_at_4096_fits_an_l4_as_the_design_says() -> None:
    this = fit(QWEN35, L4, 1, text_only=True)
    assert this.fits(4096)
    # vLLM's budget on an L4: what torch reports (1% under nvidia-smi's 23,034 MiB) x 0.90; the weights
    # without the vision tower and the MTP head.
    assert gpu_budget(L4) == int(23_034 * 0.99 * 1024 * 1024 * 0.90)
    assert 16 * GIB < this.weights < 17 * GIB
    # Qwen3.5: 8 full-attention layers x 2 x 4 KV heads x 256 x 2 bytes per token; 24 Gated DeltaNet layers' state.
    assert this.kv_per_token == 8 * 2 * 4 * 256 * 2 == 32_768
    # One state page per sequence, not two: vLLM 0.26 keeps prefix caching off for hybrid models (engine/arg_utils.py),
    # so its Mamba cache mode is "none" and MambaSpec.max_memory_usage_bytes is one page (v1/kv_cache_interface.py).
    assert this.state == 24 * ((16 * 128 * 2 + 32 * 128) * 3 * 2 + 32 * 128 * 128 * 4)


def test_the_70b_model_does_not_fit_one_l4_and_fits_a_p5_at_tp_8() -> None:
    assert not fit(LLAMA70, L4, 1, text_only=True).fits(4096)
    assert fit(LLAMA70, P5, 8, text_only=True).fits(4096)
    assert fit(LLAMA70, P5, 8, text_only=True).weights == LLAMA70.weight_bytes // 8
    # Per GPU the KV heads split with the tensor-parallel size: 8 heads over 8 GPUs leave one each.
    assert LLAMA70.kv_bytes_per_token(8) == 2 * 1 * 128 * 2 * 80


def test_a_context_past_the_kv_budget_is_refused_with_the_largest_that_fits() -> None:
    this = fit(QWEN35, L4, 1, text_only=True)
    largest = this.largest_context
    assert this.fits(largest) and not this.fits(largest + 1)
    why = misfit(QWEN35, L4, 1, 131_072, text_only=True)
    assert f"MAX_MODEL_LEN up to {largest}" in why and "Qwen/Qwen3.5-9B on g6.8xlarge (L4, TP 1) needs" in why
    assert misfit(QWEN35, L4, 1, 4096, text_only=True) == ""


def test_the_vision_tower_counts_unless_the_endpoint_is_text_only() -> None:
    with_images, text_only = fit(QWEN35, L4, 1, text_only=False), fit(QWEN35, L4, 1, text_only=True)
    assert with_images.weights - text_only.weights == QWEN35.text_only_skipped_bytes
    assert with_images.largest_context < text_only.largest_context


@pytest.mark.parametrize(
    ("env", "setting", "fragments"),
    [
        (
            {"MODEL_SOURCE": "meta-llama/Llama-3.3-70B-Instruct", "MODEL_ID": "llama-3.3-70b"},
            "MODEL_SOURCE",
            ["needs 136.5 GiB per GPU", "of 20.0 GiB available", "p5.48xlarge (TP 2)"],
        ),
        ({"MAX_MODEL_LEN": "1048576"}, "MAX_MODEL_LEN", ["at most 262144"]),
        ({"MAX_MODEL_LEN": "131072"}, "MAX_MODEL_LEN", ["MAX_MODEL_LEN up to", "GPU_NODE_TYPE"]),
    ],
)
def test_what_does_not_fit_is_one_line_naming_the_setting(
    env: dict[str, str], setting: str, fragments: list[str]
) -> None:
    with pytest.raises(SettingError) as caught:
        settings_for(env, {})
    assert caught.value.env_name == setting
    message = str(caught.value)
    assert "\n" not in message and all(f in message for f in fragments), message


def test_the_70b_model_passes_on_a_p5_at_tp_8() -> None:
    env = {
        "MODEL_SOURCE": "meta-llama/Llama-3.3-70B-Instruct",
        "MODEL_ID": "llama-3.3-70b",
        "GPU_NODE_TYPE": "p5.48xlarge",
        "TENSOR_PARALLEL_SIZE": "8",
    }
    settings = settings_for({**env, "REGION": "us-east-2", "GPU_AZ": "us-east-2b"}, {})
    assert settings.model_facts == LLAMA70 and not settings.text_only_multimodal


def test_an_architecture_vllm_026_does_not_serve_is_refused() -> None:
    facts = ModelFacts("acme/new-model", ("AcmeForCausalLM",), "bfloat16", 2 * GIB, 24, 24, 8, 128, 32_768, False)
    context = {model_facts_context_key("acme/new-model"): facts.to_context()}
    with pytest.raises(SettingError, match="AcmeForCausalLM is not in its registry"):
        settings_for({"MODEL_SOURCE": "acme/new-model"}, context)
    served = ModelFacts("acme/llama-like", ("LlamaForCausalLM",), "bfloat16", 2 * GIB, 24, 24, 8, 128, 32_768, False)
    settings = settings_for(
        {"MODEL_SOURCE": "acme/llama-like"}, {model_facts_context_key("acme/llama-like"): served.to_context()}
    )
    assert settings.model_facts == served and settings.model_facts_source == "cached look-up"


def test_the_registry_data_is_vllm_026s() -> None:
    text = VLLM_ARCHITECTURES_FILE.read_text()
    assert VLLM_ARCHITECTURES_FILE.name == "vllm_0_26_architectures.txt" and "vLLM 0.26.0" in text.splitlines()[0]
    assert {"Qwen3_5ForConditionalGeneration", "Qwen3ForCausalLM", "LlamaForCausalLM"} <= vllm_architectures()
    assert len(vllm_architectures()) > 200
    assert all(set(m.architectures) <= vllm_architectures() for m in BUILT_IN_MODELS.values())


def _serve_engine(settings_env: dict[str, str]) -> dict[str, object]:
    from k8s_constructs.ray_service import build_rayservice_chart

    ray_service = build_rayservice_chart(settings_for(settings_env)).ray_service.to_json()
    engine: dict[str, object] = yaml.safe_load(ray_service["spec"]["serveConfigV2"])["applications"][0]["args"][
        "prefill_config"
    ]["engine_kwargs"]
    return engine


def test_a_multimodal_model_serves_text_only_unless_images_are_asked_for() -> None:
    assert _serve_engine({})["language_model_only"] is True
    # With the vision tower an L4 holds a shorter context: 2048 still fits.
    assert "language_model_only" not in _serve_engine({"MODEL_IMAGES": "on", "MAX_MODEL_LEN": "2048"})
    assert "language_model_only" not in _serve_engine(
        {"MODEL_SOURCE": "meta-llama/Llama-3.1-8B-Instruct", "MODEL_ID": "llama-3.1-8b"}
    )


def test_a_model_the_synth_does_not_know_is_served_text_only_too() -> None:
    """An S3 MODEL_SOURCE (or a Hub id) without `make lookup` has no facts: with MODEL_IMAGES=off it still gets
    language_model_only, so a multimodal model behind it loads no vision tower. vLLM 0.26 passes the flag to the
    multimodal config only (config/model.py, `if self._model_info.supports_multimodal`): a text-only model ignores it.
    """
    from k8s_constructs.serve_config import pd_application
    from tests.conftest import settings_for

    unknown = {"MODEL_SOURCE": "s3://example-models/qwen3.5-9b", "MODEL_ID": "qwen"}
    assert settings_for(unknown).model_facts is None
    assert _serve_engine(unknown)["language_model_only"] is True
    assert _serve_engine({"MODEL_SOURCE": "example-org/some-model", "MODEL_ID": "some"})["language_model_only"] is True
    assert "language_model_only" not in _serve_engine({**unknown, "MODEL_IMAGES": "on"})
    # Known as text-only (a cached look-up of an S3 copy of Llama): nothing to skip, the flag is left out.
    llama = BUILT_IN_MODELS["meta-llama/Llama-3.1-8B-Instruct"]
    source = "s3://example-models/llama-3.1-8b"
    context = {model_facts_context_key(source): {**llama.to_context(), "source": source}}
    settings = settings_for({"MODEL_SOURCE": source, "MODEL_ID": "llama"}, context)
    assert settings.model_facts is not None and not settings.model_facts.multimodal
    engine = pd_application(settings).to_serve_config()["applications"][0]["args"]["decode_config"]["engine_kwargs"]
    assert "language_model_only" not in engine


# app.py's main() in this process (tests/test_settings_bad_values.py runs the real process once).


def test_the_app_stops_with_one_line_for_a_model_that_does_not_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    env = {"MODEL_SOURCE": "meta-llama/Llama-3.3-70B-Instruct", "MODEL_ID": "llama-3.3-70b"}
    status, _, stderr = run_entry_point("app", env, tmp_path / "out", monkeypatch, capfd)
    assert status == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: MODEL_SOURCE='meta-llama/Llama-3.3-70B-Instruct' is not allowed:"
    ), stderr
    assert "Traceback" not in stderr


def test_an_unknown_model_synthesizes_with_a_notice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    env = {"MODEL_SOURCE": "someone/private-model", "MODEL_ID": "private"}
    status, _, stderr = run_entry_point("app", env, tmp_path / "out", monkeypatch, capfd)
    assert status == 0, stderr[-2000:]
    assert "notice: MODEL_SOURCE=someone/private-model is neither built in nor looked up" in stderr
