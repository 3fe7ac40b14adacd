"""The plan `make synth` ends with (tools/plan.py) and the hourly cost it states (settings/list_prices.py)."""

from __future__ import annotations

import json

import pytest

from settings.list_prices import PRICES_FILE, hourly_cost
from tests.conftest import CERTIFICATE_ARN, settings_for
from tools import plan

PRICES = json.loads(PRICES_FILE.read_text())["regions"]["us-east-1"]


def _text(env: dict[str, str] | None = None) -> str:
    return "\n".join(plan.plan_lines(settings_for(env)))


def test_the_plan_names_the_nodes_the_model_the_endpoint_the_cost_and_the_next_command() -> None:
    settings = settings_for()
    text = _text()
    running = 2 * PRICES["g6.8xlarge"] + PRICES["m7i.xlarge"] + PRICES["eks-cluster"] + PRICES["nat-gateway"]
    assert f"2 x {settings.gpu_node.name} (1 L4 each)" in text
    assert f"served as {settings.model_id!r}" in text
    assert f"Service {settings.ray_service_name}-serve-svc.{settings.namespace}:8000" in text
    assert f"~${running:.2f}/hour running" in text and f"~${running - 2 * PRICES['g6.8xlarge']:.2f}/hour parked" in text
    assert text.splitlines()[-1].startswith("  next: `make deploy`")


def test_a_region_the_table_lacks_is_priced_as_us_east_and_says_so() -> None:
    assert "the table has none for sa-east-1" in _text({"REGION": "sa-east-1", "GPU_AZ": "sa-east-1a"})
    assert "us-east-1 list prices read" in _text({"REGION": "us-east-1", "GPU_AZ": "us-east-1a"})
    assert hourly_cost(settings_for({"REGION": "us-east-2", "GPU_AZ": "us-east-2a"})).region == "us-east-2"


def test_a_type_the_table_lacks_is_named_not_guessed() -> None:
    cost = hourly_cost(settings_for({"GPU_NODE_TYPE": "p5.48xlarge"}))
    assert cost.missing == ("p5.48xlarge",)
    assert "not in the table: p5.48xlarge" in _text({"GPU_NODE_TYPE": "p5.48xlarge"})


def test_idle_gpus_of_a_phase_are_counted() -> None:
    text = _text({"GPU_NODE_TYPE": "g6e.12xlarge", "TENSOR_PARALLEL_SIZE": "1"})
    assert "prefill 1 engine(s) of 1 GPU(s) on 1 node(s): 1 of 4 GPU(s) (3 idle)" in text


def test_parked_with_autoscaling_plans_no_gpu_node_and_prices_the_maxima_running() -> None:
    parked = _text({"GPU_NODE_COUNT": "0", "DECODE_MAX_REPLICAS": "3"})
    assert "GPU nodes: none (parked: GPU_NODE_COUNT=0)" in parked and "unset GPU_NODE_COUNT to unpark" in parked
    assert "decode 1 engine(s) of 1 GPU(s) once unparked: none runs parked" in parked and " idle" not in parked
    cost = hourly_cost(settings_for({"DECODE_MAX_REPLICAS": "3"}))
    assert cost.running_max == pytest.approx(cost.running + 2 * PRICES["g6.8xlarge"])


def test_make_plan_says_a_bad_setting_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPU_NODE_TYPE", "g6.9xlarge")
    assert plan.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: GPU_NODE_TYPE='g6.9xlarge'") and err.count("\n") == 1, err


def test_an_exposed_endpoint_is_its_url_with_the_protocol() -> None:
    https = {
        "SERVE_EXPOSURE": "internal",
        "SERVE_CERTIFICATE_ARN": CERTIFICATE_ARN,
        "SERVE_HOSTNAME": "llm.example.com",
        "SERVE_HOSTED_ZONE_ID": "Z0123456789ABCDEFGHIJ",
    }
    assert "internal load balancer, https://llm.example.com/v1" in _text(https)
    plain = _text({"SERVE_EXPOSURE": "internal", "SERVE_CERTIFICATE_ARN": "none"})
    assert "internal load balancer, http on the DNS name `make endpoint` prints" in plain


def test_the_plan_states_the_parking_schedule() -> None:
    assert "parking: the park workflow parks daily at 02:00 UTC, no scheduled unpark (UNPARK_AT empty)" in _text(
        {"PARK_AT": "02:00", "UNPARK_AT": "", "PARK_TIME_ZONE": "UTC"}
    )
    text = _text({"PARK_AT": "", "UNPARK_AT": "07:00", "UNPARK_DAYS": "sat,mon-wed", "PARK_TIME_ZONE": "Asia/Tokyo"})
    assert "no scheduled park (PARK_AT empty), unparks at 07:00 Asia/Tokyo on mon,tue,wed,sat" in text


def test_the_gcs_store_is_named_as_not_priced() -> None:
    assert "not data, storage or logs" in _text({"GCS_FAULT_TOLERANCE": "off"})
    text = _text({"GCS_FAULT_TOLERANCE": "redis", "GCS_STORE_NODE_TYPE": "cache.t4g.small"})
    assert "not data, storage, the GCS store's cache.t4g.small or logs" in text


def test_the_plan_reads_the_context_given_to_the_cdk_cli() -> None:
    """`make synth ARGS="-c decode_replicas=2"`: the plan sees what the synth saw; the CLI's own flags are left."""
    assert plan.cli_context(["--quiet", "-c", "decode_replicas=2", "--context=max_model_len=2048", "-c"]) == {
        "decode_replicas": "2",
        "max_model_len": "2048",
    }
