"""`make verify`: the post-deploy gate. Exit 0 only when the deploy works.

In order, each with a visible wait where it waits:
1. rayservice   the RayService Ready for the spec just deployed, its Serve application RUNNING
2. gpu-nodes    every GPU node advertises the GPUs and EFA devices the instance facts say
3. nixl         every Ray worker's NIXL backend is KV_TRANSPORT's (LIBFABRIC by default: UCX, or no backend line,
                 fails)
4. completion   one chat completion through Serve, from inside the cluster, with a non-empty answer (with
                SERVE_API_KEYS=on, the head pod's own key), within COMPLETION_TIMEOUT_S; if it times out, the KV
                transfer may be stalled: it names KV_TRANSPORT's other value and what to collect
   kv-path      each worker's KV path as libfabric and NIXL log it at start (bounce buffers where the type has no
                GPUDirect RDMA), and no transfer failure logged during the completion; TCP or GPU memory registered
                as host memory fails (k8s_constructs/kv_path.py)
   transfer     the decode engines recorded the completion's KV transfer, none failed: the bytes and time (ranges,
                vLLM's histogram buckets) as MB/s beside the GPU type's network rate (tools/kv_transfer.py)
   endpoint     with SERVE_EXPOSURE beyond the cluster: through the load balancer (HTTPS), 401 without a key and a
                completion with one (run it from where the load balancer is reachable: inside the VPC for internal)
5. metrics      with OBSERVABILITY=on: the managed Prometheus collector of the Ray pods is ACTIVE, and
                CloudWatch answers PromQL with the vLLM engines' series of both phases (what the
                dashboard and the NIXL alarm read), waiting a few scrapes for them
Then the time of each phase since `make deploy` started (.deploy-started): CloudFormation done, Ray pods
scheduled, image present, model loaded, first token — as a table and in the JSON result
(VERIFY_RESULT, default verify-result.json).

kubectl runs against this cluster only (preflight.cluster_access). Names come from the same settings as the synth.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from k8s_constructs.endpoint import KEYS_FILE
from k8s_constructs.ray_facts import HEAD_CONTAINER, NODE_TYPE_LABEL, RAY_NODE_LABEL, SERVE_PORT, selector
from k8s_constructs.serve_config import API_KEYS_DIR
from preflight.cluster_access import ClusterUnreachable, Kubectl, cluster_kubectl
from settings import Settings
from settings.context_files import REPO
from settings.scheduling import GPU_NODE_LABELS
from tools.cluster import duration_seconds, ray_service_verdict, worker_backends
from tools.endpoint import Probe, base_url, load_balancer_host, probe, read_key, tls_context
from tools.entry import one_line_errors, project_settings
from tools.kv_transfer import KvWatch
from tools.verify_steps import (
    GCS_STORAGE_LINE,
    JSON_REQUEST,
    NOT_READY,
    TOOL_REQUEST,
    Step,
    check_completion,
    check_endpoint,
    check_engine_series,
    check_gcs_store,
    check_gpu_nodes,
    check_metrics_collector,
    check_nixl,
    check_strict_json,
    check_tool_call,
    describe_rayservice,
    engine_series_query,
)

DEPLOY_STARTED = REPO / ".deploy-started"
CLOUDFORMATION_DONE = REPO / ".deploy-finished"
PROMPT = "Say hello in five words."
METRICS_WAIT_S = 180  # a few 30 s scrapes and CloudWatch's ingestion
COMPLETION_TIMEOUT_S = 300  # the completion's own limit: a stalled KV transfer fails the gate after it


@dataclass
class Result:
    steps: list[Step] = field(default_factory=list)
    phases: dict[str, float | None] = field(default_factory=dict)  # seconds since the deploy started
    kv: dict[str, Any] = field(default_factory=dict)  # each worker's KV path, the completion's transfers

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(s.ok for s in self.steps)


def _json(kubectl: Kubectl, args: list[str]) -> dict[str, Any] | None:
    got = kubectl([*args, "-o", "json"])
    return json.loads(got.stdout) if got.returncode == 0 and got.stdout.strip() else None


def list_collectors(settings: Settings, client: Any | None = None) -> tuple[list[dict[str, Any]] | None, str]:
    """This cluster's collector as AMP lists it, or None and why not (no credentials, no permission)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        amp = client or boto3.session.Session().client("amp", region_name=settings.region)
        scrapers: list[dict[str, Any]] = amp.list_scrapers(filters={"alias": [settings.metrics_collector_alias]}).get(
            "scrapers", []
        )
        return scrapers, ""
    except (BotoCoreError, ClientError) as error:
        return None, str(error).splitlines()[0][:200]


def ask_cloudwatch(settings: Settings, query: str) -> tuple[list[dict[str, Any]] | None, str]:
    import boto3

    from tools.promql import PromQLError, instant_query

    try:
        return instant_query(query, region=settings.region, credentials=boto3.session.Session().get_credentials()), ""
    except PromQLError as error:
        return None, str(error)


def _time(stamp: str | None) -> float | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None


def phases(
    start: float | None,
    cloudformation_done: float | None,
    pods: dict[str, Any],
    ray_service: dict[str, Any],
    first_token: float | None,
) -> dict[str, float | None]:
    """Seconds from the deploy's start to each phase, from the objects' own timestamps (None: not reached)."""
    ray_pods = [
        p
        for p in pods.get("items", [])
        if p.get("metadata", {}).get("labels", {}).get(RAY_NODE_LABEL[0]) == RAY_NODE_LABEL[1]
    ]
    scheduled = [
        _time(c.get("lastTransitionTime"))
        for p in ray_pods
        for c in p.get("status", {}).get("conditions", [])
        if c.get("type") == "PodScheduled" and c.get("status") == "True"
    ]
    started = [
        _time(s.get("state", {}).get("running", {}).get("startedAt"))
        for p in ray_pods
        for s in p.get("status", {}).get("containerStatuses", [])
        if s.get("name", "").startswith("ray-")
    ]
    ready = [
        _time(c.get("lastTransitionTime"))
        for c in ray_service.get("status", {}).get("conditions", [])
        if c.get("type") == "Ready" and c.get("status") == "True"
    ]

    def since(moments: list[float | None], every: int | None = None) -> float | None:
        known = [m for m in moments if m is not None]
        if start is None or not known or (every is not None and len(known) < every):
            return None
        return round(max(known) - start, 1)

    return {
        "cloudformation_done": since([cloudformation_done]),
        "ray_pods_scheduled": since(scheduled, len(ray_pods) or None),
        "image_present": since(started, len(ray_pods) or None),  # a container runs only once its image is on the node
        "model_loaded": since(ready),
        "first_token": since([first_token]),
    }


def _completion(settings: Settings, kubectl: Kubectl) -> tuple[dict[str, Any] | None, str]:
    """One chat completion from the head pod (a Ray pod, so the NetworkPolicies let it reach Serve)."""
    return _chat(settings, kubectl, {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 16})


def _chat(settings: Settings, kubectl: Kubectl, request: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """One chat request (the model added) sent from the head pod; its answer, or why there is none."""
    head = kubectl(
        [
            "get",
            "pods",
            "-n",
            settings.namespace,
            "-l",
            selector(NODE_TYPE_LABEL, "head"),
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ]
    )
    if head.returncode != 0 or not head.stdout.strip():
        return None, "no head pod"
    body = json.dumps({"model": settings.model_id, **request})
    # SERVE_API_KEYS=on: the pod's own key file (the CSI mount), read inside the pod: no key leaves it.
    auth = (
        f"headers['Authorization'] = 'Bearer ' + next(iter(json.load(open('{API_KEYS_DIR}/{KEYS_FILE}')).values())); "
        if settings.serve_endpoint.api_keys
        else ""
    )
    script = (
        "import json, sys, urllib.request; headers = {'Content-Type': 'application/json'}; "
        + auth
        + f"req = urllib.request.Request('http://127.0.0.1:{SERVE_PORT}/v1/chat/completions',"
        " data=sys.argv[1].encode(), headers=headers); print(urllib.request.urlopen(req,"
        f" timeout={COMPLETION_TIMEOUT_S}).read().decode())"
    )
    got = kubectl(
        [
            "exec",
            "-n",
            settings.namespace,
            head.stdout.strip(),
            "-c",
            HEAD_CONTAINER,
            "--",
            "python",
            "-c",
            script,
            body,
        ]
    )
    if got.returncode != 0:
        return None, got.stderr.strip()[-300:]
    try:
        return json.loads(got.stdout), ""
    except json.JSONDecodeError:
        return None, got.stdout.strip()[:300]


def _probe_endpoint(settings: Settings, kubectl: Kubectl) -> Probe:
    import boto3

    host = load_balancer_host(settings, kubectl)
    if not host:
        return Probe(
            0, 0, "", "the Ingress has no load balancer address (the controller's events: kubectl describe ingress)"
        )
    # Over HTTPS without SERVE_HOSTNAME the certificate cannot tell the load balancer from any other server with a
    # trusted certificate (the name check is off): the real key is not sent there, only the refusal is checked.
    endpoint = settings.serve_endpoint
    key = None if endpoint.https and not endpoint.hostname else read_key(settings, boto3.session.Session())
    return probe(base_url(settings, host), settings.model_id, key, context=tls_context(settings))


def verify(
    settings: Settings,
    kubectl: Kubectl,
    *,
    timeout_s: int,
    start: float | None,
    cloudformation_done: float | None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    collectors: Callable[[], tuple[list[dict[str, Any]] | None, str]] | None = None,
    endpoint_probe: Callable[[], Probe] | None = None,
    promql: Callable[[str], tuple[list[dict[str, Any]] | None, str]] | None = None,
    metrics_wait_s: int = METRICS_WAIT_S,
) -> Result:
    result = Result()
    ns, name = settings.namespace, settings.ray_service_name
    began = clock()
    last = ""
    while True:  # 1. the RayService, Ready for this generation
        obj = _json(kubectl, ["get", "rayservice", "-n", ns, name])
        ready, said = ray_service_verdict(obj) if obj else (False, f"RayService {ns}/{name} not found")
        waited = int(clock() - began)
        if said != last:
            print(f"[{waited // 60:02d}:{waited % 60:02d}] waiting for RayService {ns}/{name}: {said}", flush=True)
            last = said
        if ready or waited >= timeout_s:
            break
        sleep(15)
    result.steps.append(Step("rayservice", ready, said, "" if ready else describe_rayservice(settings)))

    nodes = _json(kubectl, ["get", "nodes", "-l", f"role={GPU_NODE_LABELS['role']}"]) or {}
    result.steps.append(check_gpu_nodes(settings, nodes))

    pods = _json(kubectl, ["get", "pods", "-n", ns]) or {}
    workers = [
        p["metadata"]["name"]
        for p in pods.get("items", [])
        if p["metadata"].get("labels", {}).get(NODE_TYPE_LABEL) == "worker"
    ]
    backends = worker_backends(settings, kubectl, workers)
    result.steps.append(check_nixl(settings, backends))

    if settings.gcs_redis:
        heads = [p for p in pods.get("items", []) if p["metadata"].get("labels", {}).get(NODE_TYPE_LABEL) == "head"]
        line = ""
        if heads:
            logs = kubectl(
                [
                    "exec",
                    "-n",
                    ns,
                    heads[0]["metadata"]["name"],
                    "-c",
                    HEAD_CONTAINER,
                    "--",
                    "sh",
                    "-c",
                    f"grep -m1 '{GCS_STORAGE_LINE}' /tmp/ray/session_latest/logs/gcs_server.out",
                ]
            )
            line = logs.stdout.strip()
        result.steps.append(check_gcs_store(settings, heads[0] if heads else None, line))

    # The KV path and the decode engines' transfers, read before and after the completion: what changed is its own.
    watch = KvWatch(settings, kubectl, pods, workers, ready=ready)
    answer, error = _completion(settings, kubectl) if ready else (None, NOT_READY)
    first_token = clock() if answer else None
    result.steps.append(check_completion(settings, answer, error))
    result.steps += watch.steps(sleep=sleep)
    result.kv = watch.report
    # What agent frameworks send: a tool call and a strict JSON schema, each held to its schema.
    for check, request in ((check_tool_call, TOOL_REQUEST), (check_strict_json, JSON_REQUEST)):
        answer, error = _chat(settings, kubectl, request) if ready else (None, NOT_READY)
        result.steps.append(check(settings, answer, error))
    if settings.serve_endpoint.exposed:
        got = (
            (endpoint_probe or (lambda: _probe_endpoint(settings, kubectl)))() if ready else Probe(0, 0, "", NOT_READY)
        )
        result.steps.append(check_endpoint(settings, got))
    if settings.observability:
        scrapers, why = (collectors or (lambda: list_collectors(settings)))()
        step = check_metrics_collector(settings, scrapers, why)
        if step.ok:
            ask = promql or (lambda query: ask_cloudwatch(settings, query))
            asked = clock()
            while True:
                series, why = ask(engine_series_query(settings))
                step = check_engine_series(settings, series, why)
                if step.ok or series is None or clock() - asked >= metrics_wait_s:
                    break
                sleep(30)
        result.steps.append(step)
    result.phases = phases(start, cloudformation_done, pods, obj or {}, first_token)
    return result


def table(result: Result) -> str:
    lines = [f"{'STEP':<12} {'RESULT':<6} DETAIL"] + [
        f"{s.name:<12} {'PASS' if s.ok else 'FAIL':<6} {s.detail}" for s in result.steps
    ]
    lines += ["", f"{'PHASE':<20} SINCE make deploy"]
    lines += [
        f"{phase:<20} {'-' if seconds is None else f'{int(seconds) // 60}m{int(seconds) % 60:02d}s'}"
        for phase, seconds in result.phases.items()
    ]
    lines += [f"look closer: {s.name}: {s.look_closer}" for s in result.steps if not s.ok]
    return "\n".join(lines)


def _stamp(path: Path) -> float | None:
    return _time(path.read_text().strip()) if path.exists() else None


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--timeout",
        default=os.environ.get("VERIFY_TIMEOUT", "45m"),
        help="how long to wait for the RayService (e.g. 45m)",
    )
    parser.add_argument("--result", type=Path, default=Path(os.environ.get("VERIFY_RESULT", "verify-result.json")))
    args = parser.parse_args(argv)

    settings = project_settings()
    timeout_s = duration_seconds(args.timeout)
    try:
        with cluster_kubectl(settings.region, settings.cluster_name) as kubectl:
            result = verify(
                settings,
                kubectl,
                timeout_s=timeout_s,
                start=_stamp(DEPLOY_STARTED),
                cloudformation_done=_stamp(CLOUDFORMATION_DONE),
            )
    except ClusterUnreachable as error:
        print(f"error: cannot reach cluster {settings.cluster_name} in {settings.region}: {error}", file=sys.stderr)
        return 2
    print(table(result))
    args.result.write_text(
        json.dumps(
            {
                "ok": result.ok,
                "steps": [asdict(s) for s in result.steps],
                "phases_seconds": result.phases,
                **result.kv,
            },
            indent=2,
        )
        + "\n"
    )
    failed = [s.name for s in result.steps if not s.ok]
    if failed:
        print(f"error: verification failed at {', '.join(failed)} (see `look closer` above)", file=sys.stderr)
        return 1
    print(
        f"verified: {settings.ray_service_name} serves {settings.model_id}, KV cache over {settings.nixl_backend}"
        f"{' (EFA)' if settings.kv_over_efa else ''}; result in"
        f" {args.result}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
