"""One application of `make local-check` (tools/local_check/runner.py runs them: PD, then the collocated
replicas) deployed on the local Ray cluster and checked: deploy, routes, greedy parity with the lone engine,
NIXL's backend and transfer plan (PD), the benchmark Job's runs; each a step of the report."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, replace
from typing import Any

from tools.local_check import conformance, conformance_verdict
from tools.local_check.client import check_routes, nixl_lines, pd_answer, run_bench, wait_ready
from tools.local_check.cluster import LocalCluster
from tools.local_check.compare import figure
from tools.local_check.controls import LoneEngine
from tools.local_check.engines import Engine
from tools.local_check.placement import engine_pids, judge_placement, logs_of, ray_tables, read_placement
from tools.local_check.results import (
    Answer,
    MemoryRow,
    ParityRow,
    Report,
    compare_memory,
    describe_memory,
    parity_row,
)
from tools.local_check.results import memory_report as read_memory
from tools.local_check.shape import Change, with_engine_kwargs
from tools.local_check.transfer import TransferStats, TransferVerdict, block_size, judge_transfer, metrics_urls


def _configured_backend(config: dict[str, Any]) -> str:
    """The NIXL backend the (patched) serve config asks for: LIBFABRIC with EFA, UCX without."""
    decode = config["applications"][0]["args"]["decode_config"]["engine_kwargs"]
    backends: list[str] = decode["kv_transfer_config"]["kv_connector_extra_config"]["backends"]
    return "+".join(sorted(backends))


def _replicas(config: dict[str, Any]) -> dict[str, int]:
    """The PD app's engines per phase: its replicas (the minimum, with autoscaling)."""
    args = config["applications"][0]["args"]
    counts = {}
    for phase in ("prefill", "decode"):
        deployment = args[f"{phase}_config"].get("deployment_config", {})
        counts[phase] = int(
            deployment.get("num_replicas", deployment.get("autoscaling_config", {}).get("min_replicas", 1))
        )
    return counts


def _pd_memory(report: Report, plan: dict[str, Any], texts: dict[str, str], lone: dict[str, float]) -> None:
    """Each PD engine's own memory report (its log), against the fit check. An engine given kv_cache_memory_bytes
    (the phases sharing one GPU) neither profiles nor logs its KV cache in GiB: its KV cache in tokens must then be
    the lone engine's, whose bytes it was given."""
    for phase in ("prefill", "decode"):
        measured = read_memory(texts.get(phase, ""))
        report.facts.setdefault("measured_pd", {})[phase] = measured
        predicted = plan["predicted"].get(phase)
        if not predicted:
            continue
        rows = compare_memory(predicted, measured)
        if "kv_cache_gib" not in measured and lone.get("kv_cache_tokens"):
            tokens = measured.get("kv_cache_tokens")
            rows[-1] = MemoryRow(
                "KV cache",
                predicted["kv_cache_gib"],
                lone.get("kv_cache_gib"),
                tokens is not None and abs(tokens - lone["kv_cache_tokens"]) <= 0.01 * lone["kv_cache_tokens"],
                f"given the lone engine's KV cache (kv_cache_memory_bytes): {tokens or 0:,.0f} tokens, the lone"
                f" engine's {lone['kv_cache_tokens']:,.0f}",
            )
        report.memory[phase] = rows
        report.add(
            f"memory {phase}",
            all(r.ok for r in rows),
            describe_memory(rows) + ("" if rows[-1].figure != "KV cache" else f"; {rows[-1].note}"),
        )


def _app_status(name: str) -> tuple[str, str]:
    """Serve's status of the application and its message ("" before it exists)."""
    from ray import serve

    status = serve.status().applications.get(name)
    return (str(status.status).rsplit(".", 1)[-1], str(status.message or "")) if status is not None else ("", "")


def _deploy_failed(name: str) -> str:
    """Serve's message when the application failed to deploy ("" while it deploys or runs)."""
    status, message = _app_status(name)
    return (message or status) if status == "DEPLOY_FAILED" else ""


def deploy(
    report: Report,
    prefix: str,
    mode: str,
    config: dict[str, Any],
    plan: dict[str, Any],
    engine: Engine,
    base: str,
    key: str | None,
    ready_timeout: float,
) -> bool:
    """Deploy one application and wait until it answers; a deploy step either way."""
    from ray import serve
    from ray._common.utils import import_attr
    from ray.serve._private.api import call_user_app_builder_with_args_if_necessary

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
            ready_timeout,
            failed=lambda: _deploy_failed(application["name"]),
            running=lambda: _app_status(application["name"])[0] == "RUNNING",
        )
    except (TimeoutError, RuntimeError) as error:
        report.add(f"{prefix}deploy", False, str(error))
        return False
    report.facts.setdefault("ready_s", {})[mode] = round(time.monotonic() - started, 1)
    report.add(
        f"{prefix}deploy", True, f"{application['name']} running {time.monotonic() - started:.0f} s after serve.run"
    )
    return True


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
    lone: LoneEngine,
    args: argparse.Namespace,
    model: str,
) -> None:
    """Deploy one application (PD, or the collocated replicas) and check it: routes, parity, NIXL (PD), the
    benchmark."""
    prefix = "" if mode == "pd" else f"{mode}: "
    if not deploy(report, prefix, mode, config, plan, engine, base, key, args.ready_timeout):
        return
    check_routes(report, base, plan["model"]["id"], key, prefix=prefix)
    if mode == "pd":
        _check_pd(
            report,
            config,
            plan,
            cluster,
            base,
            key,
            prompts,
            lone,
            args.transfer_timeout,
        )
    else:
        # The collocated replicas answer as one engine does: the lone engine's answers, judged as PD's are.
        rows = [
            parity_row(
                len(p),
                pd_answer(base, plan["model"]["id"], p, key),
                Answer.from_json(ref),
                lone.noise,
                matched=len(p) == lone.matched_length,
            )
            for p, ref in zip(prompts, lone.answers, strict=True)
        ]
        report.add(f"{prefix}parity", bool(rows) and all(r.ok for r in rows), ", ".join(r.describe() for r in rows))
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


def _check_pd(
    report: Report,
    config: dict[str, Any],
    plan: dict[str, Any],
    cluster: LocalCluster,
    base: str,
    key: str | None,
    prompts: list[list[int]],
    lone: LoneEngine,
    transfer_timeout: float,
) -> None:
    """PD's own steps: placement read back, each engine's memory, parity on logprobs with the bytes each request's
    KV transfer moved, and NIXL's backend and transfer-plan lines."""
    actors, nodes = ray_tables()
    placed = read_placement(config["applications"][0]["name"], actors, nodes)
    ok, detail = judge_placement(placed, _replicas(config))
    report.add("placement", ok, detail)
    decode_node = next((p.node_id for p in placed if p.phase == "decode"), "")
    pids = engine_pids(placed, actors)
    texts = {phase: logs_of(cluster.log_dir(), pids.get(phase, set())) for phase in ("prefill", "decode")}
    _pd_memory(report, plan, texts, lone.measured)

    stats = TransferStats(metrics_urls, cluster.nixl_url(decode_node))
    block = block_size(texts["decode"])
    hybrid = bool(plan["model"]["hybrid_gdn"])
    variants: list[Answer | None] = [Answer.from_json(v) for v in lone.result.get("variants", [])] or [None] * len(
        prompts
    )
    rows: list[ParityRow] = []
    verdicts: list[TransferVerdict] = []
    answers: list[dict[str, Any]] = []
    before = stats.settled()  # the route checks' requests moved KV too
    for prompt, reference, variant in zip(prompts, lone.answers, variants, strict=True):
        answer = pd_answer(base, plan["model"]["id"], prompt, key)
        moved = stats.since(before, timeout_s=transfer_timeout)
        before = before.plus(moved)
        verdict = judge_transfer(len(prompt), moved, plan["predicted"]["decode"], block, hybrid)
        verdicts.append(verdict)
        row = parity_row(
            len(prompt),
            answer,
            Answer.from_json(reference),
            lone.noise,
            variant,
            matched=len(prompt) == lone.matched_length,
        )
        rows.append(replace(row, transfer_bytes=moved.bytes))
        answers.append(answer.to_json())
    report.parity = rows
    report.facts["pd_answers"] = answers  # beside the lone engine's (reference-decode.json): for a later look
    matched = [r for r in rows if r.matched]
    others = [r for r in rows if not r.matched]
    report.add(
        "parity (matched path)",
        bool(matched) and all(r.ok for r in matched),
        ", ".join(r.describe() for r in matched) or f"no prompt of {lone.matched_length} tokens",
    )
    report.add("parity (other lengths)", all(r.ok for r in others), ", ".join(r.describe() for r in others))
    report.facts["transfers"] = [
        {
            **asdict(v.measured),
            "prompt_tokens": v.prompt_tokens,
            "predicted_bytes": v.predicted_bytes,
            "tolerance_bytes": v.tolerance_bytes,
            "ok": v.ok,
        }
        for v in verdicts
    ]
    report.add(
        "transfer",
        bool(verdicts) and all(v.ok for v in verdicts),
        f"block {block} tokens; " + ", ".join(v.describe() for v in verdicts),
    )

    # The live engines' own lines: an earlier application on the same cluster logged its engines' too.
    backends, plans = nixl_lines(cluster.log_dir(), set().union(*pids.values()))
    expected = _configured_backend(config)
    engines = sum(_replicas(config).values())
    report.facts["nixl"] = {"backends": backends, "transfer_plans": plans}
    wrong = {process: b for process, b in backends.items() if b != expected}
    report.add(
        "nixl",
        len(backends) >= engines and not wrong and bool(plans),
        f"{len(backends)} engine(s) of {engines} instantiated {expected}"
        + (f"; others: {wrong}" if wrong else "")
        + f"; {len(plans)} transfer plan line(s)",
    )


def check_conformance(
    report: Report,
    pd_config: dict[str, Any],
    lone_config: dict[str, Any],
    plan: dict[str, Any],
    engine: Engine,
    cluster: LocalCluster,
    base: str,
    key: str | None,
    ready_timeout: float,
    vocab: int,
) -> None:
    """The requests applications send, through the running PD application, then through the lone engine deployed in
    its place; a step per row (tools/local_check/conformance.py)."""
    from ray import serve

    texts = "\n".join(path.read_text(errors="replace") for path in sorted(cluster.log_dir().glob("worker-*")))
    all_cases = conformance.cases(plan["model"]["id"], block_size(texts), vocab)
    pd = conformance.observe(base, all_cases, key, conformance.LogWatch(cluster.log_dir()), "PD ")
    report.facts["conformance_pd"] = [asdict(o) for o in pd]  # kept before the lone engine's deploy
    serve.delete(pd_config["applications"][0]["name"])
    if not deploy(report, "lone: ", "lone", lone_config, plan, engine, base, key, ready_timeout):
        return
    lone = conformance.observe(base, all_cases, key, conformance.LogWatch(cluster.log_dir()), "lone ")
    serve.delete(lone_config["applications"][0]["name"])
    rows = conformance_verdict.judge(all_cases, pd, lone)
    report.facts["conformance"] = [asdict(row) for row in rows]
    for row in rows:
        report.add(f"conformance: {row.name}", row.ok, row.detail)
    failed = conformance_verdict.grammar_failures(all_cases, rows)
    if failed:
        _try_remedies(report, pd_config, plan, engine, cluster, base, key, ready_timeout, failed)


def _try_remedies(
    report: Report,
    pd_config: dict[str, Any],
    plan: dict[str, Any],
    engine: Engine,
    cluster: LocalCluster,
    base: str,
    key: str | None,
    ready_timeout: float,
    failed: list[conformance.Case],
) -> None:
    """PD redeployed with each of conformance_verdict.GRAMMAR_REMEDIES in both phases, the failed grammar rows sent
    again; a step per row and remedy (the default's rows have failed already: these say what would hold)."""
    from ray import serve

    name = pd_config["applications"][0]["name"]
    for extra in conformance_verdict.GRAMMAR_REMEDIES:
        label = f"remedy {json.dumps(extra, sort_keys=True)}: "
        if not deploy(report, label, "remedy", with_engine_kwargs(pd_config, extra), plan, engine, base, key,
                      ready_timeout):  # fmt: skip
            continue
        observed = conformance.observe(base, failed, key, conformance.LogWatch(cluster.log_dir()), label)
        serve.delete(name)
        report.facts.setdefault("remedies", []).append(
            {"engine_args": extra, "observations": [asdict(o) for o in observed]}
        )
        verdicts = [conformance_verdict.remedy_verdict(o) for o in observed]
        for observation, (ok, detail) in zip(observed, verdicts, strict=True):
            report.add(f"{label}{observation.name}", ok, detail)
        if all(ok for ok, _ in verdicts):
            return
