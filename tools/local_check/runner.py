"""The GPU host's half of `make local-check`: run the plan's serving config on a local Ray cluster shaped like its
RayCluster and record whether it works. Steps, each a line of the result:

  host        a GPU, and the image's versions of ray, vllm, nixl and torch (else one line, exit 2)
  reference   one non-disaggregated engine alone on the GPU: greedy answers and vLLM's memory report
  deploy      the serve config, with only what this host forces changed (each change printed), until it answers
  routes      GET /v1/models, POST /v1/completions, POST /v1/chat/completions (with an API key where the config
              enforces keys: 401 without one)
  parity      greedy token ids of PD equal to the lone engine's, on prompts up to max_model_len
  nixl        the backend each engine instantiated, read from the Ray logs by make verify's own reader; the
              decode engine's transfer plan
  bench       the benchmark Job's own `vllm bench serve` runs (long and short streams)
  memory      each phase's memory report against the fit check's prediction

One JSON file and one PNG per run (--output-dir); exit 0 only when every step held.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from k8s_constructs.ray_facts import NIXL_LOG_PATTERN, SERVE_PORT, backend_of
from tools.local_check.shape import (
    GIB,
    Change,
    Host,
    ParityRow,
    Report,
    Target,
    accelerator_resources,
    cluster_shape,
    collocated_config,
    compare_memory,
    gpu_assignment,
    memory_report,
    parity_lengths,
    patch_serve_config,
    reference_engine_kwargs,
    serve_config,
)
from tools.local_check.tokenizer import vocab_size, write_tokenizer

TRANSFER_PLAN_MARKER = "Transfer plan"  # the decode engine's NIXL handshake (vLLM 0.26, nixl_connector.py)
PARITY_MAX_TOKENS = 32
VLLM_PORT_BASE = 31000
RESULT_FILE = "local-check.json"
READY_TIMEOUT_S = 1200
EXIT_MISSING = 2  # no GPU, other versions: the check could not run


class Engine(Protocol):
    """What the runner asks of the serving stack: the real one (vLLM on a GPU), or a stand-in the tests give."""

    name: str

    def host(self) -> Host: ...

    def installed_versions(self) -> dict[str, str]: ...

    def reference(self, model: str, engine_kwargs: dict[str, Any], prompts: list[list[int]] | None, log: Path) -> tuple[list[list[int]], dict[str, float]]: ...

    def app_import_path(self, deployed: str) -> str: ...


class VllmEngine:
    """vLLM 0.26 on this host's GPUs: the lone engine in a process of its own."""

    name = "vllm"

    def host(self) -> Host:
        import torch

        if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
            raise MissingPrerequisite("no NVIDIA GPU is visible (torch.cuda.device_count() is 0): run `make local-check` on a GPU host")
        properties = torch.cuda.get_device_properties(0)
        total = torch.cuda.mem_get_info(0)[1]
        return Host(
            gpus=torch.cuda.device_count(),
            gpu_name=properties.name,
            gpu_total_bytes=total,
            compute_capability=(properties.major, properties.minor),
            efa=_has_efa(),
            cutlass_dsl=importlib.util.find_spec("cutlass") is not None,
        )

    def installed_versions(self) -> dict[str, str]:
        from importlib.metadata import PackageNotFoundError, version

        found = {}
        for name in ("ray", "vllm", "nixl", "torch"):
            try:
                found[name] = version(name).split("+", 1)[0]
            except PackageNotFoundError:
                found[name] = "not installed"
        return found

    def reference(self, model: str, engine_kwargs: dict[str, Any], prompts: list[list[int]] | None, log: Path) -> tuple[list[list[int]], dict[str, float]]:
        out = log.with_suffix(".json")
        command = [sys.executable, "-m", "tools.local_check.reference", "--model", model, "--engine-kwargs", json.dumps(engine_kwargs), "--output", str(out)]
        if prompts is not None:
            prompt_file = log.with_suffix(".prompts.json")
            prompt_file.write_text(json.dumps(prompts))
            command += ["--prompts", str(prompt_file), "--max-tokens", str(PARITY_MAX_TOKENS)]
        with log.open("w") as sink:
            done = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, "VLLM_LOGGING_LEVEL": "DEBUG"}, check=False)
        text = log.read_text(errors="replace")
        if done.returncode != 0:
            tail = [line for line in text.splitlines() if "Error" in line][-1:] or text.splitlines()[-1:]
            raise RuntimeError(f"the lone engine failed (exit {done.returncode}; {log}): {tail[0] if tail else ''}")
        result = json.loads(out.read_text())
        report = memory_report(text)
        report["start_s"] = result["start_s"]
        return result["outputs"], report

    def app_import_path(self, deployed: str) -> str:
        return deployed


class MissingPrerequisite(Exception):
    """The check cannot run here: one line, exit 2."""


def _has_efa() -> bool:
    """An EFA device (its uverbs under /sys/class/infiniband) and libfabric's efa provider loadable."""
    devices = Path("/sys/class/infiniband")
    return devices.is_dir() and any(d.name.startswith("rdmap") or "efa" in d.name for d in devices.iterdir()) and shutil.which("fi_info") is not None


def load_engine(spec: str) -> Engine:
    if spec == "vllm":
        return VllmEngine()
    module, _, name = spec.partition(":")
    engine: Engine = getattr(importlib.import_module(module), name)()
    return engine


# --- the local cluster -------------------------------------------------------------------------------------------


def worker_env(rayservice: dict[str, Any], cache: Path) -> tuple[dict[str, str], list[Change]]:
    """The GPU worker container's environment as the raylets' (the engines inherit it); what a pod has and a host
    does not (the pod's IP, paths on the node's model cache) replaced, each named."""
    groups = rayservice["spec"]["rayClusterConfig"].get("workerGroupSpecs", [])
    env: dict[str, str] = {}
    changes: list[Change] = []
    for group in groups:
        for item in group["template"]["spec"]["containers"][0].get("env", []):
            if "value" in item:
                env[item["name"]] = str(item["value"])
            elif item["name"] == "VLLM_HOST_IP":
                env["VLLM_HOST_IP"] = "127.0.0.1"
                if not any(c.what == "env VLLM_HOST_IP" for c in changes):
                    changes.append(Change("env VLLM_HOST_IP", "the pod's IP", "127.0.0.1", "every Ray node is on this host"))
    node_cache = env.get("HF_HOME")
    if node_cache:
        for name, value in sorted(env.items()):
            if value == node_cache or value.startswith(node_cache + "/"):
                here = str(cache) + value[len(node_cache) :]
                changes.append(Change(f"env {name}", value, here, "a path on the GPU node's model cache"))
                env[name] = here
    return env, changes


class LocalCluster:
    """A head and one raylet per worker pod on this host (ray.cluster_utils.Cluster), each GPU node with its
    CUDA_VISIBLE_DEVICES, the group's custom resources and KubeRay's node-group label."""

    def __init__(self, plan: dict[str, Any], host: Host, extra_resources: dict[str, float], env: dict[str, str]) -> None:
        from ray.cluster_utils import Cluster

        shape = cluster_shape(plan["rayservice"])
        self.assignment, self.shared_gpu = gpu_assignment(shape, host.gpus)
        saved = dict(os.environ)
        try:
            os.environ.update(env)
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            self.cluster = Cluster(
                initialize_head=True,
                head_node_args={"num_cpus": shape.head.num_cpus, "num_gpus": shape.head.num_gpus, "labels": shape.head.labels, "include_dashboard": False},
            )
            for number, (node, gpus) in enumerate(zip(shape.workers, self.assignment, strict=True)):
                os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
                # Each pod has its own IP; on one host two engines starting at once took the same torch.distributed
                # port (EADDRINUSE, then Serve's retry): each node's engines start their port search elsewhere.
                os.environ["VLLM_PORT"] = str(VLLM_PORT_BASE + 100 * number)
                self.cluster.add_node(num_cpus=node.num_cpus, num_gpus=node.num_gpus, resources={**node.resources, **extra_resources}, labels=node.labels)
            self.cluster.wait_for_nodes()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        self.shape = shape

    @property
    def address(self) -> str:
        address: str = self.cluster.address
        return address

    def log_dir(self) -> Path:
        return Path(self.cluster.head_node.get_session_dir_path()) / "logs"

    def shutdown(self) -> None:
        self.cluster.shutdown()


# --- HTTP ------------------------------------------------------------------------------------------------------


def http(method: str, url: str, body: dict[str, Any] | None = None, *, key: str | None = None, timeout: float = 300) -> tuple[int, Any]:
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


def wait_ready(base: str, model_id: str, key: str | None, timeout_s: float, sleep: Callable[[float], None] = time.sleep) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        status, body = http("GET", f"{base}/v1/models", key=key, timeout=10)
        if status == 200 and any(m.get("id") == model_id for m in (body or {}).get("data", [])):
            return time.monotonic() - started
        sleep(5)
    raise TimeoutError(f"the endpoint did not list {model_id} within {timeout_s:.0f} s")


def check_routes(report: Report, base: str, model_id: str, key: str | None, *, prefix: str = "") -> None:
    status, body = http("GET", f"{base}/v1/models", key=key)
    ids = [m.get("id") for m in (body or {}).get("data", [])] if status == 200 and isinstance(body, dict) else []
    report.add(f"{prefix}GET /v1/models", model_id in ids, f"{status}: {ids}")
    status, body = http(
        "POST", f"{base}/v1/completions", {"model": model_id, "prompt": "The capital of France is", "max_tokens": 16, "temperature": 0}, key=key
    )
    text = body["choices"][0]["text"] if status == 200 and isinstance(body, dict) else ""
    report.add(f"{prefix}POST /v1/completions", status == 200 and bool(text), f"{status}: {text[:60]!r}" if status == 200 else f"{status}: {str(body)[:200]}")
    chat = {"model": model_id, "messages": [{"role": "user", "content": "Say hello in five words."}], "max_tokens": 16, "temperature": 0}
    status, body = http("POST", f"{base}/v1/chat/completions", chat, key=key)
    content = body["choices"][0]["message"]["content"] if status == 200 and isinstance(body, dict) else ""
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


def pd_tokens(base: str, model_id: str, prompt: list[int], key: str | None) -> list[int]:
    request = {"model": model_id, "prompt": prompt, "max_tokens": PARITY_MAX_TOKENS, "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    status, body = http("POST", f"{base}/v1/completions", request, key=key)
    if status != 200 or not isinstance(body, dict):
        raise RuntimeError(f"completion of a {len(prompt)}-token prompt: {status} {str(body)[:200]}")
    tokens: list[int] = body["choices"][0].get("token_ids") or []
    return tokens


def parity_prompts(lengths: list[int], vocab: int, seed: int = 1) -> list[list[int]]:
    """Random token ids, away from the top of the vocabulary (special tokens live there)."""
    generator = random.Random(seed)
    high = max(1000, vocab - 1000)
    return [[generator.randrange(100, high) for _ in range(n)] for n in lengths]


def nixl_lines(log_dir: Path) -> tuple[str, list[str]]:
    """Every engine's NIXL backend line, read as make verify reads a worker's (k8s_constructs/ray_facts.py), and
    the decode engine's transfer plan lines."""
    pattern = re.compile(NIXL_LOG_PATTERN)
    found, plans = [], []
    for path in sorted(log_dir.glob("*")):
        if not path.is_file() or path.suffix not in (".out", ".err", ".log"):
            continue
        for line in path.read_text(errors="replace").splitlines():
            if pattern.search(line):
                found.append(line)
            if TRANSFER_PLAN_MARKER in line:
                plans.append(line.strip()[-200:])
    return backend_of("\n".join(found)), sorted(set(plans))


def run_bench(plan: dict[str, Any], base: str, tokenizer: str, rates: list[float] | None, key: str | None) -> list[dict[str, Any]]:
    """The plan's benchmark runs (the Job's `vllm bench serve` commands): long and short streams at once per rate."""
    marker = plan.get("bench_result_marker", "BENCH_RESULT ")
    results = []
    for entry in plan["bench"]:
        if rates is not None and entry["rate"] not in rates:
            continue
        # As the Job runs them (bench_job.bench_script): `wait PID` returns each run's own status.
        script = f"( {entry['long']} ) & long=$!; ( {entry['short']} ) & short=$!; wait $long; wait $short"
        script = script.replace("@BASE_URL@", base).replace("@TOKENIZER@", tokenizer)
        env = {**os.environ, **({"OPENAI_API_KEY": key} if key else {})}
        done = subprocess.run(["bash", "-c", f"set -e; {script}"], capture_output=True, text=True, env=env, check=False)
        lines = [json.loads(line.split(marker, 1)[1]) for line in done.stdout.splitlines() if marker in line]
        if done.returncode != 0 or len(lines) != 2:
            raise RuntimeError(f"vllm bench serve at {entry['rate']} req/s failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-300:]}")
        results += lines
    return results


# --- the run -----------------------------------------------------------------------------------------------------


def _check_versions(engine: Engine, expected: dict[str, str]) -> None:
    installed = engine.installed_versions()
    wrong = [
        f"{name} is not installed (the image has {version})"
        if installed.get(name) in (None, "not installed")
        else f"{name} {installed[name]} is installed, the image has {version}"
        for name, version in expected.items()
        if installed.get(name) != version
    ]
    if wrong:
        raise MissingPrerequisite("; ".join(wrong) + ": pip install -r requirements-gpu.txt, or run inside the Ray LLM image")


def _model_dir(args: argparse.Namespace, plan: dict[str, Any], report: Report) -> tuple[str, bool]:
    """The model to serve: a directory given (random weights unless it holds safetensors), else the deployed source."""
    if args.model_dir is None:
        if args.weights == "random":
            raise MissingPrerequisite("--weights random needs --model-dir (a directory with the model's config.json)")
        return plan["model"]["source"], False
    model_dir = Path(args.model_dir).resolve()
    if not (model_dir / "config.json").is_file():
        raise MissingPrerequisite(f"{model_dir} has no config.json")
    random_weights = args.weights == "random" or not any(model_dir.glob("*.safetensors"))
    if not (model_dir / "tokenizer.json").is_file() and not (model_dir / "tokenizer.model").is_file():
        if not args.generate_tokenizer:
            raise MissingPrerequisite(f"{model_dir} has no tokenizer: add the model's, or --generate-tokenizer for a stand-in of its vocabulary size")
        config = json.loads((model_dir / "config.json").read_text())
        write_tokenizer(model_dir, vocab_size(config))
        report.changes.append(
            Change("tokenizer", "the model's", "generated byte-level BPE of its vocabulary size", "the model's tokenizer is not on this host")
        )
    report.facts["config_sha256"] = hashlib.sha256((model_dir / "config.json").read_bytes()).hexdigest()
    return str(model_dir), random_weights


def run(args: argparse.Namespace, engine: Engine) -> Report:
    if not Path(args.plan).is_file():
        raise MissingPrerequisite(f"no plan at {args.plan}: `make local-check` writes it (python -m tools.local_check plan, with the project installed)")
    plan = json.loads(Path(args.plan).read_text())
    if engine.name == "vllm":
        _check_versions(engine, plan["versions"])
    report = Report()
    report.facts.update(
        {
            "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": " ".join(sys.argv),
            "engine": engine.name,
            "model": plan["model"],
            "target": plan["target"],
            "max_model_len": plan["max_model_len"],
        }
    )
    host = engine.host()
    report.facts["host"] = asdict(host)
    report.facts["versions"] = engine.installed_versions()
    report.add("host", True, f"{host.gpus} x {host.gpu_name}, {host.gpu_total_bytes / GIB:.1f} GiB; versions {report.facts['versions']}")
    model, random_weights = _model_dir(args, plan, report)
    target = Target(plan["target"]["gpu_model"], int(plan["target"]["gpu_total_bytes"]), bool(plan["model"]["hybrid_gdn"]))
    deployed = serve_config(plan["rayservice"])
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Saved after every step: a run cut short (a timeout, a killed host) still leaves what it found.
    report.path = out / RESULT_FILE
    shape = cluster_shape(plan["rayservice"])
    _, shared_gpu = gpu_assignment(shape, host.gpus)

    # The lone engine first, alone on the GPU: its profile is undisturbed, and its KV cache is what each engine gets
    # when the phases share a GPU.
    lengths = parity_lengths(plan["max_model_len"], PARITY_MAX_TOKENS, count=args.parity_prompts)
    vocab = vocab_size(json.loads((Path(model) / "config.json").read_text())) if Path(model, "config.json").is_file() else 32000
    prompts = parity_prompts(lengths, vocab)
    patched_once, _ = patch_serve_config(
        deployed, host=host, target=target, model_path=model, random_weights=random_weights, shared_gpu=False, kv_cache_bytes=None
    )
    args_of = {name: patched_once["applications"][0]["args"][f"{name}_config"] for name in ("prefill", "decode")}
    references: dict[str, tuple[list[list[int]], dict[str, float]]] = {}
    for phase in ("decode", "prefill"):
        kwargs = reference_engine_kwargs(args_of[phase])
        same = next((other for other in references if reference_engine_kwargs(args_of[other]) == kwargs), None)
        if same is not None:
            references[phase] = references[same]
            continue
        references[phase] = engine.reference(model, kwargs, prompts if phase == "decode" else None, out / f"reference-{phase}.log")
    for phase, (_, measured) in references.items():
        predicted = plan["predicted"].get(phase)
        report.facts.setdefault("measured", {})[phase] = measured
        if predicted:
            rows = compare_memory(predicted, measured)
            report.memory[phase] = rows
            report.add(f"memory {phase}", all(r.ok for r in rows), "; ".join(f"{r.figure} {r.measured_gib} (predicted {r.predicted_gib:.2f})" for r in rows))
    kv_bytes = int(min(references[p][1].get("kv_cache_gib", 0) for p in references) * GIB) or None

    # The PD application on the local cluster.
    patched, changes = patch_serve_config(
        deployed, host=host, target=target, model_path=model, random_weights=random_weights, shared_gpu=shared_gpu, kv_cache_bytes=kv_bytes
    )
    extra, resource_changes = accelerator_resources(deployed, host)
    env, env_changes = worker_env(plan["rayservice"], out / "hf-home")
    env.update(args.env or {})
    report.changes += changes + resource_changes + env_changes
    modes = ("pd", "collocated") if args.mode == "both" else (args.mode,)
    configs = {"pd": patched, "collocated": collocated_config(patched, shape)}
    if "collocated" in modes:
        report.changes.append(
            Change("application (collocated mode)", "PD: prefill + decode, NIXL", "ordinary replicas, no KV connector", "the comparison of issue 29")
        )
    key = args.api_key
    cluster = LocalCluster(plan, host, extra, env)
    base = f"http://127.0.0.1:{args.port}"
    try:
        import ray
        from ray import serve

        ray.init(address=cluster.address)
        serve.start(http_options={"host": "127.0.0.1", "port": args.port})
        for mode in modes:
            check_application(report, mode, configs[mode], plan, engine, cluster, host, base, key, prompts, references["decode"][0], args, model)
            if len(modes) > 1:
                serve.delete(configs[mode]["applications"][0]["name"])
        if len(modes) > 1:
            report.facts["comparison"] = compare_modes(report.bench)
    except (TimeoutError, RuntimeError) as error:
        report.add("run", False, str(error))
    finally:
        try:
            import ray
            from ray import serve

            serve.shutdown()
            ray.shutdown()
        finally:
            cluster.shutdown()
    return report


def check_application(
    report: Report,
    mode: str,
    config: dict[str, Any],
    plan: dict[str, Any],
    engine: Engine,
    cluster: LocalCluster,
    host: Host,
    base: str,
    key: str | None,
    prompts: list[list[int]],
    reference: list[list[int]],
    args: argparse.Namespace,
    model: str,
) -> None:
    """Deploy one application (PD, or the collocated replicas) and check it: routes, parity, NIXL (PD), the benchmark."""
    from ray import serve
    from ray._common.utils import import_attr
    from ray.serve._private.api import call_user_app_builder_with_args_if_necessary

    prefix = "" if mode == "pd" else f"{mode}: "
    application = config["applications"][0]
    import_path = engine.app_import_path(application["import_path"])
    if import_path != application["import_path"]:
        report.changes.append(Change(f"{prefix}import_path", application["import_path"], import_path, "the stand-in engine of the tests"))
    app = call_user_app_builder_with_args_if_necessary(import_attr(import_path), application["args"])
    started = time.monotonic()
    serve.run(app, name=application["name"], route_prefix=application.get("route_prefix", "/"), blocking=False)
    try:
        wait_ready(base, plan["model"]["id"], key, args.ready_timeout)
    except TimeoutError as error:
        report.add(f"{prefix}deploy", False, str(error))
        return
    report.facts.setdefault("ready_s", {})[mode] = round(time.monotonic() - started, 1)
    report.add(f"{prefix}deploy", True, f"{application['name']} answering {time.monotonic() - started:.0f} s after serve.run")
    check_routes(report, base, plan["model"]["id"], key, prefix=prefix)
    parity = [ParityRow(len(p), pd_tokens(base, plan["model"]["id"], p, key), ref) for p, ref in zip(prompts, reference, strict=True)]
    if mode == "pd":
        report.parity = parity
    report.add(
        f"{prefix}parity",
        all(r.equal for r in parity),
        ", ".join(f"{r.prompt_tokens} tokens: {'equal' if r.equal else f'differs at {r.first_difference}'}" for r in parity),
    )
    if mode == "pd":
        backend, plans = nixl_lines(cluster.log_dir())
        expected = "LIBFABRIC" if host.efa else "UCX"
        report.facts["nixl"] = {"backend": backend, "transfer_plans": plans}
        report.add("nixl", backend == expected and bool(plans), f"backend {backend} (expected {expected} here); {len(plans)} transfer plan line(s)")
    if args.bench_rates != []:
        bench = [{**run, "mode": mode} for run in run_bench(plan, base, model, args.bench_rates, key)]
        report.bench += bench
        report.add(
            f"{prefix}bench",
            True,
            "; ".join(f"{r['workload']}@{r['rate']}: TTFT p50 {_figure(r, 'ttft'):.0f} ms, ITL p50 {_figure(r, 'itl'):.1f} ms" for r in bench),
        )


def _figure(run: dict[str, Any], name: str, percentile: str = "p50") -> float:
    value = run.get(f"{percentile}_{name}_ms", run.get(f"median_{name}_ms") if percentile == "p50" else None)
    return float(value or 0.0)


# What issue 29's comparison reports per rate: the short stream's latencies (what PD is meant to keep flat while
# long prompts arrive), the long stream's time to first token, and the output throughput of both streams.
COMPARED = (("short", "itl", "p50"), ("short", "itl", "p99"), ("short", "ttft", "p50"), ("short", "ttft", "p99"), ("long", "ttft", "p50"))


def compare_modes(bench: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per rate: each compared figure for PD and collocated, and the output tokens/s of both streams."""
    rows = []
    for rate in sorted({float(r["rate"]) for r in bench}):
        row: dict[str, Any] = {"rate": rate}
        for mode in ("pd", "collocated"):
            runs = {r["workload"]: r for r in bench if r.get("mode") == mode and float(r["rate"]) == rate}
            for workload, name, percentile in COMPARED:
                if workload in runs:
                    row[f"{mode} {workload} {name} {percentile} ms"] = _figure(runs[workload], name, percentile)
            row[f"{mode} output tok/s"] = sum(float(r.get("output_throughput", 0.0)) for r in runs.values())
        rows.append(row)
    return rows


def write_outputs(report: Report, out: Path) -> tuple[Path, Path | None]:
    path = out / RESULT_FILE
    report.save(path)
    if not report.bench:
        return path, None
    try:
        title = f"local check: {report.facts['model']['source']} on {report.facts['host']['gpu_name']}"
        if report.facts.get("comparison"):
            return path, draw_comparison(report.facts["comparison"], out / "local-check.png", title=title)
        from tools.bench_chart import draw

        return path, draw(report.bench, [], out / "local-check.png", title=title)
    except ImportError:  # matplotlib is not in every image: the JSON holds every figure
        return path, None


def draw_comparison(rows: list[dict[str, Any]], path: Path, *, title: str) -> Path:
    """PD against collocated per request rate: the short stream's ITL and TTFT (p50 solid, p99 dashed), the long
    stream's TTFT, and the output tokens/s."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 4, figsize=(20, 4.6), constrained_layout=True)
    rates = [row["rate"] for row in rows]
    panels = (("short ITL (ms)", "short itl"), ("short TTFT (ms)", "short ttft"), ("long TTFT (ms)", "long ttft"))
    for axis, (label, key) in zip(axes[:3], panels, strict=True):
        for mode, color in (("pd", "tab:blue"), ("collocated", "tab:orange")):
            for percentile, style in (("p50", "-"), ("p99", "--")):
                values = [row.get(f"{mode} {key} {percentile} ms") for row in rows]
                points = [(x, y) for x, y in zip(rates, values, strict=True) if y is not None]
                if points:
                    axis.plot(*zip(*points, strict=True), style, color=color, marker="o", label=f"{mode} {percentile}")
        axis.set(xlabel="request rate of each stream (req/s)", ylabel=label)
        axis.legend(fontsize=8)
    for mode, color in (("pd", "tab:blue"), ("collocated", "tab:orange")):
        axes[3].plot(rates, [row.get(f"{mode} output tok/s", 0) for row in rows], "-", color=color, marker="o", label=mode)
    axes[3].set(xlabel="request rate of each stream (req/s)", ylabel="output tokens/s")
    axes[3].legend(fontsize=8)
    figure.suptitle(title)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.local_check run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plan", default="local-check/plan.json")
    parser.add_argument("--output-dir", default="local-check")
    parser.add_argument("--model-dir", help="a directory with the model's config.json (and tokenizer; weights optional)")
    parser.add_argument("--weights", choices=("auto", "random"), default="auto", help="random: load_format dummy even where weights are present")
    parser.add_argument("--generate-tokenizer", action="store_true", help="write a stand-in tokenizer of the model's vocabulary size when none is there")
    parser.add_argument("--parity-prompts", type=int, default=4)
    parser.add_argument("--bench-rates", type=lambda text: [float(x) for x in text.split(",") if x], default=None, help="comma-separated; empty: no benchmark")
    parser.add_argument("--api-key", default=os.environ.get("LOCAL_CHECK_API_KEY"), help="the key the ingress enforces, if the config enforces keys")
    parser.add_argument(
        "--env", type=lambda text: dict(item.split("=", 1) for item in text.split(",") if item), default=None, help="extra NAME=VALUE for the engines"
    )
    parser.add_argument("--port", type=int, default=SERVE_PORT)
    parser.add_argument(
        "--mode", choices=("pd", "collocated", "both"), default="pd", help="both: PD, then the same GPUs as ordinary replicas, and the comparison"
    )
    parser.add_argument("--ready-timeout", type=float, default=READY_TIMEOUT_S)
    parser.add_argument("--engine", default="vllm", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        engine = load_engine(args.engine)
        report = run(args, engine)
    except MissingPrerequisite as missing:
        print(f"error: {missing}", file=sys.stderr)
        return EXIT_MISSING
    path, chart = write_outputs(report, Path(args.output_dir))
    for change in report.changes:
        print(f"changed  {change.what}: {change.deployed} -> {change.here} ({change.why})")
    for step in report.steps:
        print(f"{'ok  ' if step.ok else 'FAIL'}     {step.name}: {step.detail}")
    print(f"result   {path}" + (f", {chart}" if chart else ""))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
