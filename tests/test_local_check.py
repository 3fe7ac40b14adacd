"""The one-host GPU check (tools/local_check) without a GPU: its results (parity, vLLM's memory report against the
fit check, NIXL's lines, the benchmark) and the plan on the synthesized RayService of the pinned configuration, and
its whole flow on a real local Ray cluster with a stand-in engine (tests/local_check_standin.py). What a host changes
of the deployed shape: tests/test_local_check_shape.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import settings_for
from tests.local_check_standin import VOCAB, StandInEngine
from tests.loopback import free_port
from tools.local_check import checkpoint, client, engines
from tools.local_check.client import nixl_lines, run_bench
from tools.local_check.plan import BASE_URL, TOKENIZER, bench_entry, build_plan, image_versions
from tools.local_check.results import ParityRow, compare_memory, memory_report, parity_lengths
from tools.local_check.runner import main as run_main
from tools.local_check.tokenizer import tokenizer_files, vocab_size, write_tokenizer

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def plan() -> dict[str, Any]:
    return build_plan(settings_for())


def test_parity_lengths_reach_max_model_len() -> None:
    lengths = parity_lengths(4096, 32, count=4)
    assert lengths[0] == 40 and lengths[-1] == 4096 - 32 - 8 and len(lengths) == 4 and lengths == sorted(lengths)


def test_parity_row_finds_the_first_difference() -> None:
    assert ParityRow(3, [1, 2, 3], [1, 2, 3]).equal
    assert ParityRow(3, [1, 2, 3], [1, 5, 3]).first_difference == 1
    assert ParityRow(3, [1, 2], [1, 2, 3]).first_difference == 2
    assert not ParityRow(3, [], []).equal  # no tokens is no evidence


# vLLM 0.26.0's own lines, as the lone Qwen3.5-9B engine logged them on the H200 at an L4's budget (2026-12-01); a
# line ending in a backslash goes on.
H200_LOG = """(EngineCore pid=6886) INFO 12-01 22:32:28 [v1/worker/gpu_model_runner.py:5347] Model loading took 16.8 \
GiB memory and 0.406746 seconds
(EngineCore pid=6886) DEBUG 12-01 22:32:35 [v1/worker/gpu_worker.py:559] Memory profiling takes 5.93 seconds. Total \
non KV cache memory: 18.03GiB; torch peak memory increase: 1.0GiB; non-torch forward increase memory: 0.22GiB; weights \
memory: 16.8GiB
(EngineCore pid=6886) INFO 12-01 22:32:35 [v1/worker/gpu_worker.py:560] Available KV cache memory: 2.21 GiB
(EngineCore pid=6886) INFO 12-01 22:32:35 [v1/core/kv_cache_utils.py:2177] GPU KV cache size: 51,013 tokens
(EngineCore pid=6886) INFO 12-01 22:32:35 [v1/core/kv_cache_utils.py:2178] Maximum concurrency for 4,096 tokens per \
request: 12.45x
(EngineCore pid=6886) INFO 12-01 22:32:43 [v1/engine/core.py:347] init engine (profile, create kv cache, warmup model) \
took 14.72 s
"""


def test_memory_report_reads_vllms_lines() -> None:
    assert memory_report(H200_LOG) == {
        "weights_gib": 16.8,
        "activation_peak_gib": 1.0,
        "non_torch_gib": 0.22,
        "kv_cache_gib": 2.21,
        "kv_cache_tokens": 51013.0,
        "max_concurrency": 12.45,
        "engine_init_s": 14.72,
    }


def test_the_fit_check_is_conservative_against_the_measured_run(plan: dict[str, Any]) -> None:
    """The prediction of the pinned configuration (Qwen3.5-9B on an L4, eager) against what vLLM measured."""
    rows = compare_memory(plan["predicted"]["decode"], memory_report(H200_LOG))
    assert [(r.figure, r.ok) for r in rows] == [("weights", True), ("overhead", True), ("KV cache", True)]
    overhead = rows[1]
    assert 0 < overhead.predicted_gib - (overhead.measured_gib or 0) < 0.5  # conservative, by less than half a GiB
    optimistic = {**plan["predicted"]["decode"], "overhead_gib": 1.0}
    assert not compare_memory(optimistic, memory_report(H200_LOG))[1].ok


def test_plan_carries_the_jobs_commands_and_the_images_versions(plan: dict[str, Any]) -> None:
    assert image_versions() == {"ray": "2.58.0", "vllm": "0.26.0", "nixl": "1.3.1", "torch": "2.11.0"}
    assert plan["versions"] == image_versions()
    assert [entry["rate"] for entry in plan["bench"]] == [0.5, 1.0, 2.0]
    short = plan["bench"][0]["short"]
    assert short.startswith("vllm bench serve") and BASE_URL in short and TOKENIZER in short
    assert plan["predicted"]["decode"]["eager"] == 1.0  # an L4: no room for CUDA graphs
    rayservice = plan["rayservice"]
    assert yaml.safe_load(rayservice["spec"]["serveConfigV2"])["applications"][0]["name"] == "llm"


def test_stand_in_tokenizer_covers_the_vocabulary_exactly() -> None:
    files = tokenizer_files(VOCAB)
    model = files["tokenizer.json"]["model"]
    ids = sorted([*model["vocab"].values(), *(t["id"] for t in files["tokenizer.json"]["added_tokens"])])
    assert ids == list(range(VOCAB))
    for left, right in model["merges"]:
        assert left in model["vocab"] and right in model["vocab"] and left + right in model["vocab"]
    assert vocab_size({"text_config": {"vocab_size": 248320}}) == 248320


def test_a_reused_checkpoint_gets_the_tokenizer_generated_after_it(tmp_path: Path) -> None:
    """The checkpoint written ahead (`python -m tools.local_check.checkpoint`), the stand-in tokenizer generated
    by the run afterwards: the reused checkpoint must get it, or vLLM serves it without one (on the H100 run of
    2026-12-06 the routes answered 400 and Llama's engine did not start)."""
    model, target = tmp_path / "model", tmp_path / "ckpt"
    model.mkdir()
    (model / "config.json").write_text('{"vocab_size": 1024}')
    target.mkdir()
    (target / "model-00001-of-00001.safetensors").write_bytes(b"")
    (target / checkpoint.INDEX_FILE).write_text(json.dumps({"weight_map": {"w": "model-00001-of-00001.safetensors"}}))
    marker = {"recipe": checkpoint.RECIPE, "config_sha256": checkpoint._config_digest(model), "tensors": 1}
    (target / checkpoint.MARKER).write_text(json.dumps(marker))
    write_tokenizer(model, 1024)
    written = checkpoint.write_random_checkpoint(model, target)  # reused: returns before torch is imported
    assert written["reused"] is True
    assert (target / "tokenizer.json").read_bytes() == (model / "tokenizer.json").read_bytes()
    assert (target / "config.json").is_file()


def test_nixl_lines_are_read_as_make_verify_reads_them(tmp_path: Path) -> None:
    (tmp_path / "worker-1.out").write_text(
        "x\n2026-12-01 22:27:26 NIXL INFO    _api.py:390 Backend UCX was instantiated\n"
    )
    (tmp_path / "worker-2.err").write_text("Transfer plan: TransferTopology(tp_ratio=1, num_kv_heads=4)\n")
    (tmp_path / "worker-3.out").write_text("libfabric: fi_mr_reg failed\n")
    (tmp_path / "worker-4.out").write_text(
        "(ServeReplica:qwen:Decode pid=40) (EngineCore pid=41) (RayWorkerProc pid=42) NIXL INFO Backend UCX was"
        " instantiated\n"
    )
    (tmp_path / "worker-5.out").write_text("(Worker pid=42) NIXL INFO _api.py:390 Backend UCX was instantiated\n")
    plan = "INFO 12-02 00:51:35 [base_worker.py:1565] Transfer plan: TransferTopology(tp_ratio=1)"
    (tmp_path / "worker-6.out").write_text(f"(Worker pid=43) {plan}\n(EngineCore pid=7) (Worker pid=43) {plan}\n")
    backends, plans = nixl_lines(tmp_path)
    # One engine per logging process: the line Ray repeats in a parent's log is the same engine (pid 42).
    assert backends == {
        "42": "UCX",
        "worker-1.out": "UCX",
        "worker-3.out": "none, GPU memory registration failed (fi_mr_reg failed)",
    }
    assert len(plans) == 2  # worker-2's and pid 43's, whose line Ray repeated in its parent's log


def test_without_the_images_stack_it_stops_with_one_line(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"versions": {"vllm": "0.26.0", "torch": "2.11.0"}}))
    done = subprocess.run(
        [sys.executable, "-m", "tools.local_check", "run", "--plan", str(plan_file), "--output-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "vllm is not installed (the image has 0.26.0)" in done.stderr and "requirements-gpu.txt" in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "tools.local_check", "run", "--plan", str(tmp_path / "none.json")],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 2 and done.stderr.startswith("error: no plan at")


def test_a_lone_engine_that_lingers_after_its_answers_is_stopped_with_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engines, "EXIT_GRACE_S", 1)
    answers, child_pid = tmp_path / "answers.json", tmp_path / "child.pid"
    # Like vLLM's LLM: a child process (its engine core) that outlives the answers unless the group is stopped.
    script = (
        "import subprocess, sys, time, pathlib;"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
        f"pathlib.Path({str(child_pid)!r}).write_text(str(c.pid));"
        f"pathlib.Path({str(answers)!r}).write_text('{{}}'); time.sleep(600)"
    )
    process = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    started = time.monotonic()
    assert engines._wait_for_answers(process, answers) != 0
    assert time.monotonic() - started < 30
    child = int(child_pid.read_text())
    for _ in range(50):  # the child, re-parented, is reaped by init shortly after the signal
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the lone engine's child still runs")


def test_a_previous_runs_answers_are_not_read_as_this_engines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "reference-decode.log"
    answers = log.with_suffix(".json")
    answers.write_text(json.dumps({"start_s": 1.0, "outputs": [[9, 9]]}))  # make local-check's directory, run before
    seen: dict[str, bool] = {}

    class Engine:  # the lone engine's process: it writes its answers and exits
        returncode = 0

        def __init__(self, command: list[str], **kwargs: Any) -> None:
            seen["stale answers at start"] = answers.exists()
            answers.write_text(json.dumps({"start_s": 2.0, "outputs": [[1, 2]]}))

        def poll(self) -> int:
            return 0

    monkeypatch.setattr(engines.subprocess, "Popen", Engine)
    result, report = engines.VllmEngine().reference("/m", {}, [[1]], log, {})
    assert seen == {"stale answers at start": False} and result["outputs"] == [[1, 2]] and report["start_s"] == 2.0


def test_a_lone_engine_that_exits_by_itself_keeps_its_status(tmp_path: Path) -> None:
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"], start_new_session=True)
    assert engines._wait_for_answers(process, tmp_path / "never.json") == 3


def test_ready_means_the_engines_run_not_only_the_ingress(monkeypatch: pytest.MonkeyPatch) -> None:
    # The ingress lists the model from its config while the engines still start (seen on the H200: minutes apart).
    listed = (200, {"data": [{"id": "m"}]})
    monkeypatch.setattr(client, "http", lambda *args, **kwargs: listed)
    states, naps = iter([False, False, True]), []
    client.wait_ready("http://x", "m", None, 60, running=lambda: next(states), sleep=naps.append)
    assert len(naps) == 2
    with pytest.raises(RuntimeError, match="failed to deploy: replica died"):
        client.wait_ready(
            "http://x", "m", None, 60, running=lambda: False, failed=lambda: "replica died", sleep=naps.append
        )


def test_the_whole_flow_on_a_real_ray_cluster_with_a_stand_in_engine(plan: dict[str, Any], tmp_path: Path) -> None:
    """Head without CPUs or GPUs, a prefill and a decode node with their resources and the accelerator the bundles ask
    for; the serve config as patched; every route, parity, the NIXL lines from the Ray session's logs, a benchmark run
    (a stand-in command printing the Job's marker lines), the memory comparison; the JSON and the chart."""
    marker = plan["bench_result_marker"]
    result = {
        "completed": 10,
        "failed": 0,
        "median_ttft_ms": 12.0,
        "p99_ttft_ms": 20.0,
        "median_itl_ms": 3.0,
        "p99_itl_ms": 5.0,
        "p50_ttft_ms": 12.0,
        "p50_itl_ms": 3.0,
        "median_tpot_ms": 4.0,
        "p99_tpot_ms": 6.0,
    }
    stand_in = "python3 -c " + json.dumps(
        f"import json,sys; print({marker!r} + json.dumps({{**{result!r}, 'workload': sys.argv[1], 'rate': 2.0}}))"
    )
    plan = {**plan, "bench": [bench_entry(2.0, f"{stand_in} long", f"{stand_in} short")]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"vocab_size": VOCAB}))
    out = tmp_path / "out"
    port = free_port()
    code = run_main(
        ["--plan", str(tmp_path / "plan.json"), "--output-dir", str(out), "--model-dir", str(model),
         "--generate-tokenizer", "--mode", "both", "--parity-prompts", "2", "--bench-rates", "2.0", "--port", str(port),
         "--engine", f"{StandInEngine.__module__}:StandInEngine"]
    )  # fmt: skip
    report = json.loads((out / "local-check.json").read_text())
    steps = {s["name"]: s for s in report["steps"]}
    assert code == 0, [s for s in report["steps"] if not s["ok"]]
    assert {
        "random checkpoint",
        "memory lone engine",
        "noise floor",
        "context",
        "GET /v1/models",
        "POST /v1/completions",
        "POST /v1/chat/completions",
        "placement",
        "memory prefill",
        "memory decode",
        "parity (matched path)",
        "parity (other lengths)",
        "transfer",
        "nixl",
        "bench",
    } <= set(steps)
    # The spread of lengths, and three prompts one past the lone engine's batch (its last prompt token computed alone).
    assert [p["prompt_tokens"] for p in report["parity"]] == [40, 2049, 4056, 2049, 2049]
    assert [p["matched"] for p in report["parity"]] == [False, True, False, True, True]
    assert all(p["equal"] for p in report["parity"])
    # Each request's own transfer: one, of the bytes the fit check predicts (the stand-in sizes them independently).
    assert [t["count"] for t in report["transfers"]] == [1.0] * 5
    assert all(t["bytes"] == pytest.approx(t["predicted_bytes"]) for t in report["transfers"])
    assert "prefill (Prefill:qwen3.5-9b) on node" in steps["placement"]["detail"]
    # Each of the two engines instantiated the backend the patched config asks for, by the process that logged it.
    assert sorted(report["nixl"]["backends"].values()) == ["UCX", "UCX"]
    changed = {c["what"] for c in report["changes"]}
    assert {"model_source", "kv_connector_extra_config.backends", "tokenizer", "env VLLM_HOST_IP"} <= changed
    assert (out / "local-check.png").is_file()
    # Both modes of issue 29 on the same cluster: the collocated replicas answer the same and the rates compare.
    assert {"collocated: deploy", "collocated: parity", "collocated: bench"} <= set(steps)
    assert {r["mode"] for r in report["bench"]} == {"pd", "collocated"}
    assert "short@2.0: TTFT p50 12 ms, TPOT p50 4.0 ms" in steps["bench"]["detail"]
    (row,) = report["comparison"]
    assert row["rate"] == 2.0 and row["pd short tpot p50 ms"] == 4.0 and "collocated long ttft p50 ms" in row
    assert "VLLM_PORT" not in os.environ  # the raylets' environment was set for their start only


def test_the_tests_ports_leave_the_checks_nixl_ports_and_a_block_is_free_throughout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The whole flow above binds the check's default NIXL exporter ports (one a worker node) while other tests pick
    theirs; the faults scenario takes a block of its own, one a worker node, none of it bound."""
    import socket

    from tests import loopback
    from tools.local_check.cluster import NIXL_PORT_BASE

    spare, good = free_port(), free_port(2)
    while spare - 2 < good < spare + 2:
        good = free_port(2)
    with socket.socket() as held:
        held.bind(("127.0.0.1", spare + 1))
        # The candidates in the order free_port draws them: blocks that reach the check's ports or the held one first.
        candidates = [NIXL_PORT_BASE - 1, NIXL_PORT_BASE, spare, spare + 1, good]
        monkeypatch.setattr(loopback.random, "sample", lambda ports, k: [p for p in candidates if p in ports])
        assert free_port(2) == good, (candidates, free_port(2))


def test_a_benchmark_whose_requests_failed_fails_the_check() -> None:
    """`vllm bench serve` exits 0 when every request failed: the counts decide."""
    marker = "BENCH_RESULT "

    def printing(**figures: Any) -> str:
        return "python3 -c " + json.dumps(f"import json; print({marker!r} + json.dumps({figures!r}))")

    good, bad = printing(workload="long", completed=40, failed=0), printing(workload="short", completed=0, failed=60)
    plan = {"bench_result_marker": marker, "bench": [bench_entry(1.0, good, bad)]}
    with pytest.raises(RuntimeError, match="short: 0 completed, 60 failed"):
        run_bench(plan, "http://127.0.0.1:9", "/m", None, None)
    plan["bench"][0] = bench_entry(1.0, good, printing(workload="short", completed=60, failed=0))
    assert sorted(r["workload"] for r in run_bench(plan, "http://127.0.0.1:9", "/m", None, None)) == ["long", "short"]
