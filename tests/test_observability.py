"""OBSERVABILITY=on: the amazon-cloudwatch-observability add-on (Pod Identity, GPU/EFA Container Insights),
the managed Prometheus collector of the Ray pods (AWS::APS::Scraper into CloudWatch's OpenTelemetry
metrics), the dashboard's PromQL (parsed by promql-parser, a port of Prometheus's own parser) and the
alarms; cfn-lint and cdk-nag clean. Off by default."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml

from k8s_constructs.ray_facts import METRICS_CLUSTER_LABEL as CLUSTER_LABEL
from k8s_constructs.ray_facts import METRICS_PHASE_LABEL as PHASE_LABEL
from settings.errors import SettingError
from tests.conftest import Synth, settings_for, synthesize

# What the histogram panels must show (issue: TTFT, ITL, NIXL bytes), and the counters and gauges.
HISTOGRAMS = (
    "ray_vllm_time_to_first_token_seconds",
    "ray_vllm_inter_token_latency_seconds",
    "ray_vllm_nixl_bytes_transferred",
    "ray_vllm_nixl_xfer_time_seconds",
)
GAUGES_AND_COUNTERS = (
    "ray_vllm_num_requests_running",
    "ray_vllm_num_requests_waiting",
    "ray_vllm_kv_cache_usage_perc",
    "ray_vllm_nixl_num_failed_transfers_total",
    "ray_serve_num_http_requests_total",
)


def _addon(synth: Synth) -> dict[str, Any]:
    (addon,) = synth.resources("observability", "AWS::EKS::Addon").values()
    return addon


def _scraper(synth: Synth) -> dict[str, Any]:
    (scraper,) = synth.resources("observability", "AWS::APS::Scraper").values()
    props: dict[str, Any] = scraper["Properties"]
    return props


def _scrape_configuration(synth: Synth) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(
        base64.b64decode(_scraper(synth)["ScrapeConfiguration"]["ConfigurationBlob"])
    )
    return config


def _dashboard_body(synth: Synth) -> dict[str, Any]:
    """The dashboard body as CloudFormation will see it, the region token joined back in."""
    (dashboard,) = synth.resources("observability", "AWS::CloudWatch::Dashboard").values()
    body = dashboard["Properties"]["DashboardBody"]
    text = (
        body if isinstance(body, str) else "".join(p if isinstance(p, str) else "REGION" for p in body["Fn::Join"][1])
    )
    parsed: dict[str, Any] = json.loads(text)
    return parsed


def _promql_queries(synth: Synth) -> list[str]:
    charts = [w for w in _dashboard_body(synth)["widgets"] if w["type"] == "chart"]
    return [q["query"] for w in charts for q in w["properties"]["data"]["queries"]]


def _selectors(query: str) -> list[tuple[str, dict[str, str]]]:
    """(metric name, equality matchers) of every vector selector, from Prometheus's grammar."""
    found: list[tuple[str, dict[str, str]]] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            found.append((node.name, {m.name: m.value for m in node.matchers.matchers if str(m.op) == "MatchOp.Equal"}))

    promql_parser.walk(promql_parser.parse(query), visit)
    return found


def test_off_by_default_because_it_costs_money_while_idle(default_synth: Synth) -> None:
    assert "observability" not in default_synth.templates
    assert not any(
        r["Type"] in ("AWS::CloudWatch::Dashboard", "AWS::APS::Scraper")
        for t in default_synth.templates.values()
        for r in t["Resources"].values()
    )


def test_the_add_on_runs_with_its_own_pod_identity(observed_synth: Synth) -> None:
    addon = _addon(observed_synth)
    assert addon["Properties"]["AddonName"] == "amazon-cloudwatch-observability"
    # Container Insights with the add-on's own node agent (GPU via DCGM, EFA); no extra agent to configure.
    assert json.loads(addon["Properties"]["ConfigurationValues"]) == {"containerInsights": {"enabled": True}}
    (association,) = observed_synth.resources("observability", "AWS::EKS::PodIdentityAssociation").values()
    assert (association["Properties"]["Namespace"], association["Properties"]["ServiceAccount"]) == (
        "amazon-cloudwatch",
        "cloudwatch-agent",
    )
    role = observed_synth.templates["observability"]["Resources"][association["Properties"]["RoleArn"]["Fn::GetAtt"][0]]
    assert "CloudWatchAgentServerPolicy" in json.dumps(role["Properties"]["ManagedPolicyArns"])


def test_the_add_on_waits_for_the_system_nodes_as_coredns_does(observed_synth: Synth) -> None:
    """Its controller tolerates every taint: started before any system node exists it would take a GPU node."""
    d = observed_synth.deployment
    assert d.observability is not None
    assert d.system.stack_name in {s.stack_name for s in d.observability.dependencies}


def test_the_workers_leave_room_for_the_add_ons_pods(default_synth: Synth, observed_synth: Synth) -> None:
    """On a g6.8xlarge (31.85 allocatable CPUs) the worker asks 31 CPUs without the add-on; with it, the
    agent, DCGM exporter, log forwarder and controller (~840m) need a core more, and a GiB."""
    from tests.test_serving import _worker

    def limits(synth: Synth) -> dict[str, str]:
        container = _worker(synth)["template"]["spec"]["containers"][0]
        assert container["resources"]["requests"] == container["resources"]["limits"]
        return dict(container["resources"]["limits"])

    plain, observed = limits(default_synth), limits(observed_synth)
    assert (plain["cpu"], observed["cpu"]) == ("31", "30")
    assert (plain["memory"], observed["memory"]) == ("114Gi", "113Gi")
    from settings.sizing import DAEMONSET_CPU_MILLI, allocatable

    left = allocatable(observed_synth.settings.gpu_node).cpu_milli - 30_000 - DAEMONSET_CPU_MILLI
    assert left >= 840  # the add-on's pods fit beside the worker and the base DaemonSets


def test_the_collector_reads_this_cluster_from_its_private_subnets_into_cloudwatch(observed_synth: Synth) -> None:
    scraper, settings = _scraper(observed_synth), observed_synth.settings
    assert scraper["Alias"] == settings.metrics_collector_alias
    eks = scraper["Source"]["EksConfiguration"]
    assert eks["ClusterArn"]["Fn::Join"][1][-1] == f":cluster/{settings.cluster_name}"  # built, no export to keep
    # A security group of its own, let into the cluster's (nodes and API endpoint) on 8080 and 443 only.
    ((_, own),) = [
        (k, r)
        for k, r in observed_synth.resources("observability", "AWS::EC2::SecurityGroup").items()
        if eks["SecurityGroupIds"] == [{"Fn::GetAtt": [k, "GroupId"]}]
    ]
    egress = own["Properties"]["SecurityGroupEgress"]
    to_cluster = [e for e in egress if "DestinationSecurityGroupId" in e]
    assert sorted((e["FromPort"], e["ToPort"]) for e in to_cluster) == [(443, 443), (8080, 8080)]
    assert all("ClusterSecurityGroupId" in e["DestinationSecurityGroupId"]["Fn::ImportValue"] for e in to_cluster)
    # HTTPS out, should CloudWatch delivery leave through the VPC (an earlier version of AWS's page said so).
    assert [(e["CidrIp"], e["FromPort"], e["ToPort"]) for e in egress if "CidrIp" in e] == [("0.0.0.0/0", 443, 443)]
    ingress = observed_synth.resources("observability", "AWS::EC2::SecurityGroupIngress").values()
    assert sorted((i["Properties"]["FromPort"], i["Properties"]["ToPort"]) for i in ingress) == [
        (443, 443),
        (8080, 8080),
    ]
    for rule in ingress:
        assert "ClusterSecurityGroupId" in rule["Properties"]["GroupId"]["Fn::ImportValue"]
        assert rule["Properties"]["SourceSecurityGroupId"] == eks["SecurityGroupIds"][0]
    # At least two subnets in two AZs (the collector's rule): subnets of its own, one /28 per AZ.
    subnets = observed_synth.resources("observability", "AWS::EC2::Subnet")
    assert eks["SubnetIds"] == [{"Ref": k} for k in subnets] and len(subnets) == len(settings.availability_zones) >= 2
    assert [(s["Properties"]["AvailabilityZone"], s["Properties"]["CidrBlock"]) for s in subnets.values()] == list(
        zip(settings.availability_zones, settings.metrics_collector_cidrs, strict=True)
    )
    assert not any("MapPublicIpOnLaunch" in s["Properties"] for s in subnets.values())
    # Each uses its AZ's private route table (the way out through the NAT gateway), not the main one.
    associations = observed_synth.resources("observability", "AWS::EC2::SubnetRouteTableAssociation").values()
    routes = {
        a["Properties"]["SubnetId"]["Ref"]: a["Properties"]["RouteTableId"]["Fn::ImportValue"] for a in associations
    }
    assert set(routes) == set(subnets)
    for key, subnet in subnets.items():
        index = settings.availability_zones.index(subnet["Properties"]["AvailabilityZone"])
        assert f"privateSubnet{index + 1}RouteTable" in routes[key]
    # It scrapes once its security group rules exist.
    (scraper_resource,) = observed_synth.resources("observability", "AWS::APS::Scraper").values()
    assert set(scraper_resource["DependsOn"]) >= set(
        observed_synth.resources("observability", "AWS::EC2::SecurityGroupIngress")
    )
    arn = scraper["Destination"]["CloudWatchConfiguration"]["DatasetArn"]["Fn::Join"][1]
    assert arn[0] == "arn:" and arn[-1] == ":dataset/default"  # the account's implicit dataset


@pytest.mark.parametrize(
    ("vpc_cidr", "region_azs"),
    [
        ("10.0.0.0/16", 3),
        ("10.8.0.0/17", 3),
        ("172.31.0.0/16", 3),
        ("192.168.0.0/16", 3),
        ("10.0.0.0/16", 2),
        ("10.8.128.0/17", 2),
    ],
)
def test_the_collectors_subnets_are_free_space_of_the_vpc_no_node_or_pod_can_hold(
    vpc_cidr: str, region_azs: int, tmp_path: Path
) -> None:
    """Against the subnets CDK really allocates (the network stack alone, synthesized): inside the VPC,
    overlapping no subnet, so an address block of them names the collector and nothing else."""
    import ipaddress

    from aws_cdk import Environment

    from settings.zones import zones_context_key
    from stacks.app_base import new_app
    from stacks.network_stack import NetworkStack

    settings = settings_for(
        {"VPC_CIDR": vpc_cidr}, {zones_context_key("sa-east-1"): [f"sa-east-1{z}" for z in "abc"[:region_azs]]}
    )
    assert len(settings.availability_zones) == region_azs
    # The App every synth uses: CDK's own CloudFormation validation off (cfn-lint checks the network template of the
    # default and features synths; its first run here cost 3.5 s of loading the schema).
    app = new_app(str(tmp_path))
    NetworkStack(app, "Network", settings=settings, env=Environment(region=settings.region))
    template = app.synth().get_stack_by_name("Network").template
    taken = [
        ipaddress.ip_network(r["Properties"]["CidrBlock"])
        for r in template["Resources"].values()
        if r["Type"] == "AWS::EC2::Subnet"
    ]
    assert len(taken) == 2 * len(settings.availability_zones)
    collector = [ipaddress.ip_network(c) for c in settings.metrics_collector_cidrs]
    assert len(collector) == len(settings.availability_zones)
    for block in collector:
        assert block.subnet_of(ipaddress.ip_network(vpc_cidr)) and block.prefixlen == 28  # type: ignore[arg-type]
        assert not any(block.overlaps(subnet) for subnet in taken + [c for c in collector if c != block]), (
            block,
            taken,
        )


def test_an_az_added_later_leaves_the_other_collector_subnets_as_they_are() -> None:
    """A subnet's CIDR is create-only: each AZ's block depends on its index alone, not on the AZ count."""
    from settings.addressing import collector_subnet_cidrs

    for vpc_cidr in ("10.0.0.0/16", "10.8.0.0/17"):
        assert collector_subnet_cidrs(vpc_cidr, 3)[:2] == collector_subnet_cidrs(vpc_cidr, 2)


def test_the_scrape_configuration_keeps_to_what_the_managed_collector_accepts(observed_synth: Synth) -> None:
    """The collector's documented limits: global and scrape_configs only, Kubernetes service discovery
    only, a scrape interval of at least 30 s."""
    config, settings = _scrape_configuration(observed_synth), observed_synth.settings
    assert set(config) == {"global", "scrape_configs"}
    assert int(config["global"]["scrape_interval"].rstrip("s")) >= 30
    (job,) = config["scrape_configs"]
    assert set(job) == {"job_name", "kubernetes_sd_configs", "relabel_configs"}
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": [settings.namespace]}}]
    rules = job["relabel_configs"]
    assert {
        "source_labels": ["__meta_kubernetes_pod_label_ray_io_is_ray_node"],
        "regex": "yes",
        "action": "keep",
    } in rules
    assert {
        "source_labels": ["__meta_kubernetes_pod_container_port_name"],
        "regex": "metrics",
        "action": "keep",
    } in rules
    # The dataset is shared by the account: every series carries its cluster, and its phase (KubeRay's group).
    assert {"target_label": CLUSTER_LABEL, "replacement": settings.cluster_name, "action": "replace"} in rules
    assert {
        "source_labels": ["__meta_kubernetes_pod_label_ray_io_group"],
        "target_label": PHASE_LABEL,
        "action": "replace",
    } in rules
    for rule in rules:
        re.compile(rule.get("regex", "(.*)"))  # Prometheus's regexes are RE2; these use nothing beyond it


def test_every_dashboard_query_is_promql_about_this_cluster(observed_synth: Synth) -> None:
    cluster = observed_synth.settings.cluster_name
    queries = _promql_queries(observed_synth)
    assert queries
    names = set()
    for query in queries:
        for name, matchers in _selectors(query):
            assert matchers.get(CLUSTER_LABEL) == cluster, query
            names.add(name)
    assert names == set(HISTOGRAMS) | set(GAUGES_AND_COUNTERS)


def test_histograms_are_read_as_cloudwatch_stores_them(observed_synth: Synth) -> None:
    """CloudWatch converts Prometheus histograms to exponential histograms under the base name: no
    `_bucket`, `_sum` or `_count` series to select, `le` is not needed."""
    queries = _promql_queries(observed_synth)
    for query in queries:
        for name, _ in _selectors(query):
            assert not name.endswith(("_bucket", "_sum", "_count")), query
        assert " le" not in query and "(le)" not in query
    ttft = [q for q in queries if "time_to_first_token" in q]
    assert [q.split(",")[0] for q in ttft] == ["histogram_quantile(0.5", "histogram_quantile(0.99"]
    assert any(q.startswith("histogram_sum(") and "nixl_bytes_transferred" in q for q in queries)


def test_the_promql_check_can_fail() -> None:
    with pytest.raises(ValueError):
        promql_parser.parse("histogram_quantile(0.99, sum(rate(x[5m]))")
    with pytest.raises(ValueError):
        promql_parser.parse("histogram_quantil(0.99, x)")


def test_dashboard_widgets(observed_synth: Synth) -> None:
    widgets = _dashboard_body(observed_synth)["widgets"]
    charts = [w for w in widgets if w["type"] == "chart"]
    for chart in charts:
        assert chart["properties"]["region"] == observed_synth.settings.region
        assert {(q["type"], q["language"]) for q in chart["properties"]["data"]["queries"]} == {
            ("cloudwatch-metrics", "PromQL")
        }
    titles = [c["properties"]["title"] for c in charts]
    assert titles[:2] == ["Time to first token (s)", "Inter-token latency (s)"]
    container_insights = json.dumps([w for w in widgets if w["type"] == "metric"])
    for metric in ("node_gpu_utilization", "node_gpu_memory_utilization", "node_efa_rx_bytes", "node_efa_tx_bytes"):
        assert metric in container_insights, metric
    # No two widgets overlap on the 24-column grid.
    cells = [
        (x, y) for w in widgets for x in range(w["x"], w["x"] + w["width"]) for y in range(w["y"], w["y"] + w["height"])
    ]
    assert len(cells) == len(set(cells)) and max(w["x"] + w["width"] for w in widgets) <= 24


def test_alarms(observed_synth: Synth) -> None:
    alarms = [a["Properties"] for a in observed_synth.resources("observability", "AWS::CloudWatch::Alarm").values()]
    (nixl,) = [a for a in alarms if "EvaluationCriteria" in a]
    criteria = nixl["EvaluationCriteria"]["PromQLCriteria"]
    # A PromQL alarm: the condition is in the query, each pod returned is a contributor.
    # Two branches: failures counted by increase(), and a series that appeared with its first failure.
    selectors = _selectors(criteria["Query"])
    assert {name for name, _ in selectors} == {"ray_vllm_nixl_num_failed_transfers_total"} and len(selectors) == 3
    assert all(m == {CLUSTER_LABEL: observed_synth.settings.cluster_name} for _, m in selectors)
    increase, new_series = criteria["Query"].split(" or ")
    assert increase.startswith("sum by (pod) (increase(") and increase.endswith("> 0")
    assert " unless " in new_series and " offset 5m" in new_series and new_series.endswith("> 0")
    assert nixl["EvaluationInterval"] == 60 and not {"MetricName", "Threshold", "ComparisonOperator"} & set(nixl)
    (gpus,) = [a for a in alarms if a.get("MetricName") == "node_gpu_limit"]
    assert (gpus["Threshold"], gpus["ComparisonOperator"], gpus["TreatMissingData"]) == (
        2,
        "LessThanThreshold",
        "breaching",
    )
    # Per-node datapoints summed over one minute (a longer period adds up several minutes of every node).
    assert (gpus["Statistic"], gpus["Period"], gpus["EvaluationPeriods"], gpus["DatapointsToAlarm"]) == (
        "Sum",
        60,
        5,
        3,
    )


def test_cfn_lint_and_cdk_nag_are_clean(observed_synth: Synth) -> None:
    template = observed_synth.outdir / "ray-llm-multinode-observability.template.json"
    result = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), "--format", "parseable", str(template)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert not [line for line in result.stdout.splitlines() if ":E" in line], result.stdout
    findings = [v for p in observed_synth.nag_report["pluginReports"] for v in p["violations"]]
    assert findings == [] and observed_synth.nag_error == ""


def test_parked_gpus_raise_no_capacity_alarm(tmp_path: Path) -> None:
    parked = synthesize(settings_for({"OBSERVABILITY": "on", "GPU_NODE_COUNT": "0"}), tmp_path)
    alarms = [a["Properties"] for a in parked.resources("observability", "AWS::CloudWatch::Alarm").values()]
    assert ["EvaluationCriteria" in a for a in alarms] == [True]  # the NIXL alarm only


def test_a_public_only_endpoint_is_refused() -> None:
    """The collector reads the pod list through the private endpoint."""
    with pytest.raises(SettingError) as error:
        settings_for({"OBSERVABILITY": "on", "ENDPOINT_ACCESS": "public"})
    assert (
        str(error.value)
        == "OBSERVABILITY='on' is not allowed: off while ENDPOINT_ACCESS=public (the metrics collector needs the"
        " private endpoint)"
    )
