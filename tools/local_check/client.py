"""What the one-host check asks of the endpoint and reads from the Ray session: the routes, greedy tokens, the
NIXL lines (by `make verify`'s reader) and the benchmark Job's own `vllm bench serve` runs."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from k8s_constructs.ray_facts import NIXL_LOG_PATTERN, backend_of
from tools.local_check.engines import PARITY_MAX_TOKENS
from tools.local_check.placement import written_by
from tools.local_check.results import Answer, Report

# What the plan leaves for the host in the benchmark Job's commands (tools/local_check/plan.py writes them).
BASE_URL = "@BASE_URL@"
TOKENIZER = "@TOKENIZER@"
SCRATCH = "@SCRATCH@"  # a directory of the host's, for the two runs' result lines

TRANSFER_PLAN_MARKER = "Transfer plan"  # the decode engine's NIXL handshake (vLLM 0.26, nixl_connector.py)


def http(
    method: str, url: str, body: dict[str, Any] | None = None, *, key: str | None = None, timeout: float = 300
) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            payload = response.read()
            return response.status, json.loads(payload) if payload else None
    except urllib.error.HTTPError as error:
        payload = error.read()
        try:
            return error.code, json.loads(payload)
        except ValueError:
            return error.code, payload.decode(errors="replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
        return 0, str(error)


def wait_ready(
    base: str,
    model_id: str,
    key: str | None,
    timeout_s: float,
    *,
    failed: Callable[[], str] = lambda: "",
    running: Callable[[], bool] = lambda: True,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Seconds until the endpoint lists the model and the application runs; TimeoutError past timeout_s,
    RuntimeError when `failed` says why. The ingress lists the model from its config as soon as it is up, minutes
    before the engines are (seen on the H200): `running` is what says the engines answer."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        status, body = http("GET", f"{base}/v1/models", key=key, timeout=10)
        if status == 200 and any(m.get("id") == model_id for m in (body or {}).get("data", [])) and running():
            return time.monotonic() - started
        why = failed()
        if why:
            raise RuntimeError(f"the application failed to deploy: {why.splitlines()[0]}")
        sleep(0.5)  # a GET and a status call: cheap, and the check goes on as soon as the engines answer
    raise TimeoutError(f"the endpoint did not list {model_id} with every deployment running within {timeout_s:.0f} s")


def check_routes(report: Report, base: str, model_id: str, key: str | None, *, prefix: str = "") -> None:
    status, body = http("GET", f"{base}/v1/models", key=key)
    ids = [m.get("id") for m in (body or {}).get("data", [])] if status == 200 and isinstance(body, dict) else []
    report.add(f"{prefix}GET /v1/models", model_id in ids, f"{status}: {ids}")
    status, body = http(
        "POST",
        f"{base}/v1/completions",
        {"model": model_id, "prompt": "The capital of France is", "max_tokens": 16, "temperature": 0},
        key=key,
    )
    text = body["choices"][0]["text"] if status == 200 and isinstance(body, dict) else ""
    report.add(
        f"{prefix}POST /v1/completions",
        status == 200 and bool(text),
        f"{status}: {text[:60]!r}" if status == 200 else f"{status}: {str(body)[:200]}",
    )
    chat = {
        "model": model_id,
        "messages": [{"role": "user", "content": "Say hello in five words."}],
        "max_tokens": 16,
        "temperature": 0,
    }
    status, body = http("POST", f"{base}/v1/chat/completions", chat, key=key)
    message = body["choices"][0]["message"] if status == 200 and isinstance(body, dict) else {}
    # A thinking model's answer may be reasoning alone (REASONING_PARSER moves it out of the content).
    content = message.get("content") or message.get("reasoning") or message.get("reasoning_content") or ""
    report.add(
        f"{prefix}POST /v1/chat/completions",
        status == 200 and bool(content),
        f"{status}: {content[:60]!r}" if status == 200 else f"{status}: {str(body)[:200]}",
    )
    if key:
        for method, path, payload in (("GET", "/v1/models", None), ("POST", "/v1/chat/completions", chat)):
            status, body = http(method, f"{base}{path}", payload, key=None)
            report.add(f"{prefix}{method} {path} without a key", status == 401, f"{status}: {str(body)[:120]}")
            status, body = http(method, f"{base}{path}", payload, key="sk-wrong")
            report.add(f"{prefix}{method} {path} with a wrong key", status == 401, f"{status}")


PARITY_LOGPROBS = 5  # top-k logprobs of each generated position, through PD as from the lone engine


def pd_answer(base: str, model_id: str, prompt: list[int], key: str | None) -> Answer:
    """One greedy completion through the application, with each position's top-k logprobs keyed by token id
    (vLLM's `return_tokens_as_token_ids` makes the keys `token_id:N`: compared as ids, not text)."""
    request = {
        "model": model_id,
        "prompt": prompt,
        "max_tokens": PARITY_MAX_TOKENS,
        "temperature": 0,
        "ignore_eos": True,
        "return_token_ids": True,
        "logprobs": PARITY_LOGPROBS,
        "return_tokens_as_token_ids": True,
    }
    status, body = http("POST", f"{base}/v1/completions", request, key=key)
    if status != 200 or not isinstance(body, dict):
        raise RuntimeError(f"completion of a {len(prompt)}-token prompt: {status} {str(body)[:200]}")
    choice = body["choices"][0]
    tokens: list[int] = choice.get("token_ids") or []
    top = (choice.get("logprobs") or {}).get("top_logprobs") or []
    return Answer(
        [int(t) for t in tokens],
        [{int(str(k).rsplit(":", 1)[-1]): float(v) for k, v in (position or {}).items()} for position in top],
    )


def parity_prompts(lengths: list[int], vocab: int, seed: int = 1) -> list[list[int]]:
    """Random token ids, away from the top of the vocabulary (special tokens live there)."""
    generator = random.Random(seed)
    high = max(1000, vocab - 1000)
    return [[generator.randrange(100, high) for _ in range(n)] for n in lengths]


def nixl_lines(log_dir: Path, pids: set[int] | None = None) -> tuple[dict[str, str], list[str]]:
    """Each engine's NIXL backend, read as make verify reads a worker's (k8s_constructs/ray_facts.py), keyed by the
    process that logged it (the innermost `pid=` of a line: Ray repeats a child's lines in its parent's log, so
    files are not engines), and the decode engine's transfer plan lines; from the given processes' logs only, when
    given."""
    pattern = re.compile(NIXL_LOG_PATTERN)
    found: dict[str, list[str]] = {}
    plans: dict[tuple[str, str], str] = {}
    for path in sorted(log_dir.glob("*")):
        if not path.is_file() or path.suffix not in (".out", ".err", ".log"):
            continue
        if pids is not None and not written_by(path, pids):
            continue
        for line in path.read_text(errors="replace").splitlines():
            logged_by = re.findall(r"pid=(\d+)", line)
            process = logged_by[-1] if logged_by else path.name
            if pattern.search(line):
                found.setdefault(process, []).append(line)
            if TRANSFER_PLAN_MARKER in line:
                # One per logging process, as for the backends (the H200 run counted decode's plan twice).
                plans.setdefault((process, line[line.index(TRANSFER_PLAN_MARKER) :]), line.strip()[-200:])
    return {process: backend_of("\n".join(lines)) for process, lines in sorted(found.items())}, sorted(plans.values())


def run_bench(
    plan: dict[str, Any], base: str, tokenizer: str, rates: list[float] | None, key: str | None
) -> list[dict[str, Any]]:
    """The plan's benchmark runs (the Job's `vllm bench serve` commands): long and short streams at once per rate."""
    marker = plan["bench_result_marker"]
    results = []
    for entry in plan["bench"]:
        if rates is not None and entry["rate"] not in rates:
            continue
        env = {**os.environ, **({"OPENAI_API_KEY": key} if key else {})}
        with tempfile.TemporaryDirectory(prefix="local-check-bench-") as scratch:
            # As the Job runs them (bench_job.concurrent_runs, written into the plan).
            script = entry["script"].replace(BASE_URL, base).replace(TOKENIZER, tokenizer).replace(SCRATCH, scratch)
            done = subprocess.run(
                ["bash", "-c", f"set -e; {script}"], capture_output=True, text=True, env=env, check=False
            )
        lines = [json.loads(line.split(marker, 1)[1]) for line in done.stdout.splitlines() if marker in line]
        # `vllm bench serve` exits 0 when every request failed ("All requests failed", completed 0): count them.
        incomplete = [r for r in lines if r.get("failed") or not r.get("completed")]
        if incomplete:
            raise RuntimeError(
                f"vllm bench serve at {entry['rate']} req/s: "
                + "; ".join(
                    f"{r.get('workload')}: {r.get('completed')} completed, {r.get('failed')} failed" for r in incomplete
                )
            )
        if done.returncode != 0 or len(lines) != 2:
            raise RuntimeError(
                f"vllm bench serve at {entry['rate']} req/s failed (exit {done.returncode}):"
                f" {(done.stderr or done.stdout).strip()[-300:]}"
            )
        results += lines
    return results
