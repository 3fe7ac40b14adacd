"""`make bench-serving`: run the in-cluster benchmark Job (k8s_constructs/bench_job.py) against the Serve
endpoint, sample the Ray worker pods per phase and the GPU nodes while it runs, save the results as JSON and a
PNG chart beside it (tools/bench_chart.py) and print a table; with COMPARE=previous.json, the change of each
figure against an earlier result.

Reported per run (workload class and request rate): TTFT p50/p99, TPOT p50/p99, ITL p50/p99 (ms), output tokens/s
and requests/s, as `vllm bench serve` measured them. TPOT is the decode rate: Ray Serve LLM sends a stream's tokens in
batches every 50 ms (ray/llm/_internal/serve/constants.py MODEL_RESPONSE_BATCH_TIMEOUT_MS), so where decode is faster
than that, ITL measures the batches (p50 near 0, p99 near 50 ms), not the tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import cdk8s

from k8s_constructs.bench_job import RESULT_MARKER, BenchJobChart, BenchJobProps
from k8s_constructs.ray_facts import GROUP_LABEL, NODE_TYPE_LABEL, SERVE_PORT, selector
from preflight.cluster_access import Kubectl
from settings import Settings
from settings.model_source import COMPLETION_OBJECT, MIRRORED_FROM
from settings.scheduling import GPU_NODE_LABELS
from tools.bench_chart import draw
from tools.endpoint import base_url as endpoint_url
from tools.endpoint import load_balancer_host
from tools.entry import on_cluster, one_line_errors, project_settings

SAMPLE_SECONDS = 15

# (label, key in vLLM's saved result, higher is better)
FIGURES: tuple[tuple[str, str, bool], ...] = (
    ("TTFT p50 ms", "p50_ttft_ms", False),
    ("TTFT p99 ms", "p99_ttft_ms", False),
    ("TPOT p50 ms", "p50_tpot_ms", False),
    ("TPOT p99 ms", "p99_tpot_ms", False),
    ("ITL p50 ms", "p50_itl_ms", False),
    ("ITL p99 ms", "p99_itl_ms", False),
    ("output tok/s", "output_throughput", True),
    ("req/s", "request_throughput", True),
)


def bench_base_url(settings: Settings, load_balancer: str = "") -> tuple[str, str]:
    """(the URL the benchmark Job calls, why not the load balancer's: "" when it is). An internal endpoint is
    benchmarked through its load balancer, the path applications take (the Job's pod is in the VPC, which the
    default SERVE_ALLOWED_CIDRS admits); over HTTPS only by SERVE_HOSTNAME, the name its certificate covers (the
    load balancer's own DNS name fails verification). An internet-facing one admits the allow-list only, which
    holds no address of the cluster's NAT: the Job calls the Serve service."""
    in_cluster = f"http://{settings.serve_service_name}.{settings.namespace}.svc.cluster.local:{SERVE_PORT}"
    endpoint = settings.serve_endpoint
    if not endpoint.exposed:
        return in_cluster, ""
    if endpoint.exposure != "internal":
        return (
            in_cluster,
            "an internet-facing load balancer admits SERVE_ALLOWED_CIDRS only, not the cluster's own traffic",
        )
    if endpoint.https and not endpoint.hostname:
        return (
            in_cluster,
            "its certificate does not cover the load balancer's DNS name: set SERVE_HOSTNAME to benchmark through it",
        )
    if not endpoint.hostname and not load_balancer:
        return in_cluster, "the Ingress has no load balancer address yet"
    return endpoint_url(settings, load_balancer), ""


def bench_props(settings: Settings, load_balancer: str = "") -> BenchJobProps:
    return BenchJobProps(
        name=f"{settings.ray_service_name}-bench",
        namespace=settings.namespace,
        image=settings.dlc_image,
        base_url=bench_base_url(settings, load_balancer)[0],
        model_id=settings.model_id,
        tokenizer=bench_tokenizer(settings),
        api_key_secret=f"{settings.ray_service_name}-bench-api-key" if settings.serve_endpoint.api_keys else "",
    )


def bench_tokenizer(settings: Settings) -> str:
    """The Hub repository whose tokenizer counts the benchmark's tokens: MODEL_SOURCE, or for an S3 copy the
    repository `make mirror-model` recorded on its `hash` (BENCH_TOKENIZER overrides either)."""
    if os.environ.get("BENCH_TOKENIZER"):
        return os.environ["BENCH_TOKENIZER"]
    source = settings.model_s3
    if source is None:
        return settings.model_source
    import boto3

    head = (
        boto3.session.Session()
        .client("s3", region_name=settings.region)
        .head_object(Bucket=source.bucket, Key=f"{source.key_prefix}{COMPLETION_OBJECT}")
    )
    repo = str(head.get("Metadata", {}).get(MIRRORED_FROM, ""))
    if not repo:
        raise RuntimeError(
            f"{source.uri} names no Hub repository (not made by `make mirror-model`): set BENCH_TOKENIZER=ORG/NAME"
        )
    return repo


def parse_results(log: str) -> list[dict[str, Any]]:
    """The runs' results from the Job's log, in the order they finished."""
    runs = [json.loads(line.split(RESULT_MARKER, 1)[1]) for line in log.splitlines() if RESULT_MARKER in line]
    return sorted(runs, key=lambda r: (float(r["rate"]), str(r["workload"])))


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"workload": r["workload"], "rate": float(r["rate"]), **{key: r.get(key) for _, key, _ in FIGURES}}
        for r in runs
    ]


def table(rows: list[dict[str, Any]], previous: list[dict[str, Any]] | None = None) -> str:
    """One line per run; with a previous result, each figure followed by its change in percent."""
    before = {(p["workload"], float(p["rate"])): p for p in previous or []}
    header = f"{'workload':<8} {'rate':>5}  " + "  ".join(
        f"{label:>{20 if previous else 12}}" for label, _, _ in FIGURES
    )
    lines = [header]
    for row in rows:
        cells = []
        old = before.get((row["workload"], row["rate"]))
        for _, key, higher_is_better in FIGURES:
            value = row.get(key)
            cell = "-" if value is None else f"{value:.1f}"
            if previous is not None:
                was = old.get(key) if old else None
                if value is not None and was:
                    change = (value - was) / was * 100
                    better = (change > 0) == higher_is_better or change == 0
                    cell += f" ({change:+.0f}%{'' if better else ' worse'})"
                cell = f"{cell:>20}"
            else:
                cell = f"{cell:>12}"
            cells.append(cell)
        lines.append(f"{row['workload']:<8} {row['rate']:>5}  " + "  ".join(cells))
    return "\n".join(lines)


def sample(kubectl: Kubectl, namespace: str) -> dict[str, Any]:
    """Running Ray worker pods per phase and Ready GPU nodes, now."""
    pods = kubectl(["get", "pods", "-n", namespace, "-l", selector(NODE_TYPE_LABEL, "worker"), "-o", "json"])
    nodes = kubectl(["get", "nodes", "-l", selector("role", GPU_NODE_LABELS["role"]), "-o", "json"])
    point: dict[str, Any] = {"t": round(time.time(), 1), "prefill": 0, "decode": 0, "gpu_nodes": 0}
    try:
        for pod in json.loads(pods.stdout or "{}").get("items", []):
            group = pod["metadata"].get("labels", {}).get(GROUP_LABEL)
            if group in ("prefill", "decode") and pod.get("status", {}).get("phase") == "Running":
                point[group] += 1
        for node in json.loads(nodes.stdout or "{}").get("items", []):
            if any(
                c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", [])
            ):
                point["gpu_nodes"] += 1
    except (ValueError, KeyError):
        pass  # a sample that could not be read is a gap, not a failure
    return point


def run_job(
    settings: Settings, kubectl: Kubectl, timeout_s: int, *, poll_s: float = SAMPLE_SECONDS
) -> tuple[str, list[dict[str, Any]], str]:
    """The Job's log, the replicas and GPU nodes sampled while it ran, and "" or why it did not finish (the
    samples and finished runs are kept either way)."""
    load_balancer = load_balancer_host(settings, kubectl) if settings.serve_endpoint.exposed else ""
    props = bench_props(settings, load_balancer)
    why_not = bench_base_url(settings, load_balancer)[1]
    if why_not:
        print(f"note: benchmarking the Serve service inside the cluster, not the load balancer: {why_not}", flush=True)
    manifest = cdk8s.App.of(BenchJobChart(cdk8s.App(), "bench", props=props)).synth_yaml()
    kubectl(["delete", "job", "-n", props.namespace, props.name, "--ignore-not-found", "--wait=true"])
    start, timeline, state, log = time.monotonic(), [], "", ""
    try:
        if props.api_key_secret:
            # The key from Secrets Manager, to a Secret of the run only, through stdin (never an argument or a file);
            # `create`, not `apply`: apply would copy the whole input, the key too, into the
            # last-applied-configuration annotation, which `kubectl describe` shows.
            import boto3

            from tools.endpoint import read_key

            secret = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": props.api_key_secret, "namespace": props.namespace},
                "type": "Opaque",
                "stringData": {"key": read_key(settings, boto3.session.Session())},
            }
            kubectl(["delete", "secret", "-n", props.namespace, props.api_key_secret, "--ignore-not-found"])
            if kubectl(["create", "-f", "-"], json.dumps(secret)).returncode != 0:
                raise RuntimeError(
                    f"cannot create Secret {props.namespace}/{props.api_key_secret} for the benchmark's API key"
                )
        applied = kubectl(["apply", "-f", "-"], manifest)
        if applied.returncode != 0:
            raise RuntimeError(f"cannot create Job {props.namespace}/{props.name}: {applied.stderr.strip()}")
        print(
            f"running Job {props.namespace}/{props.name} against {props.base_url} (up to {timeout_s // 60} min)...",
            flush=True,
        )
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            timeline.append(sample(kubectl, props.namespace))
            state = kubectl(
                [
                    "get",
                    "-n",
                    props.namespace,
                    f"job/{props.name}",
                    "-o",
                    "jsonpath={.status.succeeded},{.status.failed}",
                ]
            ).stdout.strip()
            if state.startswith("1") or state.endswith(",1"):
                break
            time.sleep(poll_s)
        log = kubectl(["logs", "-n", props.namespace, f"job/{props.name}"]).stdout
    finally:
        # The run's copy of the key never outlives it, whatever stopped the run.
        if props.api_key_secret:
            kubectl(["delete", "secret", "-n", props.namespace, props.api_key_secret, "--ignore-not-found"])
    unfinished = ""
    if not state.startswith("1"):
        unfinished = (
            f"Job {props.namespace}/{props.name} did not complete in {int(time.monotonic() - start)}s: `kubectl logs -n"
            f" {props.namespace} job/{props.name}`"
        )
    return log, timeline, unfinished


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path(os.environ.get("BENCH_RESULT", "bench-serving.json")))
    parser.add_argument(
        "--compare", type=Path, default=Path(os.environ["COMPARE"]) if os.environ.get("COMPARE") else None
    )
    parser.add_argument("--timeout-minutes", type=int, default=90)  # the mixed runs and the ramp take ~35 min
    args = parser.parse_args(argv)
    settings = project_settings()
    previous = json.loads(args.compare.read_text())["runs"] if args.compare else None
    ran, code = on_cluster(
        settings,
        lambda kubectl: run_job(settings, kubectl, args.timeout_minutes * 60),
        timeout=args.timeout_minutes * 60 + 120,
    )
    if ran is None:
        return code
    log, timeline, unfinished = ran
    rows = summarize(parse_results(log))
    result = {"model": settings.model_id, "gpu_node_type": settings.gpu_node.name, "runs": rows, "timeline": timeline}
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    chart = draw(
        rows,
        timeline,
        args.output.with_suffix(".png"),
        title=f"{settings.model_id} on {settings.gpu_node.name}: prefill/decode",
    )
    print(table(rows, previous))
    print(f"saved {args.output} and {chart}")
    if unfinished:
        print(f"error: {unfinished} (the finished runs and the samples are saved)", file=sys.stderr)
        return 1
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
