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
  conformance what applications send (tools, reasoning, strict JSON, n, shared prefixes, bad requests), through PD
              and then through the lone engine in its place, a row each (tools/local_check/conformance.py)

One JSON file and one PNG per run (--output-dir); exit 0 only when every step held.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import secrets
import sys
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from k8s_constructs.ray_facts import SERVE_PORT
from tools.local_check.application import check_application, check_conformance
from tools.local_check.client import parity_prompts
from tools.local_check.cluster import CLUSTER_CHANGES, RAY_CHANGES, LocalCluster, worker_env
from tools.local_check.compare import RESULT_FILE, compare_modes, write_outputs
from tools.local_check.controls import LoneEngine, lone_controls
from tools.local_check.engines import PARITY_MAX_TOKENS, Engine, MissingPrerequisite, load_engine
from tools.local_check.model import model_dir
from tools.local_check.results import (
    Report,
    compare_memory,
    describe_memory,
    parity_lengths,
)
from tools.local_check.shape import (
    API_KEYS_FILE,
    GIB,
    Change,
    Target,
    accelerator_resources,
    batch_boundary,
    cluster_shape,
    collocated_config,
    gpu_assignment,
    lone_config,
    patch_api_keys,
    patch_serve_config,
    reference_engine_kwargs,
    serve_config,
    shared_budget_error,
)
from tools.local_check.tokenizer import vocab_size

# The ingress modules (the PD guard, the API keys) as the pods get them.
AUTH_MODULE_DIR = Path(__file__).resolve().parents[2] / "k8s_constructs" / "data"
READY_TIMEOUT_S = 1200
EXIT_MISSING = 2  # no GPU, other versions: the check could not run
T = TypeVar("T")
MATCHED_PROMPTS = 3  # prompts on the matched path, where PD must equal the lone engine


# --- the run -----------------------------------------------------------------------------------------------------


def _check_versions(engine: Engine, expected: dict[str, str]) -> None:
    installed = engine.installed_versions()
    wrong = [
        (
            f"{name} is not installed (the image has {version})"
            if installed.get(name) in (None, "not installed")
            else f"{name} {installed[name]} is installed, the image has {version}"
        )
        for name, version in expected.items()
        if installed.get(name) != version
    ]
    if wrong:
        raise MissingPrerequisite(
            "; ".join(wrong) + ": pip install -r requirements-gpu.txt, or run inside the Ray LLM image"
        )


def run(args: argparse.Namespace, engine: Engine) -> Report:
    if not Path(args.plan).is_file():
        raise MissingPrerequisite(
            f"no plan at {args.plan}: `make local-check` writes it (python -m tools.local_check plan, with the project"
            " installed)"
        )
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
    report.add(
        "host",
        True,
        f"{host.gpus} x {host.gpu_name}, {host.gpu_total_bytes / GIB:.1f} GiB; versions {report.facts['versions']}",
    )
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Saved after every step: a run cut short (a timeout, a killed host) still leaves what it found.
    report.path = out / RESULT_FILE
    model, weights = model_dir(args, plan, report, engine)
    target = Target(
        plan["target"]["gpu_model"], int(plan["target"]["gpu_total_bytes"]), bool(plan["model"]["hybrid_gdn"])
    )
    deployed = serve_config(plan["rayservice"])
    shape = cluster_shape(plan["rayservice"])
    _, shared_gpu = gpu_assignment(shape, host.gpus)

    # The lone engine first, alone on the GPU: its profile is undisturbed, and its KV cache is what each engine gets
    # when the phases share a GPU.
    # The spread of lengths, and the matched prompts: one past the lone engine's batch, so that it computes the last
    # prompt token alone as the decode engine does (MATCHED_PROMPTS of them, different tokens).
    matched_length = batch_boundary(deployed, target)
    lengths = args.parity_lengths or parity_lengths(
        plan["max_model_len"], PARITY_MAX_TOKENS, count=args.parity_prompts, alone=matched_length
    )
    if matched_length + PARITY_MAX_TOKENS <= plan["max_model_len"]:
        lengths = lengths + [matched_length] * max(0, MATCHED_PROMPTS - lengths.count(matched_length))
    vocab = (
        vocab_size(json.loads((Path(model) / "config.json").read_text()))
        if Path(model, "config.json").is_file()
        else 32000
    )
    prompts = parity_prompts(lengths, vocab)
    # The serve config as this host runs it; whether the phases share a GPU (and each engine's KV cache then) is
    # known once the lone engine has measured.
    patch = functools.partial(patch_serve_config, deployed, host=host, target=target, model_path=model, weights=weights)
    patched_once, _ = patch(shared_gpu=False, kv_cache_bytes=None)
    too_much = shared_budget_error(patched_once, shape, host.gpus)
    if too_much:
        raise MissingPrerequisite(too_much)
    args_of = {name: patched_once["applications"][0]["args"][f"{name}_config"] for name in ("prefill", "decode")}
    # The pods' environment, for the lone engine as for the raylets (VLLM_SSM_CONV_STATE_LAYOUT, the compile caches).
    env, env_changes = worker_env(plan["rayservice"], out / "hf-home")
    env.update(args.env or {})
    references: dict[str, tuple[dict[str, Any], dict[str, float]]] = {}
    for phase in ("decode", "prefill"):
        kwargs = reference_engine_kwargs(args_of[phase])
        same = next((other for other in references if reference_engine_kwargs(args_of[other]) == kwargs), None)
        if same is not None:
            references[phase] = references[same]
            continue
        try:
            references[phase] = engine.reference(
                model, kwargs, prompts if phase == "decode" else None, out / f"reference-{phase}.log", env
            )
        except Exception as error:
            report.add(f"lone engine ({phase})", False, f"{type(error).__name__}: {error}")
            return report
    for phase, (_, measured) in references.items():
        predicted = plan["predicted"].get(phase)
        report.facts.setdefault("measured", {})[phase] = measured
        shared = phase == "prefill" and references["prefill"] is references["decode"]
        if predicted and not shared:
            name = "lone engine" if references["prefill"] is references["decode"] else f"lone engine ({phase})"
            rows = compare_memory(predicted, measured)
            report.memory[name] = rows
            report.add(f"memory {name}", all(r.ok for r in rows), describe_memory(rows))
    kv_bytes = int(min(references[p][1].get("kv_cache_gib", 0) for p in references) * GIB) or None
    noise = lone_controls(report, references["decode"][0], prompts, matched_length)
    lone = LoneEngine(references["decode"][0], noise, matched_length, references["decode"][1])

    # The PD application on the local cluster.
    patched, changes = patch(shared_gpu=shared_gpu, kv_cache_bytes=kv_bytes)
    patched, key_changes = patch_api_keys(patched, str(out / "api-keys"))
    key = args.api_key
    # The ingress modules, as the pods get them (a ConfigMap on their PYTHONPATH), for the driver and the raylets.
    sys.path.insert(0, str(AUTH_MODULE_DIR))
    env["PYTHONPATH"] = f"{AUTH_MODULE_DIR}:{os.environ.get('PYTHONPATH', '')}"
    if key_changes:
        key = key or f"sk-local-{secrets.token_urlsafe(24)}"
        (out / "api-keys").mkdir(exist_ok=True)
        (out / "api-keys" / API_KEYS_FILE).write_text(json.dumps({"local-check": key}))
        changes += key_changes
    extra, resource_changes = accelerator_resources(deployed, host)
    report.changes += (
        changes + resource_changes + env_changes + (CLUSTER_CHANGES if args.nixl_exporter else RAY_CHANGES)
    )
    modes = ("pd", "collocated") if args.mode == "both" else (args.mode,)
    configs = {"pd": patched, "collocated": collocated_config(patched, shape)}
    if "collocated" in modes:
        report.changes.append(
            Change(
                "application (collocated mode)",
                "PD: prefill + decode, NIXL",
                "ordinary replicas, no KV connector",
                "the comparison of issue 29",
            )
        )
    cluster = LocalCluster(plan, host, extra, env, nixl_exporter=args.nixl_exporter)
    report.facts["ray_logs"] = str(cluster.log_dir())
    base = f"http://127.0.0.1:{args.port}"
    try:
        import ray
        from ray import serve

        ray.init(address=cluster.address)
        # One proxy, on the head: with a proxy on every node (Serve's default) all three bind the port on this host and
        # the kernel spreads requests among them, so a request could reach a proxy whose routes were not updated yet
        # (a test saw 404 "Path '/v1/completions' not found" right after /v1/models answered). On the cluster each pod
        # has an address of its own.
        serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": args.port})
        for mode in modes:
            check_application(
                report,
                mode,
                configs[mode],
                plan,
                engine,
                cluster,
                base,
                key,
                prompts,
                lone,
                args,
                model,
            )
            if len(modes) > 1:
                serve.delete(configs[mode]["applications"][0]["name"])
        if args.conformance and modes == ("pd",) and any(s.name == "deploy" and s.ok for s in report.steps):
            check_conformance(
                report,
                patched,
                lone_config(patched, shape),
                plan,
                engine,
                cluster,
                base,
                key,
                args.ready_timeout,
                vocab,
            )
        if len(modes) > 1:
            report.facts["comparison"] = compare_modes(report.bench)
    except Exception as error:
        report.add("run", False, f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
    finally:
        try:
            import ray
            from ray import serve

            serve.shutdown()
            ray.shutdown()
        finally:
            cluster.shutdown()
    return report


def _comma_list(kind: Callable[[str], T]) -> Callable[[str], list[T]]:
    """An option's comma-separated values (empty: none)."""
    return lambda text: [kind(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.local_check run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--plan", default="local-check/plan.json")
    parser.add_argument("--output-dir", default="local-check")
    parser.add_argument(
        "--model-dir", help="a directory with the model's config.json (and tokenizer; weights optional)"
    )
    parser.add_argument(
        "--weights",
        choices=("auto", "random", "dummy"),
        default="auto",
        help="auto: the directory's weights, else a random checkpoint; random: a random checkpoint of the"
        " architecture (a seed per tensor, a trained model's scale) even where weights are present; dummy: vLLM's"
        " load_format dummy (degenerate: parity cannot see the KV cache, and the context control says so)",
    )
    parser.add_argument(
        "--generate-tokenizer",
        action="store_true",
        help="write a stand-in tokenizer of the model's vocabulary size when none is there",
    )
    parser.add_argument("--parity-prompts", type=int, default=4)
    parser.add_argument(
        "--parity-lengths",
        type=_comma_list(int),
        default=None,
        help="comma-separated prompt lengths instead of --parity-prompts' spread (e.g. around the hybrid block size)",
    )
    parser.add_argument(
        "--checkpoint-dir",
        help="where --weights random writes the random checkpoint (default: OUTPUT_DIR/random-checkpoint; reused)",
    )
    parser.add_argument(
        "--bench-rates",
        type=_comma_list(float),
        default=None,
        help="comma-separated; empty: no benchmark",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("LOCAL_CHECK_API_KEY"),
        help="the key the ingress enforces, if the config enforces keys",
    )
    parser.add_argument(
        "--env",
        type=lambda text: dict(item.split("=", 1) for item in text.split(",") if item),
        default=None,
        help="extra NAME=VALUE for the engines",
    )
    parser.add_argument("--port", type=int, default=SERVE_PORT)
    parser.add_argument(
        "--mode",
        choices=("pd", "collocated", "both"),
        default="pd",
        help="both: PD, then the same GPUs as ordinary replicas, and the comparison",
    )
    parser.add_argument("--ready-timeout", type=float, default=READY_TIMEOUT_S)
    parser.add_argument(
        "--transfer-timeout",
        type=float,
        default=15.0,
        help="seconds a PD request's KV transfer may take to show in vLLM's statistics before it counts as none",
    )
    parser.add_argument(
        "--no-nixl-exporter",
        dest="nixl_exporter",
        action="store_false",
        help="leave NIXL's Prometheus exporter off: the transfer step then counts transfers but not their bytes",
    )
    parser.add_argument(
        "--no-conformance",
        dest="conformance",
        action="store_false",
        help="leave out the conformance step (the requests applications send, through PD and the lone engine)",
    )
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
