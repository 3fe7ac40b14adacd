"""What makes an answer valid for what was asked, for the conformance step (tools/local_check/conformance.py): a tool
call naming a declared tool with arguments its schema takes, JSON its schema takes, reasoning out of the content, as
many choices as asked. Each check takes a row's responses and says "" (valid) or why not."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

Response = tuple[int, Any]  # status, body (a JSON value, an SSE event list, or text)

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 16}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
TIME_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time in a time zone",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"enum": ["UTC", "CET", "JST"]}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
TOOLS: list[dict[str, Any]] = [WEATHER_TOOL, TIME_TOOL]

# --- validity ------------------------------------------------------------------------------------------------------


def _schema_problem(value: Any, schema: dict[str, Any]) -> str:
    import jsonschema  # type: ignore[import-untyped]  # the image's stack has it; its stubs are not installed

    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as error:
        return f"schema: {error.message[:120]}"
    return ""


def message_of(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict) or not body.get("choices"):
        return {}
    message: dict[str, Any] = body["choices"][0].get("message") or {}
    return message


def _ok_statuses(responses: list[Response]) -> str:
    bad = [status for status, _ in responses if status != 200]
    return f"status {bad[0]}: {str(responses[[s for s, _ in responses].index(bad[0])][1])[:160]}" if bad else ""


def _calls_problem(calls: list[dict[str, Any]], *, named: str = "", required: bool = False) -> str:
    if (named or required) and not calls:
        return "no tool call"
    schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
    for call in calls:
        function = call.get("function") or {}
        name = function.get("name")
        if name not in schemas or (named and name != named):
            return f"a call of {name!r}"
        try:
            arguments = json.loads(function.get("arguments") or "")
        except ValueError:
            return f"arguments not JSON: {str(function.get('arguments'))[:80]!r}"
        problem = _schema_problem(arguments, schemas[name])
        if problem:
            return problem
    return ""


def tool_calls(*, named: str = "", required: bool = False) -> Callable[[list[Response]], str]:
    def check(responses: list[Response]) -> str:
        for status, body in responses:
            if status != 200:
                return _ok_statuses(responses)
            problem = _calls_problem(message_of(body).get("tool_calls") or [], named=named, required=required)
            if problem:
                return problem
        return ""

    return check


def streamed_calls(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool calls of a streamed answer, put together from their deltas by index."""
    calls: dict[int, dict[str, Any]] = {}
    for event in events:
        for choice in event.get("choices") or []:
            for delta in (choice.get("delta") or {}).get("tool_calls") or []:
                call = calls.setdefault(int(delta.get("index", 0)), {"function": {"name": None, "arguments": ""}})
                function = delta.get("function") or {}
                if function.get("name"):
                    call["function"]["name"] = function["name"]
                call["function"]["arguments"] += function.get("arguments") or ""
    return [calls[index] for index in sorted(calls)]


def streamed_tool_call(named: str) -> Callable[[list[Response]], str]:
    def check(responses: list[Response]) -> str:
        status, events = responses[0]
        if status != 200 or not isinstance(events, list):
            return _ok_statuses(responses) or "no event stream"
        return _calls_problem(streamed_calls(events), named=named)

    return check


def reasoning_separated(responses: list[Response]) -> str:
    problem = _ok_statuses(responses)
    if problem:
        return problem
    message = message_of(responses[0][1])
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    if not reasoning:
        return "no reasoning field"
    if "<think>" in (message.get("content") or "") or "</think>" in (message.get("content") or ""):
        return "think tags in the content"
    return ""


def json_answers(schema: dict[str, Any] | None) -> Callable[[list[Response]], str]:
    def check(responses: list[Response]) -> str:
        problem = _ok_statuses(responses)
        if problem:
            return problem
        for index, (_, body) in enumerate(responses):
            content = message_of(body).get("content") or ""
            try:
                value = json.loads(content)
            except ValueError:
                return f"answer {index + 1} of {len(responses)} not JSON: {content[:80]!r}"
            problem = _schema_problem(value, schema) if schema else ("" if isinstance(value, dict) else "not an object")
            if problem:
                return f"answer {index + 1} of {len(responses)}: {problem}"
        return ""

    return check


def content_matches(pattern: str) -> Callable[[list[Response]], str]:
    def check(responses: list[Response]) -> str:
        problem = _ok_statuses(responses)
        if problem:
            return problem
        content = message_of(responses[0][1]).get("content") or ""
        return "" if re.fullmatch(pattern, content) else f"{content[:60]!r} does not match {pattern}"

    return check


def choices(count: int) -> Callable[[list[Response]], str]:
    def check(responses: list[Response]) -> str:
        problem = _ok_statuses(responses)
        if problem:
            return problem
        got = responses[0][1].get("choices") or []
        indexed = len(got) == count and all(c.get("index") == i for i, c in enumerate(got))
        return "" if indexed else f"{len(got)} choices"

    return check


def logprobs(top: int) -> Callable[[list[Response]], str]:
    def check(responses: list[Response]) -> str:
        problem = _ok_statuses(responses)
        if problem:
            return problem
        content = ((responses[0][1]["choices"][0].get("logprobs") or {}).get("content")) or []
        if not content:
            return "no logprobs"
        return "" if all(len(t.get("top_logprobs") or []) == top for t in content) else "top_logprobs short"

    return check


def at_least_tokens(count: int) -> Callable[[list[Response]], str]:
    def check(responses: list[Response]) -> str:
        problem = _ok_statuses(responses)
        if problem:
            return problem
        used = (responses[0][1].get("usage") or {}).get("completion_tokens", 0)
        return "" if used >= count else f"{used} completion tokens, min_tokens {count}"

    return check


def stopped_before(stop: str) -> Callable[[list[Response]], str]:
    def check(responses: list[Response]) -> str:
        problem = _ok_statuses(responses)
        if problem:
            return problem
        choice = responses[0][1]["choices"][0]
        if stop in (choice.get("text") or ""):
            return f"{stop!r} in the text"
        reason = choice.get("finish_reason")
        return "" if reason in ("stop", "length") else f"finish_reason {reason}"

    return check


def same_answers(responses: list[Response]) -> str:
    problem = _ok_statuses(responses)
    if problem:
        return problem
    texts = {json.dumps([c.get("text") for c in body["choices"]]) for _, body in responses}
    return "" if len(texts) == 1 else "a seed gave different answers"


def usage_in_stream(responses: list[Response]) -> str:
    status, events = responses[0]
    if status != 200 or not isinstance(events, list):
        return _ok_statuses(responses) or "no event stream"
    usage = next((e["usage"] for e in reversed(events) if e.get("usage")), None)
    return "" if usage and usage.get("completion_tokens") else "no usage chunk"


def conversation(min_prompt_tokens: int) -> Callable[[list[Response]], str]:
    def check(responses: list[Response]) -> str:
        problem = _ok_statuses(responses)
        if problem:
            return problem
        short = [b["usage"]["prompt_tokens"] for _, b in responses if b["usage"]["prompt_tokens"] < min_prompt_tokens]
        return f"a prompt of {short[0]} tokens, under {min_prompt_tokens}" if short else ""

    return check


def all_served(responses: list[Response]) -> str:
    return _ok_statuses(responses)


def refused(responses: list[Response]) -> str:
    """For the 4xx rows: valid when every answer is a client error."""
    bad = [status for status, _ in responses if not 400 <= status < 500]
    return f"status {bad[0]}" if bad else ""
