"""The one-host check's PD steps against stand-in engines with planted faults (tests/local_check_standin.py), run
by tests/test_local_check_faults.py in a process of its own: `python -m tests.local_check_faults_scenario INPUT.json`
prints one JSON line: per case, the steps that failed and their details.

INPUT holds the plan (the synthesized RayService) and the cases: the faults planted, and whether each phase's
placement bundle asks for the other phase's resource. One local Ray cluster shaped like the RayCluster serves every
case in turn, through the runner's own check_application.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.local_check_standin import FAULTS_KEY, VOCAB, StandInEngine
from tests.loopback import free_port
from tools.local_check.application import check_application
from tools.local_check.client import parity_prompts
from tools.local_check.cluster import LocalCluster, worker_env
from tools.local_check.controls import LoneEngine
from tools.local_check.results import Answer, Report, noise_floor
from tools.local_check.shape import (
    GIB,
    Target,
    accelerator_resources,
    batch_boundary,
    cluster_shape,
    patch_serve_config,
    serve_config,
)
from tools.local_check.transfer import SETTLE_S


def swap_phase_resources(config: dict[str, Any]) -> None:
    """The mistake placement must catch: each phase's bundle asks for the other phase's resource."""
    args = config["applications"][0]["args"]
    bundles = [
        args[f"{phase}_config"]["placement_group_config"]["bundle_per_worker"] for phase in ("prefill", "decode")
    ]
    bundles[0]["pd_decode"] = bundles[0].pop("pd_prefill")
    bundles[1]["pd_prefill"] = bundles[1].pop("pd_decode")


def run(spec: dict[str, Any], work: Path) -> dict[str, Any]:
    import ray
    from ray import serve

    plan = spec["plan"]
    engine = StandInEngine()
    host = engine.host()
    deployed = serve_config(plan["rayservice"])
    target = Target(plan["target"]["gpu_model"], int(plan["target"]["gpu_total_bytes"]), True)
    patched, _ = patch_serve_config(
        deployed, host=host, target=target, model_path="/m", weights="model", shared_gpu=True, kv_cache_bytes=GIB
    )
    matched = batch_boundary(deployed, target)  # 2,049 for the pinned configuration
    extra, _ = accelerator_resources(deployed, host)
    env, _ = worker_env(plan["rayservice"], work / "hf-home")
    prompts = parity_prompts([40, matched], VOCAB)
    lone, measured = engine.reference("/m", {}, prompts, work / "reference.log", env)
    noise = noise_floor(*([Answer.from_json(a) for a in lone[k]] for k in ("answers", "batched")))
    # A deploy returns once it runs, so a long limit costs a good run nothing: with the suite's peak load and three
    # more busy loops on 2 cores each case's took 43-52 s (60 s was the limit). The transfer wait: a transfer's count
    # shows within one of Ray's pushes (transfer.py), twice the settling.
    args = argparse.Namespace(ready_timeout=180, bench_rates=[], transfer_timeout=2 * SETTLE_S)
    port = free_port()
    # NIXL's exporter ports of its own, one a worker node: the whole-flow test's local cluster may run at the same time
    # (the default's).
    nixl_ports = free_port(len(cluster_shape(plan["rayservice"]).workers))
    cluster = LocalCluster(plan, host, extra, env, nixl_port_base=nixl_ports)
    cases = []
    try:
        ray.init(address=cluster.address)
        serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
        for faults, swapped in spec["cases"]:
            config = copy.deepcopy(patched)
            config["applications"][0]["args"][FAULTS_KEY] = faults
            if swapped:
                swap_phase_resources(config)
            report = Report()
            check_application(
                report, "pd", config, plan, engine, cluster, f"http://127.0.0.1:{port}", None, prompts,
                LoneEngine(lone, noise, matched, measured), args, "/m",
            )  # fmt: skip
            serve.delete(config["applications"][0]["name"])
            failed = [step for step in report.steps if not step.ok]
            cases.append({"failed": [s.name for s in failed], "details": {s.name: s.detail for s in failed}})
    finally:
        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()
    return {"cases": cases}


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    with tempfile.TemporaryDirectory(prefix="local-check-faults-") as work:
        result = run(spec, Path(work))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
