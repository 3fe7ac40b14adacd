"""The synth's notices for a configuration that is valid but likely not meant (settings/notices.py)."""

from __future__ import annotations

from settings import versions
from settings.notices import synth_notices
from tests.conftest import settings_for


def _notices(env: dict[str, str]) -> list[str]:
    return synth_notices(settings_for(env))


def test_the_pinned_configuration_has_none() -> None:
    assert _notices({}) == []


def test_gpus_a_phase_leaves_idle_are_counted_per_phase() -> None:
    notices = _notices({"GPU_NODE_TYPE": "g6e.12xlarge", "PREFILL_REPLICAS": "4", "TENSOR_PARALLEL_SIZE": "1"})
    assert [n for n in notices if "idle" in n] == [
        "notice: the decode phase uses 1 of the 4 GPU(s) of its 1 g6e.12xlarge node(s) (3 idle, paid for):"
        " DECODE_REPLICAS or TENSOR_PARALLEL_SIZE would use them"
    ]


def test_a_context_far_below_what_fits_says_the_longest_that_fits() -> None:
    (notice,) = [n for n in _notices({"GPU_NODE_TYPE": "g6e.12xlarge"}) if "MAX_MODEL_LEN" in n]
    assert "MAX_MODEL_LEN=4096 where one sequence of up to 262,144 tokens fits g6e.12xlarge's GPU" in notice
    assert not [n for n in _notices({"GPU_NODE_TYPE": "g6e.12xlarge", "MAX_MODEL_LEN": "32768"}) if "MAX_MODEL" in n]


def test_a_gated_model_without_a_token_secret_is_said_and_with_one_is_not() -> None:
    llama = {"MODEL_SOURCE": "meta-llama/Llama-3.1-8B-Instruct"}
    assert any("is gated on the Hub and HF_TOKEN_SECRET_NAME is empty" in n for n in _notices(llama))
    assert not any("gated" in n for n in _notices({**llama, "HF_TOKEN_SECRET_NAME": "hf-token"}))


def test_another_image_or_ray_version_names_the_versions_the_checks_are_of() -> None:
    newer = versions.DLC_IMAGE_TEMPLATE.replace("cuda-v1.0", "cuda-v1.1")
    for env in ({"DLC_IMAGE": newer}, {"RAY_VERSION": "2.60.0"}):
        (notice,) = _notices(env)
        assert f"Ray {versions.RAY_VERSION}, vLLM {versions.VLLM_VERSION}" in notice and "docs/upgrading.md" in notice
