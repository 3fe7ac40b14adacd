"""After the deploy, with the endpoint beyond the cluster: `make verify`'s call through the load balancer (against a
local HTTP server that enforces a key as the auth ingress does), its in-pod completion with the pod's own key, the
benchmark Job's key, and what `make endpoint` / `make api-key` print (never a key)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import yaml

from tests.conftest import ENDPOINT, settings_for
from tests.loopback import answer_json
from tests.test_verify import ANSWER, Cluster, _node, _ray_service
from tools import verify as gate
from tools.endpoint import NOT_SENT, Probe, api_key_howto, base_url, probe, sdk_example

KEY = "k-0123456789abcdef0123456789abcdef"


class _Ingress(BaseHTTPRequestHandler):
    """401 with OpenAI's error body without the key, an answer with it."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        ok = self.headers.get("Authorization") == f"Bearer {KEY}"
        body = (
            ANSWER
            if ok
            else {
                "error": {
                    "message": "Missing or invalid API key",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            }
        )
        answer_json(self, body, 200 if ok else 401)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def ingress() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ingress)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_the_probe_sees_401_without_a_key_and_an_answer_with_it(ingress: str) -> None:
    got = probe(ingress, "qwen3.5-9b", KEY, timeout=10)
    assert got == Probe(401, 200, "Hello there, how are you?") and got.ok
    wrong = probe(ingress, "qwen3.5-9b", "k-wrong", timeout=10)
    assert (wrong.without_key, wrong.with_key, wrong.ok) == (401, 401, False)
    unreachable = probe("http://127.0.0.1:9", "qwen3.5-9b", KEY, timeout=5)
    assert not unreachable.ok and unreachable.error.startswith("cannot reach http://127.0.0.1:9")
    # Not identified by a certificate (HTTPS without SERVE_HOSTNAME): only the refusal is checked, the key stays home.
    unsent = probe(ingress, "qwen3.5-9b", None, timeout=10)
    assert unsent == Probe(401, NOT_SENT, "") and unsent.ok


def test_verify_sends_no_key_to_a_load_balancer_its_certificate_cannot_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from tools import verify

    sent: list[str | None] = []
    monkeypatch.setattr(verify, "load_balancer_host", lambda settings, kubectl: "internal-lb.example")
    monkeypatch.setattr(verify, "read_key", lambda settings, session: "sk-real")
    monkeypatch.setattr(verify, "probe", lambda url, model, key, **_: sent.append(key) or Probe(401, NOT_SENT, ""))
    verify._probe_endpoint(settings_for({**ENDPOINT, "SERVE_HOSTNAME": "", "SERVE_HOSTED_ZONE_ID": ""}), None)  # type: ignore[arg-type]
    verify._probe_endpoint(settings_for(ENDPOINT), None)  # type: ignore[arg-type]
    assert sent == [None, "sk-real"]


def _exposed_run(endpoint_probe: Any) -> gate.Result:
    settings = settings_for(ENDPOINT)
    cluster = Cluster(
        ray_service=_ray_service(True),
        nodes=[_node("a", 1, 1), _node("b", 1, 1)],
        logs={"prefill-0": "", "decode-0": ""},
        answer=ANSWER,
    )
    calls: list[list[str]] = []

    def recording(args: list[str], stdin: str | None = None) -> Any:
        calls.append(args)
        return cluster(args, stdin)

    result = gate.verify(
        settings,
        recording,
        timeout_s=0,
        start=None,
        cloudformation_done=None,
        endpoint_probe=endpoint_probe,
        sleep=lambda s: None,
    )
    # The completion's exec first; the tool-call and strict-json requests reuse its script.
    exec_call = next(c for c in calls if c[0] == "exec" and "ray-head" in c)
    recording_script = exec_call[exec_call.index("-c", exec_call.index("--")) + 1]
    result.steps.append(gate.Step("script", True, recording_script))
    return result


def test_verify_calls_the_endpoint_and_the_in_cluster_completion_uses_the_pods_own_key() -> None:
    result = _exposed_run(lambda: Probe(401, 200, "Hello"))
    steps = {s.name: s for s in result.steps}
    assert steps["endpoint"].ok and "without a key 401, with one 200" in steps["endpoint"].detail
    script = steps["script"].detail
    assert "/mnt/serve-api-keys/api-keys.json" in script and "Authorization" in script  # read inside the pod
    failing = {s.name: s for s in _exposed_run(lambda: Probe(200, 200, "Hello")).steps}["endpoint"]
    assert not failing.ok and failing.look_closer == "kubectl describe ingress -n inference ray-llm-serve-internal"


def test_the_url_the_sdk_example_and_the_key_command_name_no_key() -> None:
    settings = settings_for(ENDPOINT)
    assert base_url(settings, "internal-k8s-x.sa-east-1.elb.amazonaws.com") == "https://llm.example.com"
    plain = settings_for({"SERVE_EXPOSURE": "internal", "SERVE_CERTIFICATE_ARN": "none"})
    assert (
        base_url(plain, "internal-k8s-x.sa-east-1.elb.amazonaws.com")
        == "http://internal-k8s-x.sa-east-1.elb.amazonaws.com"
    )
    example = sdk_example("https://llm.example.com", settings)
    assert 'base_url="https://llm.example.com/v1"' in example and 'os.environ["OPENAI_API_KEY"]' in example
    command = api_key_howto(settings, "arn:aws:secretsmanager:sa-east-1:123456789012:secret:ApiKeys-AbCdEf")
    assert (
        command.startswith("aws secretsmanager get-secret-value --region sa-east-1 --secret-id arn:aws:secretsmanager:")
        and '["default"]' in command
    )


def test_the_benchmark_job_takes_the_key_from_a_secret_of_the_run() -> None:
    import cdk8s

    from k8s_constructs.bench_job import BenchJobChart
    from tools.bench_serving import bench_props

    props = bench_props(settings_for(ENDPOINT))
    (job,) = yaml.safe_load_all(cdk8s.App.of(BenchJobChart(cdk8s.App(), "bench", props=props)).synth_yaml())
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["OPENAI_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "ray-llm-bench-api-key", "key": "key"}}
    assert "OPENAI_API_KEY" not in {e["name"] for e in _default_job_env()}


def _default_job_env() -> list[dict[str, Any]]:
    import cdk8s

    from k8s_constructs.bench_job import BenchJobChart
    from tools.bench_serving import bench_props

    (job,) = yaml.safe_load_all(
        cdk8s.App.of(BenchJobChart(cdk8s.App(), "bench", props=bench_props(settings_for()))).synth_yaml()
    )
    env: list[dict[str, Any]] = job["spec"]["template"]["spec"]["containers"][0]["env"]
    return env


def test_the_benchmark_goes_through_the_internal_load_balancer_where_its_certificate_allows() -> None:
    """The path applications take (issue 27.8): by SERVE_HOSTNAME over HTTPS; the load balancer's DNS name over plain
    HTTP; otherwise the Serve service inside the cluster, with the reason said."""
    from tools.bench_serving import bench_base_url, bench_props

    lb = "internal-k8s-inferenc-abc.sa-east-1.elb.amazonaws.com"
    assert bench_base_url(settings_for(ENDPOINT), lb) == ("https://llm.example.com", "")
    assert bench_props(settings_for(ENDPOINT), lb).base_url == "https://llm.example.com"
    plain = {"SERVE_EXPOSURE": "internal", "SERVE_CERTIFICATE_ARN": "none"}
    assert bench_base_url(settings_for(plain), lb) == (f"http://{lb}", "")
    in_cluster = "http://ray-llm-serve-svc.inference.svc.cluster.local:8000"
    url, why = bench_base_url(settings_for(plain), "")
    assert (url, "no load balancer address yet" in why) == (in_cluster, True)
    url, why = bench_base_url(settings_for({**ENDPOINT, "SERVE_HOSTNAME": "", "SERVE_HOSTED_ZONE_ID": ""}), lb)
    assert url == in_cluster and "set SERVE_HOSTNAME" in why
    public = {**ENDPOINT, "SERVE_EXPOSURE": "internet-facing", "SERVE_ALLOWED_CIDRS": "203.0.113.0/24"}
    url, why = bench_base_url(settings_for(public), lb)
    assert url == in_cluster and "internet-facing" in why
    assert bench_base_url(settings_for(), lb) == (in_cluster, "")
