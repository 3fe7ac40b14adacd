"""TOOL_CALL_PARSER, REASONING_PARSER and ENGINE_ARGS (settings/chat_parsers.py): names vLLM 0.26 registers, the model's
own parsers by default, and every key landing identically in both phases' engine_kwargs, which Ray 2.58 splits into
vLLM's FrontendArgs and AsyncEngineArgs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from k8s_constructs.serve_config import pd_application
from settings.engine_args import FRONTEND_SERVER_TABLE, FRONTEND_TABLE, parser_names, vendored
from settings.errors import SettingError
from tests.conftest import run_entry_point, settings_for

LLAMA = {"MODEL_SOURCE": "meta-llama/Llama-3.1-8B-Instruct", "MODEL_ID": "llama"}


def _phases(env: dict[str, str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    application = pd_application(settings_for(env))
    return application.prefill.engine.to_dict(), application.decode.engine.to_dict()


def _refusal(env: dict[str, str]) -> str:
    with pytest.raises(SettingError) as error:
        _phases(env)
    text = str(error.value)
    assert "\n" not in text
    return text


def _without_role(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if k != "kv_transfer_config"}


def test_qwen35_gets_its_own_parsers_with_auto_tool_choice_in_both_phases_alike() -> None:
    prefill, decode = _phases({"TOOL_CALL_PARSER": "auto", "REASONING_PARSER": "auto"})
    for kwargs in (prefill, decode):
        assert kwargs["tool_call_parser"] == "qwen3_coder"
        assert kwargs["enable_auto_tool_choice"] is True
        assert kwargs["reasoning_parser"] == "qwen3"
    assert _without_role(prefill) == _without_role(decode)  # the prefill copy of a request must pass prefill too


def test_the_model_family_decides_auto_and_an_unknown_one_is_said() -> None:
    prefill, _ = _phases({**LLAMA, "TOOL_CALL_PARSER": "auto", "REASONING_PARSER": "auto"})
    assert prefill["tool_call_parser"] == "llama3_json" and "reasoning_parser" not in prefill
    unknown = settings_for({"MODEL_SOURCE": "s3://example-models/x", "TOOL_CALL_PARSER": "auto"})
    parsers = unknown.chat_parsers
    assert (parsers.tool_call, parsers.reasoning) == ("", "")
    assert len(parsers.notices) == 2 and all(n.startswith("notice: ") and "\n" not in n for n in parsers.notices)
    assert "TOOL_CALL_PARSER=auto" in parsers.notices[0] and "tool calls answer 400" in parsers.notices[0]


def test_off_leaves_the_parsers_out_and_a_name_is_used_as_given() -> None:
    prefill, decode = _phases({"TOOL_CALL_PARSER": "off", "REASONING_PARSER": "off"})
    for key in ("tool_call_parser", "enable_auto_tool_choice", "reasoning_parser"):
        assert key not in prefill and key not in decode
    prefill, decode = _phases({"TOOL_CALL_PARSER": "hermes", "REASONING_PARSER": "deepseek_r1"})
    assert prefill["tool_call_parser"] == decode["tool_call_parser"] == "hermes"
    assert prefill["reasoning_parser"] == decode["reasoning_parser"] == "deepseek_r1"


def test_a_parser_name_vllm_026_lacks_fails_in_one_line_with_the_closest() -> None:
    text = _refusal({"TOOL_CALL_PARSER": "qwen3-coder"})
    assert text.startswith("TOOL_CALL_PARSER='qwen3-coder' is not allowed") and "did you mean qwen3_coder?" in text
    assert "REASONING_PARSER='qwen35'" in _refusal({"REASONING_PARSER": "qwen35"})


def test_the_registries_are_vllms() -> None:
    assert {"qwen3_coder", "qwen3_xml", "hermes", "llama3_json"} <= set(parser_names("tool_call_parsers"))
    assert {"qwen3", "deepseek_r1"} <= set(parser_names("reasoning_parsers"))


def test_engine_args_land_in_both_phases_frontend_and_engine_fields_alike() -> None:
    extra = '{"max_num_seqs": 64, "enable_prompt_tokens_details": true, "default_chat_template_kwargs": {"x": 1}}'
    prefill, decode = _phases({"ENGINE_ARGS": extra})
    for kwargs in (prefill, decode):
        assert kwargs["max_num_seqs"] == 64  # EngineArgs
        assert kwargs["enable_prompt_tokens_details"] is True  # FrontendArgs
        assert kwargs["default_chat_template_kwargs"] == {"x": 1}
    assert "enable_prompt_tokens_details" in vendored()[FRONTEND_TABLE]
    assert _without_role(prefill) == _without_role(decode)


@pytest.mark.parametrize(
    ("extra", "owner"),
    [
        ('{"max_model_len": 8192}', "MAX_MODEL_LEN"),
        ('{"tensor_parallel_size": 2}', "TENSOR_PARALLEL_SIZE"),
        ('{"kv_transfer_config": {}}', "KV_TRANSPORT"),
        ('{"tool_call_parser": "hermes"}', "TOOL_CALL_PARSER"),
        ('{"reasoning_parser": "qwen3"}', "REASONING_PARSER"),
        ('{"enforce_eager": false}', "ENFORCE_EAGER"),
    ],
)
def test_a_key_the_project_owns_is_refused_naming_its_setting(extra: str, owner: str) -> None:
    text = _refusal({"ENGINE_ARGS": extra})
    assert text.startswith("ENGINE_ARGS.") and f"owned by {owner}" in text


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ('{"max_num_seq": 64}', "did you mean max_num_seqs?"),
        ('{"max_num_seqs": "64"}', "takes int | None"),
        ('{"port": 9000}', "vLLM's own HTTP server"),
        ('{"max_num_seqs": 64', "a JSON object (Expecting"),
        ("[1, 2]", "a JSON object such as"),
    ],
)
def test_a_key_vllm_would_refuse_or_ignore_fails_in_one_line(extra: str, fragment: str) -> None:
    assert fragment in _refusal({"ENGINE_ARGS": extra})


def test_the_server_options_are_frontend_fields_that_ray_never_reads() -> None:
    server = set(vendored()[FRONTEND_SERVER_TABLE])
    assert {"port", "host", "ssl_keyfile", "api_key"} <= server <= set(vendored()[FRONTEND_TABLE])
    assert "tool_call_parser" not in server and "chat_template" not in server


def test_the_synth_prints_the_notice_for_a_model_without_known_parsers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_entry_point(
        "app", {"MODEL_SOURCE": "s3://example-models/x", "MODEL_ID": "x"}, tmp_path, monkeypatch, capfd
    )
    assert code == 0, err
    assert "notice: TOOL_CALL_PARSER=auto: no tool-call parser is known for MODEL_SOURCE=s3://example-models/x" in err


def test_settings_stay_hashable() -> None:
    settings = settings_for({"ENGINE_ARGS": '{"max_num_seqs": 64}'})
    assert hash(dataclasses.replace(settings)) == hash(settings)
