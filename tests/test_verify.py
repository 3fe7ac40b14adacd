"""`make verify`'s decisions on recorded objects of the real shape, each verdict and the exit code."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from settings.context_files import REPO
from tests.conftest import settings_for
from tools import verify as gate

SETTINGS = settings_for()
T0 = "2026-11-29T10:00:00Z"


def _node(name: str, gpu: int, efa: int | None) -> dict[str, Any]:
    allocatable = {"cpu": "31", "nvidia.com/gpu": str(gpu)}
    if efa is not None:
        allocatable["vpc.amazonaws.com/efa"] = str(efa)
    return {"metadata": {"name": name}, "status": {"allocatable": allocatable}}


def _pod(name: str, kind: str, scheduled: str, started: str | None) -> dict[str, Any]:
    container = {
        "name": f"ray-{kind}",
        "state": {"running": {"startedAt": started}} if started else {"waiting": {"reason": "ContainerCreating"}},
    }
    return {
        "metadata": {
            "name": name,
            "labels": {"ray.io/is-ray-node": "yes", "ray.io/node-type": kind, "ray.io/group": name.split("-")[0]},
        },
        "status": {
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}],
            "containerStatuses": [container],
        },
    }


def _ray_service(ready: bool) -> dict[str, Any]:
    condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "NonZeroServeEndpoints" if ready else "Initializing",
        "lastTransitionTime": "2026-11-29T10:26:00Z",
    }
    apps = {"qwen": {"status": "RUNNING" if ready else "DEPLOYING"}}
    return {
        "metadata": {"name": "ray-llm", "generation": 1},
        "status": {
            "observedGeneration": 1,
            "conditions": [condition],
            "activeServiceStatus": {"applicationStatuses": apps},
        },
    }


PODS = {
    "items": [
        _pod("head", "head", "2026-11-29T10:21:00Z", "2026-11-29T10:22:30Z"),
        _pod("prefill-0", "worker", "2026-11-29T10:21:10Z", "2026-11-29T10:23:00Z"),
        _pod("decode-0", "worker", "2026-11-29T10:21:20Z", "2026-11-29T10:23:30Z"),
    ]
}
LIBFABRIC = "Backend LIBFABRIC was instantiated\n"
# libfabric's and NIXL's lines, rendered from their format strings at the image's versions with each one's own prefix
# (k8s_constructs/kv_path.py names the sources): not recorded on an EFA node, where none has been run yet.
NO_GPUDIRECT = (
    "libfabric:812:1765000000::efa:core:efa_hmem_info_check_p2p_support_cuda():179<warn> Failed to register CUDA"
    " buffer with the EFA device, FI_HMEM transfers that require peer to peer support will fail.\n"
)
HMEM_RAIL = "I1206 01:41:07.379550   16794 libfabric_rail.cpp:461] Using provider with FI_HMEM support for rail 0\n"
TCP_RAILS = "I1206 01:41:07.379550   16794 libfabric_topology.cpp:136] Discovered 1 tcp devices (TCP fallback)\n"
FI_READ_FAILED = (
    "E1206 01:42:11.102934   16990 libfabric_rail.cpp:1277] fi_read failed on rail 0: Resource temporarily"
    " unavailable\n"
)
BOUNCED = LIBFABRIC + NO_GPUDIRECT + HMEM_RAIL
ANSWER = {"choices": [{"message": {"role": "assistant", "content": "Hello there, how are you?"}}]}
TOOL_ANSWER = {
    "choices": [
        {
            "message": {
                "content": None,
                "tool_calls": [{"function": {"name": "get_weather", "arguments": '{"city": "Lima"}'}}],
            }
        }
    ]
}
JSON_ANSWER = {"choices": [{"message": {"content": '{"city": "Lima", "sunny": true}'}}]}
# Ray 2.58's metrics agent after two NIXL transfers (tests/data/ray_nixl_metrics_recorder.py recorded it).
RECORDED_METRICS = (REPO / "tests" / "data" / "ray-2.58-nixl-metrics.txt").read_text()


class Cluster:
    """kubectl answers from recorded objects."""

    def __init__(
        self,
        *,
        ray_service: dict[str, Any],
        nodes: list[dict[str, Any]],
        logs: dict[str, str],
        answer: dict[str, Any] | None,
        metrics: tuple[str, ...] = ("", RECORDED_METRICS),
        tool_answer: dict[str, Any] | None = TOOL_ANSWER,
        json_answer: dict[str, Any] | None = JSON_ANSWER,
    ) -> None:
        self.ray_service, self.nodes, self.logs, self.answer = ray_service, nodes, logs, answer
        self.tool_answer, self.json_answer = tool_answer, json_answer
        self.metrics, self.metric_reads = metrics, 0  # the decode worker's metrics: before, then after, the completion

    def __call__(self, args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        def out(value: Any) -> subprocess.CompletedProcess[str]:
            return subprocess.CompletedProcess(args, 0, value if isinstance(value, str) else json.dumps(value), "")

        if args[:2] == ["get", "rayservice"]:
            return out(self.ray_service)
        if args[:2] == ["get", "nodes"]:
            return out({"items": self.nodes})
        if args[:2] == ["get", "pods"] and "-l" in args:
            return out("head")
        if args[:2] == ["get", "pods"]:
            return out(PODS)
        if args[0] == "exec" and "ray-worker" in args and args[-2:-1] == ["-c"] and "/metrics" in args[-1]:
            assert args[3] == "decode-0", args  # the decode group's pods only
            self.metric_reads += 1
            return out(self.metrics[min(self.metric_reads, len(self.metrics)) - 1])
        if args[0] == "exec" and "ray-worker" in args:
            return out(self.logs[args[3]])
        if args[0] == "exec" and "ray-head" in args:
            request = json.loads(args[-1])
            answer = (
                self.tool_answer
                if "tools" in request
                else self.json_answer
                if "response_format" in request
                else self.answer
            )
            return (
                out(answer)
                if answer
                else subprocess.CompletedProcess(args, 1, "", "urllib.error.HTTPError: HTTP Error 503")
            )
        raise AssertionError(args)


# A working deploy's cluster: each test changes what it is about.
WORKING: dict[str, Any] = {
    "ray_service": _ray_service(True),
    "nodes": [_node("a", 1, 1), _node("b", 1, 1)],
    "logs": {"prefill-0": LIBFABRIC, "decode-0": LIBFABRIC},
    "answer": ANSWER,
}


def _run(cluster: Cluster | None = None, sleep: Any = lambda s: None, **kwargs: Any) -> gate.Result:
    start = gate._time(T0)
    return gate.verify(
        SETTINGS,
        cluster or Cluster(**{**WORKING, **kwargs}),
        timeout_s=0,
        start=start,
        cloudformation_done=gate._time("2026-11-29T10:20:00Z"),
        clock=lambda: start + 27 * 60,
        sleep=sleep,
    )


def test_a_working_deploy_passes_and_reports_its_phases() -> None:
    result = _run()
    names = ["rayservice", "gpu-nodes", "nixl", "completion", "kv-path", "transfer", "tool-call", "strict-json"]
    assert result.ok and [s.name for s in result.steps] == names
    assert result.phases == {
        "cloudformation_done": 1200.0,
        "ray_pods_scheduled": 1280.0,
        "image_present": 1410.0,
        "model_loaded": 1560.0,
        "first_token": 1620.0,
    }
    assert "first_token          27m00s" in gate.table(result)


@pytest.mark.parametrize(
    ("kwargs", "failed", "fragment"),
    [
        (
            {"ray_service": _ray_service(False)},
            {"rayservice", "completion", "kv-path", "transfer", "tool-call", "strict-json"},
            "Ready=False (Initializing); qwen DEPLOYING",
        ),
        ({"nodes": [_node("a", 1, 1), _node("b", 1, None)]}, {"gpu-nodes"}, "b has 1 GPU / 0 EFA"),
        ({"nodes": [_node("a", 1, 1)]}, {"gpu-nodes"}, "1 of 2 GPU node(s)"),
        ({"logs": {"prefill-0": LIBFABRIC, "decode-0": "Backend UCX was instantiated\n"}}, {"nixl"}, "decode-0: UCX"),
        ({"logs": {"prefill-0": LIBFABRIC, "decode-0": ""}}, {"nixl"}, "decode-0: none"),
        # g6/g6e have no GPUDirect RDMA: libfabric may refuse to register the KV cache's GPU memory.
        (
            {"logs": {"prefill-0": LIBFABRIC + "libfabric:efa:mr: fi_mr_reg failed: -22\n", "decode-0": LIBFABRIC}},
            {"nixl"},
            "prefill-0: LIBFABRIC, GPU memory registration failed (fi_mr_reg failed)",
        ),
        (
            {
                "logs": {
                    "prefill-0": LIBFABRIC,
                    "decode-0": LIBFABRIC + "nixl_libfabric: Unable to register MR for VRAM\n",
                }
            },
            {"nixl"},
            "decode-0: LIBFABRIC, GPU memory registration failed (Unable to register MR)",
        ),
        # The KV path: TCP fails kv-path and names ucx (a failure during the completion: below).
        ({"logs": {"prefill-0": LIBFABRIC + TCP_RAILS, "decode-0": BOUNCED}}, {"kv-path"}, "prefill-0: TCP"),
        ({"answer": None}, {"completion"}, "HTTP Error 503"),
        ({"answer": {"choices": [{"message": {"content": "  "}}]}}, {"completion"}, "no answer"),
        ({"tool_answer": None}, {"tool-call"}, "HTTP Error 503"),
        ({"json_answer": None}, {"strict-json"}, "HTTP Error 503"),
    ],
)
def test_each_failure_names_its_step_and_the_command_to_look_closer(
    kwargs: dict[str, Any], failed: set[str], fragment: str
) -> None:
    result = _run(**kwargs)
    assert not result.ok
    assert {s.name for s in result.steps if not s.ok} == failed
    assert any(fragment in s.detail for s in result.steps)
    assert all(s.look_closer for s in result.steps if not s.ok)
    if failed & {"kv-path", "completion"}:  # a stalled or failed transfer: the other transport, and what to collect
        advice = next(s.look_closer for s in result.steps if s.name in failed & {"kv-path", "completion"})
        assert "try KV_TRANSPORT=ucx" in advice and "for a bug report collect `kubectl logs" in advice


OBSERVED = settings_for({"OBSERVABILITY": "on"})


def _collector(status: str, reason: str = "") -> dict[str, Any]:
    """A ListScrapers entry of the real shape (AMP API ScraperSummary)."""
    return {
        "alias": OBSERVED.metrics_collector_alias,
        "scraperId": "s-0123abcd",
        "status": {"statusCode": status},
        **({"statusReason": reason} if reason else {}),
    }


def _engines(*phases: str) -> list[dict[str, Any]]:
    """What CloudWatch answers to `count by (ray_group) (...)`: one sample per phase."""
    return [{"metric": {"ray_group": phase}, "value": [1780000000.0, "1"]} for phase in phases]


def _observed(collectors: tuple[Any, str], promql: Any = None, **kwargs: Any) -> gate.Result:
    start = gate._time(T0)
    cluster = Cluster(
        ray_service=_ray_service(True),
        nodes=[_node("a", 1, 1), _node("b", 1, 1)],
        logs={"prefill-0": LIBFABRIC, "decode-0": LIBFABRIC},
        answer=ANSWER,
    )
    kwargs.setdefault("clock", lambda: start)
    return gate.verify(
        OBSERVED,
        cluster,
        timeout_s=0,
        start=start,
        cloudformation_done=None,
        sleep=lambda s: None,
        collectors=lambda: collectors,
        promql=promql or (lambda query: (_engines("decode", "headgroup", "prefill"), "")),
        **kwargs,
    )


@pytest.mark.parametrize(
    ("answer", "ok", "fragment"),
    [
        (
            ([_collector("ACTIVE")], ""),
            True,
            "collector ACTIVE; ray_vllm_num_requests_running arriving from decode, headgroup, prefill",
        ),
        (([_collector("CREATING")], ""), False, "CREATING"),
        (
            ([_collector("CREATION_FAILED", "The subnets must be in at least two Availability Zones")], ""),
            False,
            "two Availability Zones",
        ),
        (([], ""), False, "no metrics collector ray-llm-multinode-ray"),
        (([_collector("DELETING")], ""), False, "no metrics collector ray-llm-multinode-ray"),
        (([_collector("DELETING"), _collector("ACTIVE")], ""), True, "collector ACTIVE;"),  # replaced by CloudFormation
        ((None, "AccessDeniedException: not authorized to perform aps:ListScrapers"), False, "cannot list"),
    ],
)
def test_with_observability_the_collector_must_be_active(answer: tuple[Any, str], ok: bool, fragment: str) -> None:
    result = _observed(answer)
    (metrics,) = [s for s in result.steps if s.name == "metrics"]
    assert (result.ok, metrics.ok) == (ok, ok) and fragment in metrics.detail
    assert ok or metrics.look_closer.startswith("aws amp list-scrapers")


def test_the_engines_series_are_awaited_then_judged() -> None:
    """The query asks this cluster's engines per phase; a phase missing after the wait fails the step."""
    asked: list[str] = []
    answers = iter([_engines(), _engines("prefill"), _engines("prefill")])
    now = [0.0]

    def promql(query: str) -> tuple[list[dict[str, Any]] | None, str]:
        asked.append(query)
        now[0] += 61
        return next(answers), ""

    result = _observed(([_collector("ACTIVE")], ""), promql, clock=lambda: now[0], metrics_wait_s=150)
    (metrics,) = [s for s in result.steps if s.name == "metrics"]
    assert asked == ['count by (ray_group) (ray_vllm_num_requests_running{eks_cluster="ray-llm-multinode"})'] * 3
    assert not metrics.ok and metrics.detail.endswith(
        "no ray_vllm_num_requests_running series from decode in CloudWatch"
    )
    assert "Query Studio" in metrics.look_closer
    import promql_parser

    promql_parser.parse(asked[0])  # Prometheus's grammar


def test_promql_refused_fails_at_once() -> None:
    calls = []

    def promql(query: str) -> tuple[list[dict[str, Any]] | None, str]:
        calls.append(query)
        return None, "HTTP 403: AccessDenied"

    (metrics,) = [s for s in _observed(([_collector("ACTIVE")], ""), promql).steps if s.name == "metrics"]
    assert len(calls) == 1 and not metrics.ok and "PromQL did not answer: HTTP 403" in metrics.detail


def test_the_collector_is_listed_by_its_alias() -> None:
    import boto3
    from botocore.stub import Stubber  # type: ignore[import-untyped]

    client = boto3.session.Session().client(
        "amp", region_name=OBSERVED.region, aws_access_key_id="x", aws_secret_access_key="x"
    )
    stub = Stubber(client)
    stub.add_response("list_scrapers", {"scrapers": []}, {"filters": {"alias": [OBSERVED.metrics_collector_alias]}})
    with stub:
        assert gate.list_collectors(OBSERVED, client) == ([], "")
    stub.add_client_error("list_scrapers", service_error_code="AccessDeniedException", service_message="no")
    with stub:
        scrapers, why = gate.list_collectors(OBSERVED, client)
    assert scrapers is None and "AccessDeniedException" in why


def test_no_cluster_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no aws, no kubectl
    assert gate.main(["--result", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: cannot reach cluster ray-llm-multinode in sa-east-1")


def test_a_bad_setting_is_one_line_and_exit_2_in_every_tool(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tools import bench_serving, cluster, teardown

    monkeypatch.setenv("GPU_NODE_COUNT", "3")
    for main, argv in (
        (gate.main, []),
        (cluster.main, ["status"]),
        (teardown.main, ["after"]),
        (bench_serving.main, []),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: GPU_NODE_COUNT='3' is not allowed"), err


def test_the_docs_show_the_query_verify_asks() -> None:
    from tests.conftest import REPO

    query = gate.engine_series_query(OBSERVED).replace(OBSERVED.cluster_name, "CLUSTER_NAME")
    assert f"`{query}`" in (REPO / "docs" / "verify.md").read_text()


def test_the_worker_log_search_finds_the_backend_and_a_failed_registration(tmp_path: Path) -> None:
    """The command `make verify` runs in each worker, run here by a real `sh` and `grep` over Ray-style logs:
    it must bring back the backend line and libfabric's memory-registration failures, and nothing else."""
    from tools.cluster import worker_backends

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "worker-1.err").write_text(
        "INFO nixl: Backend LIBFABRIC was instantiated\nlibfabric:1234:efa:mr:efa_mr_reg_impl(): fi_mr_reg failed:"
        " -22\nsome other line\n"
    )
    (logs / "worker-2.out").write_text("nixl_libfabric_backend: Unable to register MR for VRAM buffer\n")

    def kubectl(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        assert args[:2] == ["exec", "-n"] and args[-3:-1] == ["sh", "-c"]
        script = args[-1].replace("/tmp/ray/session_latest/logs/", f"{logs}/")
        return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)

    backends = worker_backends(settings_for(), kubectl, ["prefill-0"])
    assert backends == {
        "prefill-0": "LIBFABRIC, GPU memory registration failed (Unable to register MR; fi_mr_reg failed)"
    }
