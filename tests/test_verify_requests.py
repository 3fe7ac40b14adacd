"""make verify's application requests (tools/verify_steps.py): a named tool call and a strict json_schema answer held
to their schemas, and a thinking model's reasoning-only answer taken as an answer."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import settings_for
from tools.verify_steps import JSON_REQUEST, TOOL_REQUEST, check_completion, check_strict_json, check_tool_call

SETTINGS = settings_for()


def _calls(name: str, arguments: str) -> dict[str, Any]:
    return {"choices": [{"message": {"tool_calls": [{"function": {"name": name, "arguments": arguments}}]}}]}


def _content(text: str | None) -> dict[str, Any]:
    return {"choices": [{"message": {"content": text}}]}


def test_the_requests_are_what_an_agent_sends() -> None:
    assert TOOL_REQUEST["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert JSON_REQUEST["response_format"]["json_schema"]["strict"] is True


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (_content("It is sunny"), "no tool call"),
        (_calls("get_weather", '{"town": "Lima"}'), "keys ['town'], the schema's ['city']"),
        (_calls("get_time", '{"city": "Lima"}'), "a call of 'get_time'"),
        (_calls("get_weather", '{"city": 7}'), "city is a int"),
        (_calls("get_weather", '{"city": "Li'), "JSONDecodeError"),
        ({"error": "x"}, "another shape"),
    ],
)
def test_a_tool_call_is_held_to_the_tools_schema(answer: dict[str, Any], fragment: str) -> None:
    step = check_tool_call(SETTINGS, answer, "")
    assert not step.ok and fragment in step.detail and "docs/serving-api.md" in step.look_closer
    assert check_tool_call(SETTINGS, _calls("get_weather", '{"city": "Lima"}'), "").ok


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (_content('{"city": "Lima", "sunny": "yes"}'), "sunny is a str"),
        (_content('{"city": "Lima"}'), "keys ['city']"),
        (_content('{"city": "Li'), "JSONDecodeError"),
        (_content(None), "no answer"),
    ],
)
def test_strict_json_is_held_to_the_schema(answer: dict[str, Any], fragment: str) -> None:
    step = check_strict_json(SETTINGS, answer, "")
    assert not step.ok and fragment in step.detail
    assert check_strict_json(SETTINGS, _content('{"city": "Lima", "sunny": true}'), "").ok


def test_a_thinking_models_answer_of_reasoning_alone_is_an_answer() -> None:
    # With REASONING_PARSER, Qwen3.5's first 16 tokens are its thinking: content is null, reasoning holds them.
    answer = {"choices": [{"message": {"content": None, "reasoning": "The user wants a greeting"}}]}
    assert check_completion(SETTINGS, answer, "").ok
    assert not check_completion(SETTINGS, _content(None), "").ok
