"""The conformance step of the one-host check: the requests agent and RAG frameworks send, each through PD and through
the lone engine (the same engine kwargs behind the same Ray ingress, no KV connector), side by side.

A row is judged on behaviour, never on the random text: its status, whether the answer is valid for what was asked
(a tool call naming a declared tool with arguments its schema accepts, JSON its schema accepts, reasoning kept out
of the content, as many choices as asked, ...) and whether an engine logged a fault while it ran. A row fails when
PD's behaviour differs from the lone engine's, when a served feature is not served validly by both, or where PD
refuses what Ray 2.58's PD cannot serve (serve_pd_guard) in other words than the guard's.
"""

from __future__ import annotations

import copy
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.local_check.answers import (
    TOOLS,
    Response,
    all_served,
    at_least_tokens,
    choices,
    content_matches,
    conversation,
    json_answers,
    logprobs,
    message_of,
    reasoning_separated,
    refused,
    same_answers,
    stopped_before,
    streamed_tool_call,
    tool_calls,
    usage_in_stream,
)
from tools.local_check.client import http

# What an engine logs when a request broke inside it (vLLM 0.26's scheduler, structured output, NIXL connector).
FAULT_PATTERNS = (
    "Failed to advance FSM",
    "grammar rejected tokens",
    "Potentially invalid KV blocks",
    "SSM can only have one local block",
    "AssertionError",
    "EngineDeadError",
    "EngineCore encountered",
)
LOG_SUFFIXES = (".out", ".err", ".log")
JSON_REPEATS = 10  # strict JSON through PD: valid every time, not once
CONVERSATIONS = 3  # multi-turn conversations sharing one system prompt
PREFIX_BLOCKS = (1, 2, 5)  # shared prefixes, in attention blocks
# Room for a random model to close the JSON (any whitespace is allowed between tokens; uniform walks under the
# grammar on the stand-in tokenizer end within 80 tokens).
JSON_MAX_TOKENS = 256

ANSWER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "sunny": {"type": "boolean"},
        "level": {"enum": [1, 2, 3]},
    },
    "required": ["city", "sunny", "level"],
    "additionalProperties": False,
}
REGEX = "[a-z]{3}-[0-9]{2}"
CHOICES = ["yes", "no", "maybe"]
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}
# The system prompt the conversations share: at least two attention blocks with any tokenizer of under 3 characters
# a token (prompt_tokens says how many it made, and the row checks it).
SYSTEM_PROMPT = " ".join(f"Rule {n}: answer briefly, cite the document, and never invent a source." for n in range(96))


@dataclass(frozen=True)
class Case:
    """One kind of request: sent `repeat` times (or as the conversation `steps` build it) and judged by `check`."""

    name: str
    path: str
    body: dict[str, Any]
    check: Callable[[list[Response]], str]  # "" when the answers are valid, else why not
    expect: str = "served"  # served | 4xx (refused by both) | same (not routed: the same status from both)
    # The field Ray 2.58's PD cannot serve: PD must refuse it (400 naming it) and the lone engine serve it.
    pd_refuses: str = ""
    stream: bool = False
    repeat: int = 1
    steps: Callable[[list[Response]], dict[str, Any] | None] | None = None  # the next request of a conversation
    grammar: bool = False  # the engine holds the answer to a grammar (xgrammar, or a structural tag for tools)


@dataclass
class Observation:
    name: str
    statuses: list[int]
    why: str  # "" = valid
    faults: list[str] = field(default_factory=list)
    sample: str = ""

    @property
    def status(self) -> int:
        """The first status that is not 200 (or 200)."""
        return next((s for s in self.statuses if s != 200), 200)


@dataclass(frozen=True)
class Row:
    name: str
    ok: bool
    detail: str
    pd: dict[str, Any]
    lone: dict[str, Any]


# --- the cases -------------------------------------------------------------------------------------------------------


def _chat(model: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 64, **extra}


def _next_turn(responses: list[Response]) -> dict[str, Any] | None:
    """A second user turn after the first answer of the first conversation, then none."""
    if len(responses) != CONVERSATIONS:
        return None
    first = responses[0][1]
    reply = message_of(first).get("content") or ""
    body = copy.deepcopy(_conversation_body(0))
    body["messages"] += [{"role": "assistant", "content": reply}, {"role": "user", "content": "And the second?"}]
    return body


_MODEL = {"id": ""}


def _conversation_body(index: int) -> dict[str, Any]:
    return {
        "model": _MODEL["id"],
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Question {index}: which document says the most?"},
        ],
        "max_tokens": 16,
        **NO_THINKING,
    }


def _conversations(responses: list[Response]) -> dict[str, Any] | None:
    if len(responses) < CONVERSATIONS:
        return _conversation_body(len(responses))
    return _next_turn(responses) if len(responses) == CONVERSATIONS else None


def prefix_prompts(block: int, vocab: int) -> list[list[int]]:
    """Token-id prompts: a base, then prompts sharing its first 1, 2 and 5 blocks, then the base again."""
    import random

    generator = random.Random(7)
    high = max(1000, vocab - 1000)
    base = [generator.randrange(100, high) for _ in range(max(PREFIX_BLOCKS) * block + 100)]
    shared = [base[: n * block] + [generator.randrange(100, high) for _ in range(100)] for n in PREFIX_BLOCKS]
    return [base, *shared, base]


def cases(model: str, block: int, vocab: int) -> list[Case]:
    """Every row, in the order they are sent."""
    _MODEL["id"] = model
    completion = {"model": model, "prompt": "Once upon a time", "max_tokens": 16}
    tools = {"tools": TOOLS, **NO_THINKING}
    named = {"type": "function", "function": {"name": "get_weather"}}
    json_schema = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA, "strict": True}}
    prefixes = prefix_prompts(block, vocab)
    return [
        Case("tools: named", "/v1/chat/completions", _chat(model, "Weather?", tool_choice=named, **tools),
             tool_calls(named="get_weather"), grammar=True),
        Case("tools: required", "/v1/chat/completions", _chat(model, "Weather?", tool_choice="required", **tools),
             tool_calls(required=True), grammar=True),
        Case("tools: auto", "/v1/chat/completions", _chat(model, "Weather?", tool_choice="auto", **tools),
             tool_calls()),
        Case("tools: default (no tool_choice)", "/v1/chat/completions", _chat(model, "Weather?", **tools),
             tool_calls()),
        Case("tools: named, streamed", "/v1/chat/completions",
             _chat(model, "Weather?", tool_choice=named, stream=True, **tools), streamed_tool_call("get_weather"),
             stream=True, grammar=True),
        Case("tools: a tool result in the conversation", "/v1/chat/completions",
             {"model": model, "max_tokens": 32, "tools": TOOLS, **NO_THINKING, "messages": [
                 {"role": "user", "content": "Weather in Lima?"},
                 {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                  "function": {"name": "get_weather", "arguments": '{"city": "Lima", "unit": "c"}'}}]},
                 {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 19}'}]},
             tool_calls()),
        Case("reasoning separated", "/v1/chat/completions", _chat(model, "Think, then answer: 2+2?"),
             reasoning_separated),
        Case(f"strict json_schema x{JSON_REPEATS}", "/v1/chat/completions",
             _chat(model, "Describe a city as JSON.", response_format=json_schema, max_tokens=JSON_MAX_TOKENS,
                   **NO_THINKING), json_answers(ANSWER_SCHEMA), repeat=JSON_REPEATS, grammar=True),
        Case("json_object", "/v1/chat/completions",
             _chat(model, "JSON please.", response_format={"type": "json_object"}, max_tokens=JSON_MAX_TOKENS,
                   **NO_THINKING), json_answers(None), grammar=True),
        Case("structured choice", "/v1/chat/completions",
             _chat(model, "Yes or no?", structured_outputs={"choice": CHOICES}, **NO_THINKING),
             content_matches("|".join(CHOICES)), grammar=True),
        Case("structured regex", "/v1/chat/completions",
             _chat(model, "A code?", structured_outputs={"regex": REGEX}, **NO_THINKING), content_matches(REGEX),
             grammar=True),
        Case("logprobs (chat, top 3)", "/v1/chat/completions",
             _chat(model, "Hello", logprobs=True, top_logprobs=3, max_tokens=8), logprobs(3)),
        Case("stop sequence", "/v1/completions", {**completion, "stop": ["e"], "max_tokens": 32},
             stopped_before("e")),
        Case("seed (twice, temperature 0.8)", "/v1/completions",
             {**completion, "seed": 42, "temperature": 0.8}, same_answers, repeat=2),
        Case("usage in a stream", "/v1/completions",
             {**completion, "stream": True, "stream_options": {"include_usage": True}}, usage_in_stream, stream=True),
        Case("max_completion_tokens", "/v1/chat/completions",
             {**_chat(model, "Hi"), "max_completion_tokens": 8}, all_served),
        Case(f"multi-turn, a shared system prompt of {2 * block}+ tokens", "/v1/chat/completions",
             _conversation_body(0), conversation(2 * block), steps=_conversations),
        *[
            Case(f"prefix: {n} block(s) shared ({n * block} tokens)", "/v1/completions",
                 {"model": model, "prompt": prompt, "max_tokens": 8}, all_served)
            for n, prompt in zip(PREFIX_BLOCKS, prefixes[1:-1], strict=True)
        ],
        Case("prefix: the same prompt again", "/v1/completions",
             {"model": model, "prompt": prefixes[0], "max_tokens": 8}, all_served, repeat=2),
        Case("n=2", "/v1/chat/completions", _chat(model, "Hi", n=2, max_tokens=8), choices(2), pd_refuses="n"),
        Case("batched prompts", "/v1/completions", {**completion, "prompt": ["One", "Two"]}, choices(2),
             pd_refuses="prompt"),
        Case("min_tokens 4", "/v1/completions", {**completion, "min_tokens": 4}, at_least_tokens(4),
             pd_refuses="min_tokens"),
        Case("bad: unknown model", "/v1/chat/completions", _chat("no-such-model", "Hi"), refused, expect="4xx"),
        Case("bad: a tool_choice naming no tool", "/v1/chat/completions",
             _chat(model, "Hi", tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}),
             refused, expect="4xx"),
        Case("bad: an invalid schema", "/v1/chat/completions",
             _chat(model, "Hi", response_format={"type": "json_schema", "json_schema": {"name": "x",
                   "schema": {"type": "no-such-type"}}}), refused, expect="4xx"),
        Case("bad: negative max_tokens", "/v1/completions", {**completion, "max_tokens": -1}, refused, expect="4xx"),
        Case("bad: empty messages", "/v1/chat/completions", {"model": model, "messages": []}, refused, expect="4xx"),
        Case("/v1/responses", "/v1/responses", {"model": model, "input": "Hi"}, all_served, expect="same"),
    ]  # fmt: skip


# --- sending ---------------------------------------------------------------------------------------------------------


def sse(url: str, body: dict[str, Any], key: str | None, timeout: float = 300) -> Response:
    """A streamed request's events (`data:` lines as JSON, up to [DONE]), or the error's status and body."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            events = []
            for raw in response:
                line = raw.decode(errors="replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                event = json.loads(data)
                if "error" in event:  # vLLM streams an error as an event of the 200 stream
                    return int(event["error"].get("code") or 500), event
                events.append(event)
            return response.status, events
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
        return 0, str(error)


class LogWatch:
    """The lines the Ray session's logs gained since the last look, for the fault patterns."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.sizes = self._sizes()

    def _sizes(self) -> dict[Path, int]:
        return {
            path: path.stat().st_size
            for path in self.log_dir.glob("*")
            if path.is_file() and path.suffix in LOG_SUFFIXES
        }

    def faults(self) -> list[str]:
        found = []
        now = self._sizes()
        for path, size in now.items():
            start = self.sizes.get(path, 0)
            if size <= start:
                continue
            with path.open("rb") as handle:
                handle.seek(start)
                text = handle.read(size - start).decode(errors="replace")
            found += [line.strip()[-240:] for line in text.splitlines() if any(p in line for p in FAULT_PATTERNS)]
        self.sizes = now
        return found


def send(base: str, case: Case, key: str | None) -> list[Response]:
    responses: list[Response] = []
    body: dict[str, Any] | None = case.body
    while body is not None:
        responses.append(
            sse(f"{base}{case.path}", body, key) if case.stream else http("POST", f"{base}{case.path}", body, key=key)
        )
        repeat = case.body if len(responses) < case.repeat else None
        body = case.steps(responses) if case.steps is not None else repeat
    return responses


# How long an engine may take to write a fault to its log after the answer (Ray forwards worker output in batches).
LOG_SETTLE_S = 1.0


def observe(
    base: str, all_cases: Sequence[Case], key: str | None, logs: LogWatch, label: str = ""
) -> list[Observation]:
    """Each case sent and observed in turn; a line each as it happens (a run cut short still shows what PD did)."""
    observations = []
    for case in all_cases:
        responses = send(base, case, key)
        time.sleep(LOG_SETTLE_S)
        try:
            why = case.check(responses)
        except (KeyError, IndexError, TypeError, AttributeError) as error:  # an answer not shaped as asked
            why = f"an answer not shaped as vLLM's: {type(error).__name__} {error}"
        observations.append(
            Observation(
                case.name,
                [status for status, _ in responses],
                why,
                logs.faults(),
                json.dumps(responses[0][1])[:240] if not isinstance(responses[0][1], str) else responses[0][1][:240],
            )
        )
        seen = observations[-1]
        print(f"  {label}{seen.name}: {seen.statuses} {seen.why or 'valid'}; faults {seen.faults[:1]}", flush=True)
    return observations
