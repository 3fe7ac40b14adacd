"""The one-host check's verdicts on what it measured, against the runs recorded on a GPU (docs/local-check-runs/:
2026-12-05, one H100, Qwen3.5-9B and Llama-3.1-8B with random checkpoints; 2026-12-06, one H200, Qwen3.5-9B by the
current runner on its default prompts) and against the same figures altered the way a fault would alter them. Pure
functions: no GPU, no Ray."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import settings_for
from tools.local_check.controls import lone_controls
from tools.local_check.plan import prediction
from tools.local_check.results import (
    CONTEXT_FACTOR,
    MATCHED_TOLERANCE,
    Answer,
    Report,
    compare_memory,
    context_sees,
    logprob_shift,
    noise_floor,
    parity_row,
)
from tools.local_check.transfer import Transfers, TransferStats, judge_transfer
from tools.nixl_metrics import prometheus_totals

RUNS = Path(__file__).resolve().parent.parent / "docs" / "local-check-runs"
QWEN = "2026-12-05-h100-qwen3.5-9b.json"
LLAMA = "2026-12-05-h100-llama-3.1-8b.json"
QWEN_NOW = "2026-12-06-h200-qwen3.5-9b.json"  # the current runner (2fba6a0's tree), default parity prompts
MARGINS = {QWEN: 4, LLAMA: 4, QWEN_NOW: 2}
LLAMA_ENV = {"MODEL_SOURCE": "meta-llama/Llama-3.1-8B-Instruct", "MODEL_ID": "llama-3.1-8b"}


def recorded(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((RUNS / name).read_text())
    return loaded


def answer(*positions: dict[int, float]) -> Answer:
    return Answer([max(p, key=lambda t: p[t]) for p in positions], list(positions))


@pytest.mark.parametrize("name", [QWEN, LLAMA, QWEN_NOW])
def test_the_recorded_matched_prompt_is_exact_and_its_context_is_seen(name: str) -> None:
    """On the matched path PD equalled the lone engine to the last logprob (shift 0.000, 32 tokens equal), and a
    changed first prompt token moved the lone engine's first answer token by far more than the matched tolerance."""
    rows = [r for r in recorded(name)["parity"] if r["prompt_tokens"] == 2049]
    assert rows
    for row in rows:
        assert row["first_token_shift"] == 0.0 and row["equal"]
        assert context_sees(row["context_shift"], MATCHED_TOLERANCE)
        # The context shifts measured there against what the control asks (CONTEXT_FACTOR x tolerance, 0.05): 0.25
        # and 0.35 on 12-05 (a margin of 4), 0.126-0.189 on 12-06 (2).
        assert row["context_shift"] > MARGINS[name] * CONTEXT_FACTOR * MATCHED_TOLERANCE


def test_the_current_runners_recorded_run_passes_every_step() -> None:
    """The run docs/local-check.md reports as the answer: exit 0, and every step the issue asks for is in it (the
    controls, parity on and off the matched path, the transfer per request, placement, the PD engines' memory)."""
    run = recorded(QWEN_NOW)
    steps = {s["name"]: s["ok"] for s in run["steps"]}
    assert run["ok"] and all(steps.values()), steps
    assert {
        "random checkpoint", "noise floor", "context", "parity (matched path)", "parity (other lengths)", "transfer",
        "placement", "memory lone engine", "memory prefill", "memory decode", "nixl",
    } <= set(steps)  # fmt: skip
    assert run["random_checkpoint"]["parameters"] > 9e9 and "load_format" not in json.dumps(run["changes"])


def test_a_matched_prompt_one_bf16_step_off_fails() -> None:
    """The smallest difference seen off the matched path (0.0625 nats, one bf16 step of these logprobs) fails there;
    the same difference passes off the path, where the noise floor sets the tolerance."""
    lone = answer({1: -0.5, 2: -1.5}, {3: -0.2, 4: -2.0})
    pd = answer({1: -0.5625, 2: -1.5}, {3: -0.2, 4: -2.0})
    noise = noise_floor([lone], [answer({1: -0.45, 2: -1.5}, {3: -0.2, 4: -2.0})])
    assert noise is not None and noise.tolerance == pytest.approx(0.2)
    assert not parity_row(2049, pd, lone, noise, matched=True).ok
    assert parity_row(40, pd, lone, noise).ok
    assert parity_row(2049, lone, lone, noise, matched=True).ok


def test_tokens_that_part_away_from_a_near_tie_fail() -> None:
    lone = answer({1: -0.1, 2: -3.0}, {3: -0.1, 4: -3.0})
    diverged = Answer([1, 4], lone.top_logprobs)
    assert not parity_row(2049, diverged, lone, None, matched=True).ok
    tie = answer({1: -0.1, 2: -3.0}, {3: -0.695, 4: -0.7})  # second position: a near-tie (margin 0.005)
    assert parity_row(2049, Answer([1, 4], tie.top_logprobs), tie, None, matched=True).ok


def test_answers_that_ignore_the_context_fail_the_context_control() -> None:
    """vLLM's load_format dummy: every answer the prompt's last token repeated, whatever came before it, so the
    prompt with its first token changed gets the same logprobs."""
    same = {"tokens": [7, 7], "top_logprobs": [{"7": -0.1, "8": -2.3}, {"7": -0.1, "8": -2.3}]}
    prompts = [[100] * 40, [101] * 2049]
    report = Report()
    noise = lone_controls(report, {"answers": [same, same], "batched": [same, same], "variants": [same, same]},
                           prompts, 2049)  # fmt: skip
    steps = {s.name: s for s in report.steps}
    assert noise is not None and steps["noise floor"].ok
    assert not steps["context"].ok and "0.000" in steps["context"].detail
    moved = {"tokens": [7, 7], "top_logprobs": [{"7": -0.3, "8": -2.3}, {"7": -0.1, "8": -2.3}]}
    report = Report()
    lone_controls(report, {"answers": [same, same], "batched": [same, same], "variants": [same, moved]}, prompts, 2049)
    assert {s.name: s.ok for s in report.steps}["context"]


def test_no_logprobs_fail_the_noise_floor() -> None:
    report = Report()
    assert lone_controls(report, {"answers": [{"tokens": [1]}], "batched": [{"tokens": [1]}]}, [[5] * 40], 2049) is None
    assert [(s.name, s.ok) for s in report.steps] == [("noise floor", False)]


def test_logprob_shift_compares_the_shared_top_tokens() -> None:
    assert logprob_shift(answer({1: -0.1, 2: -2.0}), answer({1: -0.3, 3: -1.0})) == pytest.approx(0.2)
    assert logprob_shift(answer({1: -0.1}), answer({2: -0.1})) == float("inf")  # nothing in common
    assert logprob_shift(Answer([1]), answer({1: -0.1})) is None


@pytest.mark.parametrize(("name", "env"), [(QWEN, {}), (LLAMA, LLAMA_ENV), (QWEN_NOW, {})])
def test_each_recorded_transfer_is_what_the_fit_check_predicts(name: str, env: dict[str, str]) -> None:
    """NIXL's byte counters against the fit check's KV per token and hybrid state: Qwen3.5's prefill sends the KV of
    all but the last prompt token, in 528-token blocks, and 24 Gated DeltaNet states; Llama's all tokens, in 16."""
    predicted = prediction(settings_for(env), "decode")
    assert predicted is not None
    block, hybrid = (16, False) if name == LLAMA else (528, True)
    for row in recorded(name)["transfers"]:
        measured = Transfers(row["count"], row["failed"], row["bytes"])
        assert judge_transfer(row["prompt_tokens"], measured, predicted, block, hybrid).ok, row
        assert (
            measured.bytes == judge_transfer(row["prompt_tokens"], measured, predicted, block, hybrid).predicted_bytes
        )
        # A block fewer, none at all, or a failure beside the transfer: each fails.
        short = replace(measured, bytes=(measured.bytes or 0) - block * predicted["kv_bytes_per_token"])
        assert not judge_transfer(row["prompt_tokens"], short, predicted, block, hybrid).ok
        assert not judge_transfer(row["prompt_tokens"], Transfers(), predicted, block, hybrid).ok
        assert not judge_transfer(row["prompt_tokens"], replace(measured, failed=1), predicted, block, hybrid).ok
    # Had Qwen3.5's prefill sent all 529 tokens, its KV would have taken two blocks: one more than NIXL moved.
    if name == QWEN:  # the run that probed the block boundaries (--parity-lengths 527,528,529,...)
        (row,) = [r for r in recorded(name)["transfers"] if r["prompt_tokens"] == 529]
        assert not judge_transfer(530, Transfers(1, 0, row["bytes"]), predicted, block, hybrid).ok


def test_the_recorded_memory_rows() -> None:
    """Qwen3.5's lone engine within the fit check's rows; Llama's KV cache 35 % above the prediction (the fit check's
    overhead is the hybrid model's, 1.1 GiB more than the dense one used on an L4's batch): the row says so."""
    qwen, llama = recorded(QWEN), recorded(LLAMA)
    qwen_rows = compare_memory(_predicted(qwen), qwen["measured"]["decode"])
    assert all(r.ok for r in qwen_rows)
    llama_rows = {r.figure: r for r in compare_memory(_predicted(llama), llama["measured"]["decode"])}
    assert llama_rows["weights"].ok and llama_rows["overhead"].ok and not llama_rows["KV cache"].ok
    wrong_weights = {**qwen["measured"]["decode"], "weights_gib": 16.7 * 1.05}
    assert not compare_memory(_predicted(qwen), wrong_weights)[0].ok


def _predicted(run: dict[str, Any]) -> dict[str, float]:
    rows = {r["figure"]: r["predicted_gib"] for r in run["memory"]["lone engine"]}
    return {"weights_gib": rows["weights"], "overhead_gib": rows["overhead"], "kv_cache_gib": rows["KV cache"]}


# NIXL 1.3.1's exporter as the probe read it on the H100
# (docs/local-check-runs/2026-12-05-h100-nixl-exporter-probe.log).
NIXL_TEXT = """# TYPE agent_rx_bytes_total counter
agent_tx_bytes_total{agent_name="reader",hostname="vm"} 0
agent_rx_bytes_total{agent_name="owner",hostname="vm"} 0
agent_rx_bytes_total{agent_name="reader",hostname="vm"} 8388608
agent_xfer_time_total{agent_name="reader",hostname="vm"} 23486
"""
RAY_TEXT = """ray_vllm_nixl_bytes_transferred_bucket{engine="0",le="33554432.0"} 0.0
ray_vllm_nixl_bytes_transferred_count{WorkerId="a",engine="0"} 2.0
ray_vllm_nixl_bytes_transferred_sum{WorkerId="a",engine="0"} 1.1e+08
ray_vllm_nixl_num_failed_transfers_total{engine="0"} 0.0
"""


def test_the_readers_take_nixls_bytes_and_vllms_counts() -> None:
    assert prometheus_totals(NIXL_TEXT, "agent_")["agent_rx_bytes_total"] == 8388608
    pages = {"ray": RAY_TEXT, "nixl": NIXL_TEXT}
    stats = TransferStats(lambda: ["ray"], "nixl", read=pages.__getitem__, sleep=lambda _: None)
    assert stats.totals() == Transfers(2.0, 0.0, 8388608.0, 1.1e8, 0.0)
    silent = TransferStats(lambda: ["ray"], None, read=pages.__getitem__, sleep=lambda _: None)
    assert silent.totals().bytes is None  # no exporter: the bytes are not counted, not zero


def test_a_request_without_a_transfer_shows_none_within_the_timeout() -> None:
    pages = {"ray": RAY_TEXT, "nixl": NIXL_TEXT}
    stats = TransferStats(lambda: ["ray"], "nixl", read=pages.__getitem__, sleep=lambda _: None)
    before = stats.totals()
    assert stats.since(before, timeout_s=0.05, settle_s=0.0) == Transfers(0.0, 0.0, 0.0, 0.0, 0.0)


def test_a_transfer_counts_once_rays_push_brings_its_count_not_when_nixls_bytes_move() -> None:
    """NIXL's byte counters move as the blocks arrive; vLLM's count reaches the metrics agent with Ray's next push, up
    to a second later. Reading while the count lags, a transfer must not be taken for none."""
    moved = NIXL_TEXT.replace("8388608", "16777216")
    arrived = RAY_TEXT.replace('_count{WorkerId="a",engine="0"} 2.0', '_count{WorkerId="a",engine="0"} 3.0')
    # Each totals() reads the Ray page, then NIXL's: the bytes move at once and hold still for two reads (all that the
    # settling asks), the count comes with the fourth; then all holds.
    pages = [(RAY_TEXT, NIXL_TEXT), (RAY_TEXT, moved), (RAY_TEXT, moved), (RAY_TEXT, moved), (arrived, moved)]
    read = iter([page for pair in pages for page in pair])
    stats = TransferStats(lambda: ["ray"], "nixl", read=lambda url: next(read, {"ray": arrived, "nixl": moved}[url]))
    before = stats.totals()
    moved_since = stats.since(before, timeout_s=5, settle_s=0.0)
    assert (moved_since.count, moved_since.bytes) == (1.0, 8388608.0)


def test_an_empty_random_checkpoint_fails_its_step(tmp_path: Path) -> None:
    """The check writes the checkpoint through the engine; one with no tensors would load nothing."""
    import argparse
    import json as json_

    from tests.local_check_standin import StandInEngine
    from tools.local_check.model import model_dir

    class Empty(StandInEngine):
        def random_checkpoint(self, model_dir: Any, target: Any) -> dict[str, Any]:
            return {**super().random_checkpoint(model_dir, target), "tensors": 0, "parameters": 0}

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json_.dumps({"vocab_size": 1000}))
    (model / "tokenizer.json").write_text("{}")
    args = argparse.Namespace(
        model_dir=str(model), weights="auto", generate_tokenizer=False, checkpoint_dir=None, output_dir=str(tmp_path)
    )
    for engine, ok in ((StandInEngine(), True), (Empty(), False)):
        report = Report()
        model_dir(args, {"model": {"source": "Qwen/Qwen3.5-9B"}}, report, engine)
        assert [(s.name, s.ok) for s in report.steps] == [("random checkpoint", ok)]


def test_routes_that_do_not_answer_and_keys_not_enforced_fail_their_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    from tools.local_check import client

    answers = {
        "GET": (200, {"data": [{"id": "m"}]}),
        "POST": (200, {"choices": [{"text": "x", "message": {"content": "x"}}]}),
    }
    monkeypatch.setattr(client, "http", lambda method, url, body=None, key=None, **_: answers[method])
    report = Report()
    client.check_routes(report, "http://x", "m", "sk-key")
    steps = {s.name: s.ok for s in report.steps}
    assert steps["GET /v1/models"] and steps["POST /v1/completions"] and steps["POST /v1/chat/completions"]
    # The application answered without a key: every "without a key" and "with a wrong key" step fails.
    assert [name for name, ok in steps.items() if not ok] == [
        "GET /v1/models without a key",
        "GET /v1/models with a wrong key",
        "POST /v1/chat/completions without a key",
        "POST /v1/chat/completions with a wrong key",
    ]
    monkeypatch.setattr(client, "http", lambda *args, **kwargs: (404, "Path '/v1/completions' not found"))
    report = Report()
    client.check_routes(report, "http://x", "m", None)
    assert [s.ok for s in report.steps] == [False, False, False]


def test_pd_engines_that_log_no_memory_report_fail_their_memory_steps() -> None:
    from tests.local_check_standin import MEMORY_LOG
    from tools.local_check.application import _pd_memory
    from tools.local_check.results import memory_report

    qwen = recorded(QWEN)
    plan = {"predicted": {phase: {**_predicted(qwen), "kv_cache_gib": 2.0} for phase in ("prefill", "decode")}}
    lone = memory_report(MEMORY_LOG)
    report = Report()
    _pd_memory(report, plan, {"prefill": MEMORY_LOG, "decode": ""}, lone)
    assert [(s.name, s.ok) for s in report.steps] == [("memory prefill", True), ("memory decode", False)]
