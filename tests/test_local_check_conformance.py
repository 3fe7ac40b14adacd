"""The one-host check's conformance step (tools/local_check/conformance.py): each row's validity check, the verdict
that holds PD to the lone engine, the log watch and the streamed answers, on answers shaped as vLLM 0.26 gives them.
The run on a GPU is recorded in docs/local-check-runs/."""

from __future__ import annotations

import http.server
import json
from pathlib import Path
from typing import Any

import pytest

from tests.loopback import answer_json, serving
from tools.local_check import conformance, conformance_verdict
from tools.local_check.conformance import Observation, cases
from tools.local_check.conformance_verdict import judge

BLOCK = 528
CASES = cases("m", BLOCK, 248320)
BY_NAME = {case.name: case for case in CASES}
STRICT = f"strict json_schema x{conformance.JSON_REPEATS}"


def _chat(message: dict[str, Any], n: int = 1) -> dict[str, Any]:
    return {"choices": [{"index": i, "message": message} for i in range(n)], "usage": {"prompt_tokens": 9}}


def _call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": "c", "type": "function", "function": {"name": name, "arguments": arguments}}


def _observed(name: str, status: int = 200, why: str = "", faults: list[str] | None = None, sample: str = "") -> Any:
    return Observation(name, [status], why, faults or [], sample)


def _same_everywhere(**changes: Any) -> tuple[list[Observation], list[Observation]]:
    """Valid answers from both (the guard's refusals from PD), with `changes` applied to PD's row by name."""
    pd, lone = [], []
    for case in CASES:
        status = 400 if case.expect == "4xx" else 404 if case.expect == "same" else 200
        why = "status 404" if case.expect == "same" else ""
        lone.append(_observed(case.name, status, why))
        if case.pd_refuses:
            pd.append(_observed(case.name, 400, "status 400", sample=f'{{"param": "{case.pd_refuses}"}}'))
        else:
            pd.append(_observed(case.name, status, why))
    for index, case in enumerate(CASES):
        if case.name in changes:
            pd[index] = changes[case.name]
    return pd, lone


def test_every_row_passes_when_pd_behaves_as_the_lone_engine_and_refuses_what_it_cannot_serve() -> None:
    rows = judge(CASES, *_same_everywhere())
    assert [row.name for row in rows if not row.ok] == []
    assert {"tools: named", "tools: required", "tools: auto", "tools: default (no tool_choice)", STRICT} <= set(BY_NAME)


@pytest.mark.parametrize("name", [case.name for case in CASES])
def test_no_row_can_always_pass_a_500_from_pd_fails_it(name: str) -> None:
    pd, lone = _same_everywhere(**{name: _observed(name, 500, "status 500: Internal Server Error")})
    row = next(r for r in judge(CASES, pd, lone) if r.name == name)
    assert not row.ok, row.detail


def test_a_fault_pd_logged_fails_its_row_and_one_the_lone_engine_logged_too_does_not() -> None:
    fault = "ERROR scheduler.py Unexpected: grammar rejected tokens [9152] for request x. Terminating request."
    pd, lone = _same_everywhere(**{"json_object": _observed("json_object", faults=[fault])})
    row = next(r for r in judge(CASES, pd, lone) if r.name == "json_object")
    assert not row.ok and "grammar rejected tokens" in row.detail
    lone[[c.name for c in CASES].index("json_object")].faults.append(fault)
    assert next(r for r in judge(CASES, pd, lone) if r.name == "json_object").ok


def test_a_row_served_by_neither_fails_even_though_they_agree() -> None:
    pd, lone = _same_everywhere(**{"tools: named": _observed("tools: named", 400, "status 400: needs a parser")})
    lone[0] = _observed("tools: named", 400, "status 400: needs a parser")
    row = judge(CASES, pd, lone)[0]
    assert not row.ok and "lone engine" in row.detail


def test_a_pd_refusal_must_be_the_guards_400_naming_the_field() -> None:
    pd, lone = _same_everywhere(**{"n=2": _observed("n=2", 200)})
    assert not next(r for r in judge(CASES, pd, lone) if r.name == "n=2").ok  # served on the wrong KV: not refused
    pd, lone = _same_everywhere(**{"n=2": _observed("n=2", 400, "status 400", sample='{"message": "bad"}')})
    assert not next(r for r in judge(CASES, pd, lone) if r.name == "n=2").ok  # a 400 that names nothing


def test_the_tool_call_checks_hold_calls_to_the_declared_tools_and_their_schemas() -> None:
    named = BY_NAME["tools: named"].check
    good = _chat({"content": None, "tool_calls": [_call("get_weather", '{"city": "Lima", "unit": "c"}')]})
    assert named([(200, good)]) == ""
    assert "no tool call" in named([(200, _chat({"content": "It is sunny"}))])
    assert "schema" in named([(200, _chat({"tool_calls": [_call("get_weather", '{"city": "Lima", "unit": "k"}')]}))])
    assert "not JSON" in named([(200, _chat({"tool_calls": [_call("get_weather", '{"city": ')]}))])
    assert "get_time" in named([(200, _chat({"tool_calls": [_call("get_time", '{"zone": "UTC"}')]}))])
    auto = BY_NAME["tools: auto"].check
    assert auto([(200, _chat({"content": "plain text"}))]) == ""  # auto may answer in text, as the lone engine does
    assert "a call of 'rm_rf'" in auto([(200, _chat({"tool_calls": [_call("rm_rf", "{}")]}))])


def test_a_streamed_tool_call_is_put_together_from_its_deltas() -> None:
    events = [
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": "get_weather", "arguments": ""}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Li'}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'ma", "unit": "f"}'}}]}}]},
    ]
    check = BY_NAME["tools: named, streamed"].check
    assert check([(200, events)]) == ""
    assert check([(200, events[:2])]).startswith("arguments not JSON")


def test_reasoning_must_be_out_of_the_content() -> None:
    check = BY_NAME["reasoning separated"].check
    assert check([(200, _chat({"content": "4", "reasoning": "two and two"}))]) == ""
    assert check([(200, _chat({"content": "<think>two and two</think>4"}))]) == "no reasoning field"


def test_strict_json_must_be_valid_every_time() -> None:
    check = BY_NAME[STRICT].check
    valid = (200, _chat({"content": '{"city": "Lima", "sunny": true, "level": 2}'}))
    assert check([valid] * 10) == ""
    wrong = (200, _chat({"content": '{"city": "Lima", "sunny": "yes", "level": 2}'}))
    assert "answer 10 of 10" in check([valid] * 9 + [wrong])
    cut = (200, _chat({"content": '{"city": "Lima", "sun'}))
    assert "not JSON" in check([cut])


def test_the_other_rows_checks() -> None:
    assert BY_NAME["structured regex"].check([(200, _chat({"content": "abc-12"}))]) == ""
    assert BY_NAME["structured regex"].check([(200, _chat({"content": "abc-123"}))]) != ""
    assert BY_NAME["n=2"].check([(200, _chat({"content": "a"}, n=2))]) == ""
    assert BY_NAME["n=2"].check([(200, _chat({"content": "a"}))]) == "1 choices"
    seeded = {"choices": [{"text": "a b"}]}
    assert BY_NAME["seed (twice, temperature 0.8)"].check([(200, seeded), (200, seeded)]) == ""
    assert BY_NAME["seed (twice, temperature 0.8)"].check([(200, seeded), (200, {"choices": [{"text": "c"}]})]) != ""
    assert BY_NAME["min_tokens 4"].check([(200, {"usage": {"completion_tokens": 3}})]) != ""
    assert BY_NAME["stop sequence"].check([(200, {"choices": [{"text": "the", "finish_reason": "stop"}]})]) != ""
    assert BY_NAME["bad: unknown model"].check([(404, {})]) == ""
    assert BY_NAME["bad: unknown model"].check([(200, {})]) == "status 200"


def test_the_shared_prefixes_share_whole_blocks_and_the_conversations_share_the_system_prompt() -> None:
    prompts = conformance.prefix_prompts(BLOCK, 248320)
    base = prompts[0]
    for blocks, prompt in zip(conformance.PREFIX_BLOCKS, prompts[1:-1], strict=True):
        assert prompt[: blocks * BLOCK] == base[: blocks * BLOCK] and prompt[blocks * BLOCK] != base[blocks * BLOCK]
    assert prompts[-1] == base and len(base) + 8 <= 4096
    case = next(c for c in CASES if c.name.startswith("multi-turn"))
    responses: list[Any] = []
    bodies = []
    body = case.body
    while body is not None:
        bodies.append(body)
        responses.append((200, _chat({"content": "x"})))
        assert case.steps is not None
        body = case.steps(responses)
    assert len(bodies) == conformance.CONVERSATIONS + 1
    assert all(b["messages"][0]["content"] == conformance.SYSTEM_PROMPT for b in bodies)
    assert bodies[-1]["messages"][-1]["content"] == "And the second?"
    assert case.check([(200, {"usage": {"prompt_tokens": 2 * BLOCK - 1}})]) != ""


def test_the_log_watch_sees_only_what_was_written_since_it_last_looked(tmp_path: Path) -> None:
    log = tmp_path / "worker-1.err"
    log.write_text("AssertionError: an old one\n")
    watch = conformance.LogWatch(tmp_path)
    assert watch.faults() == []
    with log.open("a") as handle:
        handle.write("INFO fine\nWARNING Potentially invalid KV blocks for unrecognized request 1_cmpl-x-0\n")
    (tmp_path / "worker-2.out").write_text("ERROR SSM can only have one local block\n")
    assert sorted(f.split()[1] for f in watch.faults()) == ["Potentially", "SSM"]
    assert watch.faults() == []


def test_a_stream_is_read_up_to_done_and_an_error_in_it_is_its_status() -> None:
    events = [{"choices": [{"delta": {"content": "a"}}]}, {"choices": [], "usage": {"completion_tokens": 1}}]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            chunks = events if not body.get("fail") else [{"error": {"code": 400, "message": "bad"}}]
            for event in chunks:
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with serving(Handler) as base:
        status, got = conformance.sse(f"{base}/v1/completions", {}, None)
        assert (status, got) == (200, events)
        assert BY_NAME["usage in a stream"].check([(status, got)]) == ""
        assert conformance.sse(f"{base}/v1/completions", {"fail": True}, None)[0] == 400


FAULT = "ERROR scheduler.py Unexpected: grammar rejected tokens [9152] for request x. Terminating request."


def test_the_remedies_are_tried_only_on_grammar_rows_pd_alone_failed_with_a_grammar_fault() -> None:
    failing = _observed(STRICT, 500, "status 500", faults=[FAULT])
    pd, lone = _same_everywhere(**{STRICT: failing, "stop sequence": _observed("stop sequence", 500, "status 500")})
    rows = judge(CASES, pd, lone)
    assert [case.name for case in conformance_verdict.grammar_failures(CASES, rows)] == [STRICT]
    lone[[c.name for c in CASES].index(STRICT)] = _observed(STRICT, 500, "status 500", faults=[FAULT])
    # the lone engine faults too: not PD's
    assert conformance_verdict.grammar_failures(CASES, judge(CASES, pd, lone)) == []
    pd, lone = _same_everywhere(**{STRICT: _observed(STRICT, 200, "answer 1 of 10 not JSON: '{'")})
    # no fault: no engine setting to try
    assert conformance_verdict.grammar_failures(CASES, judge(CASES, pd, lone)) == []


def test_a_remedy_holds_only_with_valid_answers_and_no_grammar_fault() -> None:
    assert conformance_verdict.remedy_verdict(_observed(STRICT))[0]
    assert not conformance_verdict.remedy_verdict(_observed(STRICT, faults=[FAULT]))[0]
    assert not conformance_verdict.remedy_verdict(_observed(STRICT, 500, "status 500"))[0]
    assert all(BY_NAME[name].grammar for name in (STRICT, "tools: named", "tools: required", "json_object"))
    assert not BY_NAME["tools: auto"].grammar and not BY_NAME["stop sequence"].grammar


def test_an_answer_of_another_shape_fails_its_row_and_stops_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(conformance, "LOG_SETTLE_S", 0.0)

    class Odd(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            answer_json(self, {"choices": "none"})

        def log_message(self, *args: Any) -> None:
            pass

    chosen = [BY_NAME["seed (twice, temperature 0.8)"], BY_NAME["n=2"]]
    with serving(Odd) as base:
        observed = conformance.observe(base, chosen, None, conformance.LogWatch(tmp_path))
    assert [o.statuses for o in observed] == [[200, 200], [200]]
    assert "not shaped" in observed[0].why and observed[1].why == "4 choices", [o.why for o in observed]
