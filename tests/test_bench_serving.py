"""`make bench-serving`: the Job (validated like the other Kubernetes objects), its script run for real
with a stand-in `vllm` (the image's vLLM is not installable here), and the result table and comparison."""

from __future__ import annotations

import json
import shlex
import stat
import subprocess
from pathlib import Path
from typing import Any

import cdk8s
import kubernetes_validate
import pytest
import yaml

from k8s_constructs.bench_job import RESULT_MARKER, BenchJobChart, bench_script, concurrent_runs
from tests.conftest import settings_for
from tools.bench_serving import bench_props, parse_results, run_job, summarize, table

SETTINGS = settings_for()


def _job() -> dict[str, Any]:
    (obj,) = yaml.safe_load_all(
        cdk8s.App.of(BenchJobChart(cdk8s.App(), "bench", props=bench_props(SETTINGS))).synth_yaml()
    )
    return obj


def test_the_job_passes_strict_validation_and_is_a_cpu_client_of_the_serve_service() -> None:
    job = _job()
    kubernetes_validate.validate(job, SETTINGS.kubernetes_version, strict=True)
    assert (job["metadata"]["name"], job["metadata"]["namespace"]) == ("ray-llm-bench", "inference")
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == SETTINGS.dlc_image  # the image with vLLM inside
    assert set(container["resources"]["limits"]) == {"cpu", "memory"}  # no GPU
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"
    ] == [{"key": "role", "operator": "In", "values": ["system"]}]
    script = container["command"][-1]
    assert "--base-url http://ray-llm-serve-svc.inference.svc.cluster.local:8000" in script
    assert script.count("vllm bench serve") == 10  # long and short streams at three rates, then the ramp's four steps


FAKE_VLLM = """#!/usr/bin/env python3
import json, sys
args = sys.argv[1:]
value = lambda flag: args[args.index(flag) + 1]
if value("--request-rate") == FAIL_AT:
    sys.exit(3)
rate, length = float(value("--request-rate")), int(value("--random-input-len"))
result = {"p50_ttft_ms": length / 10 + rate, "p99_ttft_ms": length / 5 + rate, "p50_tpot_ms": 10 + rate,
          "p99_tpot_ms": 15 + rate, "p50_itl_ms": 20 + rate, "p99_itl_ms": 40 + rate,
          "output_throughput": 100 * rate, "request_throughput": rate}
json.dump(result, open(value("--result-dir") + "/" + value("--result-filename"), "w"))
"""


def _run_script(tmp_path: Path, fail_at: str = "none") -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "vllm"
    fake.write_text(FAKE_VLLM.replace("FAIL_AT", repr(fail_at)))
    fake.chmod(stat.S_IRWXU)
    script = bench_script(bench_props(SETTINGS)).replace("/tmp", str(tmp_path))
    return subprocess.run(
        ["/bin/bash", "-c", script],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_script_runs_both_streams_at_each_rate_and_reports_every_run(tmp_path: Path) -> None:
    result = _run_script(tmp_path)
    assert result.returncode == 0, result.stderr
    runs = parse_results(result.stdout)
    mixed = [(w, r) for r in (0.5, 1.0, 2.0) for w in ("long", "short")]
    ramp = [("ramp", r) for r in (1.0, 2.0, 4.0, 8.0)]
    assert sorted((r["workload"], r["rate"]) for r in runs) == sorted(mixed + ramp)
    rows = summarize(runs)
    assert rows[0] == {
        "workload": "long",
        "rate": 0.5,
        "p50_ttft_ms": 300.5,
        "p99_ttft_ms": 600.5,
        "p50_tpot_ms": 10.5,
        "p99_tpot_ms": 15.5,
        "p50_itl_ms": 20.5,
        "p99_itl_ms": 40.5,
        "output_throughput": 50.0,
        "request_throughput": 0.5,
    }


def test_a_failed_run_fails_the_job(tmp_path: Path) -> None:
    assert _run_script(tmp_path, fail_at="1.0").returncode != 0


def test_the_table_and_the_comparison_with_a_previous_result() -> None:
    now = [
        {
            "workload": "short",
            "rate": 1.0,
            "p50_ttft_ms": 100.0,
            "p99_ttft_ms": 200.0,
            "p50_itl_ms": 22.0,
            "p99_itl_ms": 30.0,
            "output_throughput": 120.0,
            "request_throughput": 1.0,
        }
    ]
    before = [{**now[0], "p50_itl_ms": 20.0, "output_throughput": 100.0}]
    plain = table(now)
    assert plain.splitlines()[0].split()[:4] == ["workload", "rate", "TTFT", "p50"] and "22.0" in plain
    compared = table(now, before)
    assert "22.0 (+10% worse)" in compared and "120.0 (+20%)" in compared and "100.0 (+0%)" in compared


def test_results_are_saved_as_json(tmp_path: Path) -> None:
    rows = summarize(parse_results(_run_script(tmp_path).stdout))
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"runs": rows}))
    assert table(json.loads(path.read_text())["runs"]) == table(rows)


def test_the_ramp_goes_past_one_replicas_capacity_and_holds_its_last_rate() -> None:
    from k8s_constructs.bench_job import ramp_steps
    from k8s_constructs.serve_config import TARGET_ONGOING_REQUESTS

    steps = ramp_steps(bench_props(SETTINGS))
    assert [rate for _, rate in steps] == [1.0, 2.0, 4.0, 8.0]
    assert [w.num_prompts for w, _ in steps] == [120, 240, 480, 4800]
    assert bench_script(bench_props(SETTINGS)).count("--max-concurrency 48") == 4
    # At the top rate, with a request taking a few seconds (256 tokens), far more streams than a decode replica's
    # target.
    top_workload, top_rate = steps[-1]
    assert top_rate * 4 > TARGET_ONGOING_REQUESTS["decode"] and top_workload.output_len == 256


class _Cluster:
    """kubectl as the benchmark sees it: a decode pod and a GPU node join on the second sample; the Job succeeds on the
    third."""

    def __init__(self) -> None:
        self.samples = 0

    def __call__(self, args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        out = ""
        if args[:2] == ["get", "pods"]:
            self.samples += 1
            pods = [("prefill", "Running"), ("decode", "Running")] + (
                [("decode", "Running"), ("decode", "Pending")] if self.samples >= 2 else []
            )
            out = json.dumps(
                {"items": [{"metadata": {"labels": {"ray.io/group": g}}, "status": {"phase": p}} for g, p in pods]}
            )
        elif args[:2] == ["get", "nodes"]:
            ready = {"type": "Ready", "status": "True"}
            out = json.dumps({"items": [{"status": {"conditions": [ready]}}] * (3 if self.samples >= 2 else 2)})
        elif args[0] == "get":
            out = "1," if self.samples >= 3 else ","
        elif args[0] == "logs":
            out = RESULT_MARKER + json.dumps({"workload": "ramp", "rate": 8.0, "p50_ttft_ms": 90.0})
        return subprocess.CompletedProcess(args, 0, out, "")


def test_the_run_samples_replicas_and_gpu_nodes_until_the_job_ends() -> None:
    log, timeline, unfinished = run_job(SETTINGS, _Cluster(), 60, poll_s=0)
    assert unfinished == ""
    assert parse_results(log)[0]["workload"] == "ramp"
    assert [(s["prefill"], s["decode"], s["gpu_nodes"]) for s in timeline] == [(1, 1, 2), (1, 2, 3), (1, 2, 3)]


def test_every_run_draws_a_png_beside_its_json(tmp_path: Path) -> None:
    from matplotlib import image

    from tools.bench_chart import draw

    rows = summarize(parse_results(_run_script(tmp_path).stdout))
    timeline = [
        {"t": 0, "prefill": 1, "decode": 1, "gpu_nodes": 2},
        {"t": 600, "prefill": 1, "decode": 2, "gpu_nodes": 3},
    ]
    chart = draw(rows, timeline, tmp_path / "bench-serving.png", title="test")
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = image.imread(chart).shape
    assert width > 1000 and height > 400


def test_the_runs_key_is_created_not_applied_and_deleted_when_the_run_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """`kubectl apply` would copy the key into the last-applied-configuration annotation; a Job that cannot be created
    must not leave the run's Secret behind."""
    from tests.conftest import ENDPOINT, settings_for

    monkeypatch.setattr("tools.endpoint.read_key", lambda settings, session: "sk-test-key")
    calls: list[tuple[list[str], str | None]] = []

    def kubectl(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        calls.append((args, stdin))
        failed = args[:1] == ["apply"]  # the Job
        return subprocess.CompletedProcess(args, 1 if failed else 0, "", "denied" if failed else "")

    with pytest.raises(RuntimeError, match="cannot create Job"):
        run_job(settings_for(ENDPOINT), kubectl, 60, poll_s=0)
    verbs = [(args[0], args[1]) for args, _ in calls]
    created = [stdin for args, stdin in calls if args[:1] == ["create"]]
    assert len(created) == 1 and "sk-test-key" in (created[0] or "")
    assert not any("sk-test-key" in (stdin or "") for args, stdin in calls if args[0] == "apply")
    assert verbs[-1] == ("delete", "secret")


def test_two_runs_ending_together_print_whole_result_lines(tmp_path: Path) -> None:
    """vLLM's saved results are longer than a pipe's atomic write (4 KiB): two runs printing theirs at the same
    moment interleaved (seen under load in the local check's test). Each line is printed once both runs ended."""
    start = tmp_path / "go"

    def run(label: str) -> str:
        program = (
            f"import json, os, time; [time.sleep(0.001) for _ in iter(lambda: os.path.exists({str(start)!r}), True)]; "
            f"print({RESULT_MARKER!r} + json.dumps({{'workload': {label!r}, 'rate': 1.0, 'itls': [1.5] * 100000}}))"
        )
        return f"python3 -c {shlex.quote(program)}"

    script = concurrent_runs(run("long"), run("short"), str(tmp_path / "pair"))
    process = subprocess.Popen(["bash", "-c", f"set -e; {script}"], stdout=subprocess.PIPE, text=True)
    start.touch()
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    assert [r["workload"] for r in parse_results(out)] == ["long", "short"]
