"""One application of `make local-check` (tools/local_check/runner.py runs them: PD, then the collocated
replicas) deployed on the local Ray cluster and checked: deploy, routes, greedy parity with the lone engine,
NIXL's backend and transfer plan (PD), the benchmark Job's runs; each a step of the report."""

from __future__ import annotations

import argparse
import time
from typing import Any

from tools.local_check.client import check_routes, nixl_lines, pd_tokens, run_bench, wait_ready
from tools.local_check.cluster import LocalCluster
from tools.local_check.compare import figure
from tools.local_check.engines import Engine
from tools.local_check.results import ParityRow, Report
from tools.local_check.shape import Change


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


def _app_status(name: str) -> tuple[str, str]:
    """Serve's status of the application and its message ("" before it exists)."""
    from ray import serve

    status = serve.status().applications.get(name)
    return (str(status.status).rsplit(".", 1)[-1], str(status.message or "")) if status is not None else ("", "")


def _deploy_failed(name: str) -> str:
    """Serve's message when the application failed to deploy ("" while it deploys or runs)."""
    status, message = _app_status(name)
    return (message or status) if status == "DEPLOY_FAILED" else ""


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
    """Deploy one application (PD, or the collocated replicas) and check it: routes, parity, NIXL (PD), the
    benchmark."""
    from ray import serve
    from ray._common.utils import import_attr
    from ray.serve._private.api import call_user_app_builder_with_args_if_necessary

    prefix = "" if mode == "pd" else f"{mode}: "
    application = config["applications"][0]
    import_path = engine.app_import_path(application["import_path"])
    if import_path != application["import_path"]:
        report.changes.append(
            Change(f"{prefix}import_path", application["import_path"], import_path, "the stand-in engine of the tests")
        )
    app = call_user_app_builder_with_args_if_necessary(import_attr(import_path), application["args"])
    started = time.monotonic()
    # serve.run waits for RUNNING without a limit (Ray 2.58: timeout_s=-1); deploy, then wait with ours.
    serve._run(app, _blocking=False, name=application["name"], route_prefix=application.get("route_prefix", "/"))
    try:
        wait_ready(
            base,
            plan["model"]["id"],
            key,
            args.ready_timeout,
            failed=lambda: _deploy_failed(application["name"]),
            running=lambda: _app_status(application["name"])[0] == "RUNNING",
        )
    except (TimeoutError, RuntimeError) as error:
        report.add(f"{prefix}deploy", False, str(error))
        return
    report.facts.setdefault("ready_s", {})[mode] = round(time.monotonic() - started, 1)
    report.add(
        f"{prefix}deploy", True, f"{application['name']} running {time.monotonic() - started:.0f} s after serve.run"
    )
    check_routes(report, base, plan["model"]["id"], key, prefix=prefix)
    parity = [
        ParityRow(len(p), pd_tokens(base, plan["model"]["id"], p, key), ref)
        for p, ref in zip(prompts, reference, strict=True)
    ]
    if mode == "pd":
        report.parity = parity
    report.add(
        f"{prefix}parity",
        all(r.equal for r in parity),
        ", ".join(
            f"{r.prompt_tokens} tokens: {'equal' if r.equal else f'differs at {r.first_difference}'}" for r in parity
        ),
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
            "; ".join(
                f"{r['workload']}@{r['rate']}: TTFT p50 {figure(r, 'ttft'):.0f} ms, TPOT p50 {figure(r, 'tpot'):.1f} ms"
                for r in bench
            ),
        )
