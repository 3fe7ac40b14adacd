"""OBSERVABILITY=on: the amazon-cloudwatch-observability add-on (Pod Identity, GPU/EFA Container Insights,
the Ray Prometheus scraper), the dashboard and the alarms; cfn-lint and cdk-nag clean. Off by default."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.conftest import REPO, Synth, settings_for, synthesize

SCHEMA = json.loads((REPO / "tests" / "data" / "cloudwatch-agent-config.schema.json").read_text())


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    yield synthesize(settings_for({"OBSERVABILITY": "on"}), tmp_path_factory.mktemp("observability"))


def _addon(synth: Synth) -> dict[str, Any]:
    (addon,) = synth.resources("observability", "AWS::EKS::Addon").values()
    return addon


def test_off_by_default_because_it_costs_money_while_idle(default_synth: Synth) -> None:
    assert "observability" not in default_synth.templates
    assert not any(r["Type"] == "AWS::CloudWatch::Dashboard" for t in default_synth.templates.values() for r in t["Resources"].values())


def test_the_add_on_runs_with_its_own_pod_identity(observed: Synth) -> None:
    addon = _addon(observed)
    assert addon["Properties"]["AddonName"] == "amazon-cloudwatch-observability"
    (association,) = observed.resources("observability", "AWS::EKS::PodIdentityAssociation").values()
    assert (association["Properties"]["Namespace"], association["Properties"]["ServiceAccount"]) == ("amazon-cloudwatch", "cloudwatch-agent")
    role = observed.templates["observability"]["Resources"][association["Properties"]["RoleArn"]["Fn::GetAtt"][0]]
    assert "CloudWatchAgentServerPolicy" in json.dumps(role["Properties"]["ManagedPolicyArns"])


def test_the_agents_configurations_pass_the_cloudwatch_agents_own_schema(observed: Synth) -> None:
    values = json.loads(_addon(observed)["Properties"]["ConfigurationValues"])
    assert values["containerInsights"] == {"enabled": True}
    node_agent, ray_agent = values["agents"]
    assert node_agent == {"name": "cloudwatch-agent"}  # Container Insights, DCGM (GPU) and EFA on every node
    assert (ray_agent["mode"], ray_agent["replicas"]) == ("deployment", 1)  # one scraper, no double counting
    jsonschema.validate(ray_agent["config"], SCHEMA)
    (scrape,) = ray_agent["prometheus"]["config"]["scrape_configs"]
    assert {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": "metrics", "action": "keep"} in scrape["relabel_configs"]
    selectors = [
        s for d in ray_agent["config"]["logs"]["metrics_collected"]["prometheus"]["emf_processor"]["metric_declaration"] for s in d["metric_selectors"]
    ]
    assert any("nixl_num_(failed_transfers" in s for s in selectors) and any("kv_cache_usage_perc" in s for s in selectors)


def test_the_schema_check_can_fail() -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"agent": {"metrics_collection_interval": "often"}}, SCHEMA)


def test_dashboard_and_alarms(observed: Synth) -> None:
    (dashboard,) = observed.resources("observability", "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for metric in (
        "node_gpu_utilization",
        "node_efa_rx_bytes",
        "ray_vllm_num_requests_running",
        "ray_vllm_kv_cache_usage_perc",
        "ray_vllm_nixl_num_failed_transfers_total",
        "ray_serve_num_http_requests_total",
    ):
        assert metric in body, metric
    alarms = {a["Properties"]["MetricName"]: a["Properties"] for a in observed.resources("observability", "AWS::CloudWatch::Alarm").values()}
    nixl, gpus = alarms["ray_vllm_nixl_num_failed_transfers_total"], alarms["node_gpu_limit"]
    assert (nixl["Threshold"], nixl["ComparisonOperator"], nixl["TreatMissingData"]) == (0, "GreaterThanThreshold", "notBreaching")
    assert (gpus["Threshold"], gpus["ComparisonOperator"], gpus["TreatMissingData"]) == (2, "LessThanThreshold", "breaching")


def test_cfn_lint_and_cdk_nag_are_clean(observed: Synth) -> None:
    template = observed.outdir / "ray-llm-multinode-observability.template.json"
    result = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), "--format", "parseable", str(template)], capture_output=True, text=True, timeout=300
    )
    assert not [line for line in result.stdout.splitlines() if ":E" in line], result.stdout
    findings = [v for p in observed.nag_report["pluginReports"] for v in p["violations"]]
    assert findings == [] and observed.nag_error == ""


def test_parked_gpus_raise_no_capacity_alarm(tmp_path: Path) -> None:
    parked = synthesize(settings_for({"OBSERVABILITY": "on", "GPU_NODE_COUNT": "0"}), tmp_path)
    assert [a["Properties"]["MetricName"] for a in parked.resources("observability", "AWS::CloudWatch::Alarm").values()] == [
        "ray_vllm_nixl_num_failed_transfers_total"
    ]
