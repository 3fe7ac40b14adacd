"""The steps of `make verify` (tools/verify.py runs them): each a pure function of what the cluster, AWS or the
endpoint answered, returning a Step, passed or failed with the command to look closer."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, get_args

from k8s_constructs.endpoint import ingress_name
from k8s_constructs.kv_path import KvPath
from k8s_constructs.ray_facts import (
    ENGINE_REQUESTS_RUNNING,
    HEAD_CONTAINER,
    METRICS_CLUSTER_LABEL,
    METRICS_PHASE_LABEL,
    NODE_TYPE_LABEL,
    RAY_LOG_DIR,
    WORKER_CONTAINER,
    selector,
)
from k8s_constructs.serve_config import Phase
from settings import Settings
from tools.endpoint import NOT_SENT, Probe

# The worker groups whose engines must report ENGINE_REQUESTS_RUNNING: one per phase.
ENGINE_PHASES: tuple[Phase, ...] = get_args(Phase)


@dataclass
class Step:
    name: str
    ok: bool
    detail: str
    look_closer: str = ""  # the command to run when it failed


def check_gpu_nodes(settings: Settings, nodes: dict[str, Any]) -> Step:
    """Every GPU node advertises all its GPUs and EFA interfaces (the device plugins are running)."""
    want_gpu, want_efa = settings.gpu_node.gpus, settings.gpu_node.efa_interfaces
    items = nodes.get("items", [])
    short = []
    for node in items:
        allocatable = node.get("status", {}).get("allocatable", {})
        gpu, efa = int(allocatable.get("nvidia.com/gpu", 0)), int(allocatable.get("vpc.amazonaws.com/efa", 0))
        if (gpu, efa) != (want_gpu, want_efa):
            short.append(f"{node['metadata']['name']} has {gpu} GPU / {efa} EFA")
    detail = f"{len(items)} of {settings.gpu_node_count} GPU node(s), each {want_gpu} GPU / {want_efa} EFA"
    ok = len(items) == settings.gpu_node_count and not short
    look = "kubectl describe nodes -l role=gpu-worker; kubectl get pods -n kube-system -o wide | grep -E 'nvidia|efa'"
    return Step(
        "gpu-nodes", ok, detail if ok else f"{detail}: {'; '.join(short) or 'missing nodes'}", "" if ok else look
    )


def check_nixl(settings: Settings, backends: dict[str, str]) -> Step:
    """Every Ray worker instantiated the backend KV_TRANSPORT asks for (LIBFABRIC by default; UCX then fails)."""
    bad = {pod: b for pod, b in backends.items() if b != settings.nixl_backend}
    detail = ", ".join(f"{pod}: {b}" for pod, b in sorted(backends.items())) or "no Ray worker pods"
    ok = bool(backends) and not bad
    look = f"{worker_logs(settings)} | grep -i nixl"
    return Step("nixl", ok, detail, "" if ok else look)


def check_kv_path(settings: Settings, before: dict[str, KvPath], after: dict[str, KvPath]) -> Step:
    """Each worker's KV path (libfabric's and NIXL's start-up lines), and no transfer failure logged since before the
    completion (an earlier one is said, not failed: the logs cover the whole Ray session). Fails on a path the KV
    cache cannot take right (TCP, GPU memory registered as host memory); bounce buffers (g6, g6e: no GPUDirect RDMA)
    and an unknown path are said, not failed."""
    said, failed = [], False
    for pod, now in sorted(after.items()):
        earlier = before.get(pod, KvPath(now.path))
        new = [line for line in now.failures if line not in earlier.failures]
        said.append(f"{pod}: {now.path}")
        said += [f"{pod}: {line}" for line in new[:2]]
        if len(now.failures) > len(new):
            said.append(f"{pod}: {len(now.failures) - len(new)} failure line(s) from before this completion")
        if now.retries:
            said.append(f"{pod}: {now.retries} EAGAIN retry line(s) (NIXL_LOG_LEVEL=DEBUG)")
        failed = failed or bool(new) or now.wrong
    ok = bool(after) and not failed
    return Step("kv-path", ok, "; ".join(said) or "no Ray worker pods", "" if ok else kv_path_advice(settings))


def describe_rayservice(settings: Settings) -> str:
    """The command that shows the RayService's status and events."""
    return f"kubectl describe rayservice -n {settings.namespace} {settings.ray_service_name}"


def worker_logs(settings: Settings) -> str:
    """The command that prints the Ray workers' container logs."""
    return f"kubectl logs -n {settings.namespace} -l {selector(NODE_TYPE_LABEL, 'worker')} -c {WORKER_CONTAINER}"


def kv_path_advice(settings: Settings) -> str:
    """What to try when the KV cache does not move, and what to collect for a bug report."""
    other = (
        "KV_TRANSPORT=ucx (NIXL over UCX, no EFA: TCP between the nodes) to try the other path"
        if settings.kv_over_efa
        else "KV_TRANSPORT=libfabric to try EFA"
    )
    ray_logs = f"kubectl exec -n {settings.namespace} POD -c {WORKER_CONTAINER} -- tar czf - -C {RAY_LOG_DIR} ."
    return (
        f"try {other}; for a bug report collect `{worker_logs(settings)}` and each worker's Ray logs (`{ray_logs}`;"
        " NIXL_LOG_LEVEL=DEBUG in the workers' environment adds NIXL's EAGAIN retries)"
    )


NOT_READY = "skipped: the RayService is not ready"
GCS_STORAGE_LINE = "GCS storage type is"  # gcs_server.cc logs it at start: StorageType::REDIS_PERSIST with a store


def check_gcs_store(settings: Settings, head: dict[str, Any] | None, storage_line: str) -> Step:
    """GCS_FAULT_TOLERANCE=redis: KubeRay started the head with fault tolerance (its pod's ray.io/ft-enabled), and the
    GCS keeps its state in the store (its log: StorageType::REDIS_PERSIST, not IN_MEMORY)."""
    look = (
        f"kubectl logs -n {settings.namespace} -l ray.io/node-type=head -c {HEAD_CONTAINER}; kubectl get secret -n"
        f" {settings.namespace} gcs-store"
    )
    if head is None:
        return Step("gcs-store", False, "no head pod", look)
    enabled = head["metadata"].get("annotations", {}).get("ray.io/ft-enabled") == "true"
    persisted = "REDIS_PERSIST" in storage_line
    detail = (
        f"ray.io/ft-enabled={'true' if enabled else 'false'};"
        f" {storage_line.split('] ')[-1].strip() or 'no GCS storage line in the head log'}"
    )
    return Step("gcs-store", enabled and persisted, detail, "" if enabled and persisted else look)


def check_completion(settings: Settings, answer: dict[str, Any] | None, error: str) -> Step:
    try:
        message = answer["choices"][0]["message"] if answer else {}
        # A thinking model's 16 tokens may be reasoning alone (REASONING_PARSER keeps it out of the content).
        text = str(message.get("content") or message.get("reasoning") or message.get("reasoning_content") or "").strip()
    except (KeyError, IndexError, TypeError):
        text = ""
    ok = bool(text)
    detail = f"{settings.model_id} answered {text[:60]!r}" if ok else f"no answer: {error or json.dumps(answer)[:200]}"
    # A completion that timed out with the engines up is where a stalled KV transfer shows (NIXL retries an EAGAIN
    # forever): the kv-path step after it reads the workers' transfer failures.
    look = f"{describe_rayservice(settings)}; if it timed out, {kv_path_advice(settings)}"
    return Step("completion", ok, detail, "" if ok else look)


def check_metrics_collector(settings: Settings, scrapers: list[dict[str, Any]] | None, error: str = "") -> Step:
    """The observability stack's collector (AMP ListScrapers, filtered by its alias) must be ACTIVE."""
    alias = settings.metrics_collector_alias
    look = (
        f"aws amp list-scrapers --region {settings.region} --filters alias={alias} (statusReason), and the"
        f" {settings.stack_names['observability']} stack events"
    )
    if scrapers is None:
        return Step("metrics", False, f"cannot list the metrics collectors: {error}", look)
    # An alias need not be unique: while CloudFormation replaces the collector, the old one is DELETING.
    ours = [s for s in scrapers if s.get("alias") == alias and s.get("status", {}).get("statusCode") != "DELETING"]
    if not ours:
        return Step("metrics", False, f"no metrics collector {alias}", look)
    chosen = next((s for s in ours if s.get("status", {}).get("statusCode") == "ACTIVE"), ours[0])
    status = chosen.get("status", {}).get("statusCode", "?")
    reason = chosen.get("statusReason", "")
    ok = status == "ACTIVE"
    detail = (
        f"collector {alias} {status}"
        + ("" if ok or not reason else f": {reason}")
        + (" (scraping into CloudWatch, PromQL)" if ok else "")
    )
    return Step("metrics", ok, detail, "" if ok else look)


def engine_series_query(settings: Settings) -> str:
    return (
        f"count by ({METRICS_PHASE_LABEL})"
        f' ({ENGINE_REQUESTS_RUNNING}{{{METRICS_CLUSTER_LABEL}="{settings.cluster_name}"}})'
    )


def check_engine_series(settings: Settings, result: list[dict[str, Any]] | None, error: str = "") -> Step:
    """The vLLM engines' series of both phases, as CloudWatch's PromQL answers for this cluster."""
    look = (
        f"CloudWatch Query Studio (PromQL): {engine_series_query(settings)}; the Ray pods' port 8080 (NetworkPolicy"
        " metrics-collector)"
    )
    if result is None:
        return Step("metrics", False, f"collector ACTIVE, but PromQL did not answer: {error}", look)
    phases = sorted({str(r.get("metric", {}).get(METRICS_PHASE_LABEL, "")) for r in result} - {""})
    missing = [p for p in ENGINE_PHASES if p not in phases]
    if missing:
        return Step(
            "metrics",
            False,
            f"collector ACTIVE, but no {ENGINE_REQUESTS_RUNNING} series from {', '.join(missing)} in CloudWatch",
            look,
        )
    return Step(
        "metrics", True, f"collector ACTIVE; {ENGINE_REQUESTS_RUNNING} arriving from {', '.join(phases)} (PromQL)"
    )


def check_endpoint(settings: Settings, got: Probe) -> Step:
    detail = (
        f"through the {settings.serve_endpoint.scheme} load balancer: without a key {got.without_key}, "
        + (
            "with one: not sent (set SERVE_HOSTNAME: without it the certificate cannot identify the load balancer)"
            if got.with_key == NOT_SENT
            else f"with one {got.with_key}: {got.answer.strip()!r}"
        )
        if not got.error
        else got.error
    )
    return Step(
        "endpoint",
        got.ok,
        detail,
        "" if got.ok else f"kubectl describe ingress -n {settings.namespace} {ingress_name(settings)}",
    )


# The application requests make verify sends after the completion. Thinking is off where the template knows the switch
# (Qwen's): a thinking model's grammar starts only once its reasoning ends, and 128 tokens may not reach it.
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
NO_THINKING: dict[str, Any] = {"chat_template_kwargs": {"enable_thinking": False}}
TOOL_REQUEST: dict[str, Any] = {
    "messages": [{"role": "user", "content": "What is the weather in Lima?"}],
    "tools": [WEATHER_TOOL],
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "max_tokens": 128,
    **NO_THINKING,
}
JSON_REQUEST: dict[str, Any] = {
    "messages": [{"role": "user", "content": "Is it sunny in Lima? Answer as JSON."}],
    "response_format": {
        "type": "json_schema",
        "json_schema": {
            "name": "weather",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "sunny": {"type": "boolean"}},
                "required": ["city", "sunny"],
                "additionalProperties": False,
            },
        },
    },
    "max_tokens": 128,
    **NO_THINKING,
}
SERVING_API_DOC = "docs/serving-api.md"


def _object_with(value: Any, kinds: dict[str, type]) -> str:
    """ "" when value is a JSON object holding exactly these keys with these types, else what is wrong."""
    if not isinstance(value, dict):
        return f"not a JSON object: {json.dumps(value)[:80]}"
    if set(value) != set(kinds):
        return f"keys {sorted(value)}, the schema's {sorted(kinds)}"
    wrong = [key for key, kind in kinds.items() if not isinstance(value[key], kind)]
    return f"{wrong[0]} is a {type(value[wrong[0]]).__name__}" if wrong else ""


def _application_look(settings: Settings) -> str:
    return (
        f"{SERVING_API_DOC} (what the endpoint serves through PD, and the engines' settings); the decode worker's"
        f" log: {worker_logs(settings)} | grep -E 'grammar rejected|Failed to advance FSM|tool'"
    )


def check_tool_call(settings: Settings, answer: dict[str, Any] | None, error: str) -> Step:
    """A named tool_choice: one call of that tool, its arguments JSON that the tool's schema takes."""
    call: dict[str, Any] = {}
    try:
        calls = (answer["choices"][0]["message"].get("tool_calls") or []) if answer else []
        call = calls[0]["function"] if calls else {}
        problem = "" if calls else f"no tool call: {error or json.dumps(answer)[:200]}"
        if call and call.get("name") != "get_weather":
            problem = f"a call of {call.get('name')!r}"
        elif call:
            problem = _object_with(json.loads(call.get("arguments") or "null"), {"city": str})
    except (KeyError, IndexError, TypeError, ValueError) as failure:
        problem = f"an answer of another shape ({type(failure).__name__}): {json.dumps(answer)[:160]}"
    detail = problem or f"get_weather({call.get('arguments')})"
    return Step("tool-call", not problem, detail, "" if not problem else _application_look(settings))


def check_strict_json(settings: Settings, answer: dict[str, Any] | None, error: str) -> Step:
    """A strict json_schema response_format: the content is JSON that the schema takes."""
    content = None
    try:
        content = answer["choices"][0]["message"].get("content") if answer else None
        problem = f"no answer: {error or json.dumps(answer)[:200]}" if content is None else ""
        if not problem:
            problem = _object_with(json.loads(str(content)), {"city": str, "sunny": bool})
    except (KeyError, IndexError, TypeError, ValueError) as failure:
        problem = f"not the schema's JSON ({type(failure).__name__}): {json.dumps(answer)[:160]}"
    detail = problem or str(content)[:80]
    return Step("strict-json", not problem, detail, "" if not problem else _application_look(settings))
