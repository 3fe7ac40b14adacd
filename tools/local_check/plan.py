"""The project's half of `make local-check`: what the GPU host needs to run the synthesized serving config, in one
JSON file — the RayService exactly as the synth builds it from this checkout's settings, the fit check's
prediction for each phase, the benchmark Job's own commands and the image's versions (requirements-gpu.txt)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import cdk8s
import yaml

from k8s_constructs.bench_job import LONG, RESULT_MARKER, SHORT, BenchJobProps, bench_command, concurrent_runs
from k8s_constructs.ray_service import build_rayservice_chart
from k8s_constructs.serve_config import Phase
from settings import Settings
from settings.context_files import REPO
from settings.model_fit import CUDA_TOTAL_MIB, GIB, fit
from tools.entry import one_line_errors, project_settings
from tools.local_check.client import BASE_URL, SCRATCH, TOKENIZER

GPU_REQUIREMENTS = REPO / "requirements-gpu.txt"
DEFAULT_PLAN = REPO / "local-check" / "plan.json"
# What the plan leaves for the host to fill in: the endpoint and the tokenizer's path are known only there.
# The packages whose versions must be the image's (the rest of requirements-gpu.txt is their closure).
CHECKED_PACKAGES = ("ray", "vllm", "nixl", "torch")


def image_versions(path: Path = GPU_REQUIREMENTS) -> dict[str, str]:
    """name -> version of the image's serving stack, from requirements-gpu.txt (`name[extras]==version` lines)."""
    versions = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            versions[name.split("[", 1)[0].strip().lower()] = version.strip()
    return {name: versions[name] for name in CHECKED_PACKAGES if name in versions}


def rayservice_manifest(settings: Settings) -> dict[str, Any]:
    """The RayService of the serving stack's chart (the same builder `cdk synth` embeds)."""
    chart = build_rayservice_chart(settings)
    for document in yaml.safe_load_all(cdk8s.App.of(chart).synth_yaml()):
        if document and document.get("kind") == "RayService":
            found: dict[str, Any] = document
            return found
    raise RuntimeError("the serving chart has no RayService")


def prediction(settings: Settings, phase: Phase) -> dict[str, float] | None:
    """The fit check's figures for one phase's engine on the deployed GPU, in GiB (None: an unknown model)."""
    if settings.model_facts is None:
        return None
    eager = settings.eager(phase)
    fitted = fit(
        settings.model_facts,
        settings.gpu_node,
        settings.tensor_parallel_size,
        text_only=settings.text_only_multimodal,
        eager=eager,
    )
    return {
        "budget_gib": fitted.budget / GIB,
        "weights_gib": fitted.weights / GIB,
        "overhead_gib": fitted.overhead / GIB,
        "kv_cache_gib": (fitted.budget - fitted.weights - fitted.overhead) / GIB,
        "one_sequence_gib": (fitted.kv_per_token * settings.max_model_len + fitted.state) / GIB,
        # What the decode engine receives per request: the attention KV of each prompt token and the hybrid state.
        "kv_bytes_per_token": float(fitted.kv_per_token),
        "state_bytes": float(fitted.state),
        "sequences": float(fitted.sequences(settings.max_model_len)),
        "eager": float(eager),
    }


def bench_commands(settings: Settings) -> list[dict[str, Any]]:
    """The benchmark Job's own `vllm bench serve` runs (k8s_constructs/bench_job.py), long and short streams at
    each rate, with the endpoint and tokenizer left for the host."""
    props = BenchJobProps(
        name="local-check", namespace="", image="", base_url=BASE_URL, model_id=settings.model_id, tokenizer=TOKENIZER
    )
    return [
        bench_entry(rate, bench_command(props, LONG, rate), bench_command(props, SHORT, rate)) for rate in props.rates
    ]


def bench_entry(rate: float, long: str, short: str) -> dict[str, Any]:
    """One rate's runs, and the script that runs them as the Job does (at once; the result lines after both)."""
    return {"rate": rate, "long": long, "short": short, "script": concurrent_runs(long, short, f"{SCRATCH}/pair")}


def build_plan(settings: Settings) -> dict[str, Any]:
    gpu = settings.gpu_node
    facts = settings.model_facts
    return {
        "rayservice": rayservice_manifest(settings),
        "model": {
            "id": settings.model_id,
            "source": settings.model_source,
            "hub_repository": facts.source if facts else None,
            "hybrid_gdn": bool(facts and facts.linear_state_bytes_per_layer),
            "facts_from": settings.model_facts_source,
        },
        "target": {
            "instance_type": gpu.name,
            "gpu_model": gpu.gpu_model,
            "gpu_total_bytes": CUDA_TOTAL_MIB.get(gpu.gpu_model, int(gpu.gpu_memory_mib * 0.94)) * 1024 * 1024,
        },
        "max_model_len": settings.max_model_len,
        "predicted": {phase: prediction(settings, phase) for phase in ("prefill", "decode")},
        "bench": bench_commands(settings),
        "bench_result_marker": RESULT_MARKER,
        "versions": image_versions(),
    }


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.local_check plan", description=__doc__)
    parser.add_argument("--output", type=Path, default=DEFAULT_PLAN)
    args = parser.parse_args(argv)
    plan = build_plan(project_settings())
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(plan, indent=1, sort_keys=True) + "\n")
    print(
        f"wrote {args.output}: {plan['rayservice']['metadata']['name']} on {plan['target']['instance_type']}, model"
        f" {plan['model']['source']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
