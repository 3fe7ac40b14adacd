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
import json
import os
import secrets
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from k8s_constructs.ray_facts import SERVE_PORT
from tools.local_check.client import check_routes, nixl_lines, parity_prompts, pd_tokens, run_bench, wait_ready
from tools.local_check.compare import RESULT_FILE, compare_modes, figure, write_outputs
from tools.local_check.engines import PARITY_MAX_TOKENS, Engine, MissingPrerequisite, load_engine
from tools.local_check.shape import (
    API_KEYS_FILE,
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
    parity_lengths,
    patch_api_keys,
    patch_serve_config,
    reference_engine_kwargs,
    serve_config,
    shared_budget_error,
)
from tools.local_check.tokenizer import vocab_size, write_tokenizer

# vLLM 0.26's Ray executor takes its torch.distributed store's port from a 32-port window at
# VLLM_DP_MASTER_PORT + 100 (v1/executor/ray_executor_v2.py _select_tcpstore_port; config/parallel.py reads the
# variable without data parallelism, default 0: the "port: 100" of the EADDRINUSE seen on the H200). Each node's
# engines get a window of their own.
# The API-key ingress module (SERVE_API_KEYS=on) as the pods get it.
AUTH_MODULE_DIR = Path(__file__).resolve().parents[2] / "k8s_constructs" / "data"
DP_MASTER_PORT_BASE = 31000
DP_MASTER_PORT_STEP = 1000
READY_TIMEOUT_S = 1200
EXIT_MISSING = 2  # no GPU, other versions: the check could not run

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
            visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v]
            os.environ.update(env)
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            self.cluster = Cluster(
                initialize_head=True,
                head_node_args={
                    "num_cpus": shape.head.num_cpus,
                    "num_gpus": shape.head.num_gpus,
                    "labels": shape.head.labels,
                    "include_dashboard": False,
                },
            )
            for number, (node, gpus) in enumerate(zip(shape.workers, self.assignment, strict=True)):
                # The host's GPU ids through the user's CUDA_VISIBLE_DEVICES, when one was given.
                os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(visible[g] if visible else str(g) for g in gpus)
                # Each pod has its own IP; on one host two engines starting at once took the same port.
                os.environ["VLLM_DP_MASTER_PORT"] = str(DP_MASTER_PORT_BASE + DP_MASTER_PORT_STEP * number)
                self.cluster.add_node(
                    num_cpus=node.num_cpus,
                    num_gpus=node.num_gpus,
                    resources={**node.resources, **extra_resources},
                    labels=node.labels,
                )
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
        if str(plan["model"]["source"]).startswith("s3://"):
            raise MissingPrerequisite(f"MODEL_SOURCE {plan['model']['source']} is an S3 prefix: copy it to a directory and give --model-dir")
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
            Change(
                "tokenizer",
                "the model's",
                "generated byte-level BPE of its vocabulary size",
                "the model's tokenizer is not on this host",
            )
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
    report.add(
        "host",
        True,
        f"{host.gpus} x {host.gpu_name}, {host.gpu_total_bytes / GIB:.1f} GiB; versions {report.facts['versions']}",
    )
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
        deployed,
        host=host,
        target=target,
        model_path=model,
        random_weights=random_weights,
        shared_gpu=False,
        kv_cache_bytes=None,
    )
    too_much = shared_budget_error(patched_once, shape, host.gpus)
    if too_much:
        raise MissingPrerequisite(too_much)
    args_of = {name: patched_once["applications"][0]["args"][f"{name}_config"] for name in ("prefill", "decode")}
    # The pods' environment, for the lone engine as for the raylets (VLLM_SSM_CONV_STATE_LAYOUT, the compile caches).
    env, env_changes = worker_env(plan["rayservice"], out / "hf-home")
    env.update(args.env or {})
    references: dict[str, tuple[list[list[int]], dict[str, float]]] = {}
    for phase in ("decode", "prefill"):
        kwargs = reference_engine_kwargs(args_of[phase])
        same = next((other for other in references if reference_engine_kwargs(args_of[other]) == kwargs), None)
        if same is not None:
            references[phase] = references[same]
            continue
        try:
            references[phase] = engine.reference(model, kwargs, prompts if phase == "decode" else None, out / f"reference-{phase}.log", env)
        except Exception as error:
            report.add(f"lone engine ({phase})", False, f"{type(error).__name__}: {error}")
            return report
    for phase, (_, measured) in references.items():
        predicted = plan["predicted"].get(phase)
        report.facts.setdefault("measured", {})[phase] = measured
        if predicted:
            rows = compare_memory(predicted, measured)
            report.memory[phase] = rows
            report.add(
                f"memory {phase}",
                all(r.ok for r in rows),
                "; ".join(f"{r.figure} {r.measured_gib} (predicted {r.predicted_gib:.2f})" for r in rows),
            )
    kv_bytes = int(min(references[p][1].get("kv_cache_gib", 0) for p in references) * GIB) or None

    # The PD application on the local cluster.
    patched, changes = patch_serve_config(
        deployed,
        host=host,
        target=target,
        model_path=model,
        random_weights=random_weights,
        shared_gpu=shared_gpu,
        kv_cache_bytes=kv_bytes,
    )
    patched, key_changes = patch_api_keys(patched, str(out / "api-keys"))
    key = args.api_key
    if key_changes:
        # The ingress module, as the pods get it (a ConfigMap on their PYTHONPATH), for the driver and the raylets.
        sys.path.insert(0, str(AUTH_MODULE_DIR))
        env["PYTHONPATH"] = f"{AUTH_MODULE_DIR}:{os.environ.get('PYTHONPATH', '')}"
        key = key or f"sk-local-{secrets.token_urlsafe(24)}"
        (out / "api-keys").mkdir(exist_ok=True)
        (out / "api-keys" / API_KEYS_FILE).write_text(json.dumps({"local-check": key}))
        changes += key_changes
    extra, resource_changes = accelerator_resources(deployed, host)
    report.changes += changes + resource_changes + env_changes
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
    cluster = LocalCluster(plan, host, extra, env)
    base = f"http://127.0.0.1:{args.port}"
    try:
        import ray
        from ray import serve

        ray.init(address=cluster.address)
        serve.start(http_options={"host": "127.0.0.1", "port": args.port})
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
                references["decode"][0],
                args,
                model,
            )
            if len(modes) > 1:
                serve.delete(configs[mode]["applications"][0]["name"])
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


def _configured_backend(config: dict[str, Any]) -> str:
    """The NIXL backend the (patched) serve config asks for: LIBFABRIC with EFA, UCX without."""
    decode = config["applications"][0]["args"]["decode_config"]["engine_kwargs"]
    backends: list[str] = decode["kv_transfer_config"]["kv_connector_extra_config"]["backends"]
    return "+".join(sorted(backends))


def _engine_count(config: dict[str, Any]) -> int:
    """The PD app's engines: each phase's replicas (the minimum, with autoscaling)."""
    args = config["applications"][0]["args"]
    total = 0
    for phase in ("prefill_config", "decode_config"):
        deployment = args[phase].get("deployment_config", {})
        total += int(deployment.get("num_replicas", deployment.get("autoscaling_config", {}).get("min_replicas", 1)))
    return total


def _deploy_failed(name: str) -> str:
    """Serve's message when the application failed to deploy ("" while it deploys or runs)."""
    from ray import serve

    status = serve.status().applications.get(name)
    return str(status.message or status.status) if status is not None and str(status.status).endswith("DEPLOY_FAILED") else ""


def check_application(
    report: Report,
    mode: str,
    config: dict[str, Any],
    plan: dict[str, Any],
    engine: Engine,
    cluster: LocalCluster,
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
    # serve.run waits for RUNNING without a limit (Ray 2.58: timeout_s=-1); deploy, then wait with ours.
    serve._run(app, _blocking=False, name=application["name"], route_prefix=application.get("route_prefix", "/"))
    try:
        wait_ready(base, plan["model"]["id"], key, args.ready_timeout, failed=lambda: _deploy_failed(application["name"]))
    except (TimeoutError, RuntimeError) as error:
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
        backends, plans = nixl_lines(cluster.log_dir())
        expected = _configured_backend(config)
        engines = _engine_count(config)
        report.facts["nixl"] = {"backends": backends, "transfer_plans": plans}
        wrong = {process: b for process, b in backends.items() if b != expected}
        report.add(
            "nixl",
            len(backends) >= engines and not wrong and bool(plans),
            f"{len(backends)} engine(s) of {engines} instantiated {expected}"
            + (f"; others: {wrong}" if wrong else "")
            + f"; {len(plans)} transfer plan line(s)",
        )
    if args.bench_rates != []:
        bench = [{**run, "mode": mode} for run in run_bench(plan, base, model, args.bench_rates, key)]
        report.bench += bench
        report.add(
            f"{prefix}bench",
            True,
            "; ".join(f"{r['workload']}@{r['rate']}: TTFT p50 {figure(r, 'ttft'):.0f} ms, ITL p50 {figure(r, 'itl'):.1f} ms" for r in bench),
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.local_check run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--plan", default="local-check/plan.json")
    parser.add_argument("--output-dir", default="local-check")
    parser.add_argument("--model-dir", help="a directory with the model's config.json (and tokenizer; weights optional)")
    parser.add_argument(
        "--weights",
        choices=("auto", "random"),
        default="auto",
        help="random: load_format dummy even where weights are present",
    )
    parser.add_argument(
        "--generate-tokenizer",
        action="store_true",
        help="write a stand-in tokenizer of the model's vocabulary size when none is there",
    )
    parser.add_argument("--parity-prompts", type=int, default=4)
    parser.add_argument(
        "--bench-rates",
        type=lambda text: [float(x) for x in text.split(",") if x],
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
