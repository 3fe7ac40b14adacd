"""Metrics with nothing installed by hand, optional (OBSERVABILITY=on: it costs money while idle).

- GPU, EFA and node metrics: the EKS `amazon-cloudwatch-observability` add-on (Container Insights, NVIDIA
  DCGM and EFA on every node), in the `ContainerInsights` namespace.
- Ray Serve, vLLM and NIXL metrics: an agentless collector of Amazon Managed Service for Prometheus
  (AWS::APS::Scraper) that scrapes the Ray pods' `metrics` port and writes to CloudWatch's OpenTelemetry
  metrics store (the account's `default` dataset), where PromQL queries them. This path keeps Prometheus
  histograms, which the CloudWatch agent's Prometheus input drops: time to first token, inter-token
  latency and NIXL bytes are on the dashboard as percentiles and rates.
- A CloudWatch dashboard (PromQL charts beside Container Insights graphs) and two alarms: NIXL transfers
  failing (a PromQL alarm) and fewer schedulable GPUs than the nodes should have.

Everything lands in CloudWatch, where the dashboard and alarms defined here read it; an AMP workspace would
need Grafana to look at and could not feed CloudWatch alarms.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import yaml
from aws_cdk import Aws, CfnOutput, CfnTag, Duration, Environment, Stack
from aws_cdk import aws_aps as aps
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from k8s_constructs.ray_facts import (
    ENGINE_REQUESTS_RUNNING,
    GROUP_LABEL,
    METRICS_CLUSTER_LABEL,
    METRICS_PHASE_LABEL,
    METRICS_PORT,
    METRICS_PORT_NAME,
    RAY_NODE_LABEL,
)
from settings import Settings
from stacks.addons.managed import install_managed

CONTAINER_INSIGHTS = "ContainerInsights"
# The collector's scrape interval: the shortest it accepts.
SCRAPE_INTERVAL = "30s"


def _sd_label(label: str) -> str:
    """Prometheus's Kubernetes service-discovery name of a pod label (non-alphanumerics become '_')."""
    return "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in label)


def ray_scrape_configuration(settings: Settings) -> dict[str, Any]:
    """The collector's Prometheus configuration: the Ray pods of the serving namespace, their `metrics` port."""
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": "10s"},
        "scrape_configs": [
            {
                "job_name": "ray",
                "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [settings.namespace]}}],
                "relabel_configs": [
                    {"source_labels": [_sd_label(RAY_NODE_LABEL[0])], "regex": RAY_NODE_LABEL[1], "action": "keep"},
                    {
                        "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                        "regex": METRICS_PORT_NAME,
                        "action": "keep",
                    },
                    {"target_label": METRICS_CLUSTER_LABEL, "replacement": settings.cluster_name, "action": "replace"},
                    {
                        "source_labels": [_sd_label(GROUP_LABEL)],
                        "target_label": METRICS_PHASE_LABEL,
                        "action": "replace",
                    },
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod", "action": "replace"},
                ],
            }
        ],
    }


@dataclass(frozen=True)
class PromQLPanel:
    title: str
    queries: tuple[tuple[str, str], ...]  # (legend label, PromQL)


def ray_panels(cluster_name: str) -> tuple[PromQLPanel, ...]:
    """The dashboard's PromQL charts. CloudWatch stores a Prometheus histogram as an exponential
    histogram under its base name (no `_bucket` series): quantiles and sums read that name."""
    this = f'{METRICS_CLUSTER_LABEL}="{cluster_name}"'

    def quantile(q: float, histogram: str) -> str:
        return f"histogram_quantile({q}, sum(rate({histogram}{{{this}}}[5m])))"

    return (
        PromQLPanel(
            "Time to first token (s)",
            (
                ("p50", quantile(0.5, "ray_vllm_time_to_first_token_seconds")),
                ("p99", quantile(0.99, "ray_vllm_time_to_first_token_seconds")),
            ),
        ),
        PromQLPanel(
            "Inter-token latency (s)",
            (
                ("p50", quantile(0.5, "ray_vllm_inter_token_latency_seconds")),
                ("p99", quantile(0.99, "ray_vllm_inter_token_latency_seconds")),
            ),
        ),
        PromQLPanel(
            "Requests running / waiting per phase",
            (
                ("running", f"sum by ({METRICS_PHASE_LABEL}) ({ENGINE_REQUESTS_RUNNING}{{{this}}})"),
                ("waiting", f"sum by ({METRICS_PHASE_LABEL}) (ray_vllm_num_requests_waiting{{{this}}})"),
            ),
        ),
        PromQLPanel(
            "KV-cache usage per phase (0-1)",
            (("max", f"max by ({METRICS_PHASE_LABEL}) (ray_vllm_kv_cache_usage_perc{{{this}}})"),),
        ),
        PromQLPanel(
            "NIXL KV-cache transfer (bytes/s, p99 s)",
            (
                ("bytes/s", f"histogram_sum(sum(rate(ray_vllm_nixl_bytes_transferred{{{this}}}[5m])))"),
                ("transfer p99", quantile(0.99, "ray_vllm_nixl_xfer_time_seconds")),
            ),
        ),
        PromQLPanel(
            "NIXL failed transfers (5 min)",
            (("failed", f"sum(increase(ray_vllm_nixl_num_failed_transfers_total{{{this}}}[5m]))"),),
        ),
        PromQLPanel(
            "Serve HTTP requests/s", (("requests/s", f"sum(rate(ray_serve_num_http_requests_total{{{this}}}[5m]))"),)
        ),
    )


def nixl_failures_query(cluster_name: str) -> str:
    """One alarm contributor per pod whose NIXL transfers failed in the last 5 minutes. The counter's series
    appears with the first failure, which `increase` cannot see (it needs two samples): a series that
    is new within the 5 minutes counts too."""
    failed = f'ray_vllm_nixl_num_failed_transfers_total{{{METRICS_CLUSTER_LABEL}="{cluster_name}"}}'
    return f"sum by (pod) (increase({failed}[5m])) > 0 or sum by (pod) ({failed} unless {failed} offset 5m) > 0"


class PromQLChart(cw.ConcreteWidget):
    """A CloudWatch `chart` widget of PromQL queries (aws-cdk-lib has no construct for one)."""

    def __init__(self, *, panel: PromQLPanel, region: str, width: int = 8, height: int = 6) -> None:
        super().__init__(width, height)
        self._panel, self._region = panel, region

    def to_json(self) -> list[Any]:
        queries = [
            {"id": f"q{i}", "type": "cloudwatch-metrics", "language": "PromQL", "query": query, "label": label}
            for i, (label, query) in enumerate(self._panel.queries)
        ]
        return [
            {
                "type": "chart",
                "x": self._x,
                "y": self._y,
                "width": self.width,
                "height": self.height,
                "properties": {
                    "title": self._panel.title,
                    "view": "line",
                    "region": self._region,
                    "data": {"queries": queries},
                },
            }
        ]


def _search(dimensions: str, metric: str, cluster: str, stat: str, label: str) -> cw.MathExpression:
    return cw.MathExpression(
        expression=(
            f'SEARCH(\'{{{CONTAINER_INSIGHTS},{dimensions}}} MetricName="{metric}" ClusterName="{cluster}"\','
            f" '{stat}', 60)"
        ),
        label=label,
        using_metrics={},
        period=Duration.minutes(1),
    )


class ObservabilityStack(Stack):
    """Exposes ``addon``, ``scraper``, ``dashboard``, ``nixl_failures_alarm`` and ``gpu_capacity_alarm``
    (None while parked)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        cluster: eks.ICluster,
        vpc: ec2.IVpc,
        system_nodegroup: eks.Nodegroup,
        env: Environment,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            env=env,
            description=f"{settings.cluster_name}: CloudWatch metrics, dashboard and alarms",
        )
        cluster_name = settings.cluster_name
        self._container_insights(cluster, settings)
        # As CoreDNS: the add-on's controller tolerates every taint, so without system nodes to go to it
        # would land on a GPU node and take the room the Ray worker was sized for.
        self.addon.node.add_dependency(system_nodegroup)
        self._ray_metrics_collector(settings, cluster, vpc)

        widgets: list[cw.IWidget] = [
            PromQLChart(panel=panel, region=settings.region) for panel in ray_panels(cluster_name)
        ]
        by_node = "ClusterName,InstanceId,NodeName"
        widgets += [
            cw.GraphWidget(
                title="GPU utilisation per node (%)",
                left=[_search(by_node, "node_gpu_utilization", cluster_name, "Average", "")],
            ),
            cw.GraphWidget(
                title="GPU memory utilisation per node (%)",
                left=[_search(by_node, "node_gpu_memory_utilization", cluster_name, "Average", "")],
            ),
            cw.GraphWidget(
                title="EFA bytes per node (rx, tx, RDMA read)",
                left=[
                    _search(by_node, m, cluster_name, "Sum", m)
                    for m in ("node_efa_rx_bytes", "node_efa_tx_bytes", "node_efa_rdma_read_bytes")
                ],
            ),
        ]
        widgets.append(
            cw.TextWidget(
                markdown="Ray, vLLM and NIXL: PromQL over the Ray pods' Prometheus metrics (managed collector, "
                f'`{METRICS_CLUSTER_LABEL}="{cluster_name}"`, `{METRICS_PHASE_LABEL}` = prefill/decode/headgroup). GPU'
                " and EFA: Container Insights. "
                "Per-request detail: `make bench-serving`.",
                width=16,
                height=6,
            )
        )
        self.dashboard = cw.Dashboard(
            self,
            "Dashboard",
            dashboard_name=f"{cluster_name}-serving",
            widgets=[widgets[i : i + 3] for i in range(0, len(widgets), 3)],
        )

        self.nixl_failures_alarm = cw.PromQLAlarm(
            self,
            "NixlFailedTransfers",
            alarm_description=(
                "NIXL KV-cache transfers failed: a decode engine could not read the prefill node's KV cache over EFA"
            ),
            query=nixl_failures_query(cluster_name),
            evaluation_interval=Duration.minutes(1),
            pending_period=Duration.seconds(0),
            recovery_period=Duration.minutes(10),
        )
        expected_gpus = settings.gpu_node_count * settings.gpu_node.gpus
        self.gpu_capacity_alarm = (
            cw.Alarm(
                self,
                "GpuCapacity",
                alarm_description=(
                    f"Fewer than {expected_gpus} GPUs schedulable: a GPU node is not ready, or its device plugin is not"
                    " advertising"
                ),
                metric=cw.Metric(
                    namespace=CONTAINER_INSIGHTS,
                    metric_name="node_gpu_limit",
                    dimensions_map={"ClusterName": cluster_name},
                    # One datapoint per node per minute (the agent's interval): a minute's Sum is the
                    # cluster's GPUs; a longer period would add up several minutes of every node.
                    statistic="Sum",
                    period=Duration.minutes(1),
                ),
                threshold=expected_gpus,
                comparison_operator=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                evaluation_periods=5,
                datapoints_to_alarm=3,  # a node's sample landing in the next minute is not an outage
                treat_missing_data=cw.TreatMissingData.BREACHING,
            )
            if expected_gpus
            else None  # parked: no GPU is expected
        )
        CfnOutput(self, "DashboardName", value=f"{cluster_name}-serving")
        CfnOutput(self, "ScraperId", value=self.scraper.attr_scraper_id)

    def _ray_metrics_collector(self, settings: Settings, cluster: eks.ICluster, vpc: ec2.IVpc) -> None:
        cluster_name = settings.cluster_name
        # The collector's network interfaces sit in subnets of their own (a /28 per AZ in space the network
        # stack leaves free; no node or pod has an address there, so the serving namespace's NetworkPolicy
        # can name the collector by address) with a security group of their own, let into the cluster
        # security group (which every node and the API endpoint carry) on the metrics and API ports only.
        # Both live here: if AWS releases the interfaces late on a destroy, this stack waits for them, not
        # the cluster's or the network's deletion. AWS documents delivery to CloudWatch over its own
        # network, but an earlier version of the same page asked for a way out of private subnets: each
        # subnet uses its AZ's private route table (the NAT gateway) and the group may reach HTTPS anywhere,
        # so delivery works either way.
        self.collector_subnets = [
            ec2.CfnSubnet(
                self,
                f"MetricsCollectorSubnet{index + 1}",
                vpc_id=vpc.vpc_id,
                cidr_block=cidr,
                availability_zone=zone,
                tags=[CfnTag(key="Name", value=f"{cluster_name}-metrics-collector-{zone}")],
            )
            for index, (zone, cidr) in enumerate(
                zip(settings.availability_zones, settings.metrics_collector_cidrs, strict=True)
            )
        ]
        private_route_tables = {
            subnet.availability_zone: subnet.route_table.route_table_id for subnet in vpc.private_subnets
        }
        for index, subnet in enumerate(self.collector_subnets):
            ec2.CfnSubnetRouteTableAssociation(
                self,
                f"MetricsCollectorSubnet{index + 1}Routes",
                subnet_id=subnet.ref,
                route_table_id=private_route_tables[str(subnet.availability_zone)],
            )
        self.collector_security_group = ec2.SecurityGroup(
            self,
            "MetricsCollectorSecurityGroup",
            vpc=vpc,
            description="Managed Prometheus collector: to the Ray pods metrics port and the Kubernetes API",
            allow_all_outbound=False,
        )
        ingress_rules = []
        for port, why in (
            (METRICS_PORT, "the Ray pods Prometheus metrics"),
            (443, "the Kubernetes API (pod discovery)"),
        ):
            self.collector_security_group.add_egress_rule(
                ec2.Peer.security_group_id(cluster.cluster_security_group_id), ec2.Port.tcp(port), why
            )
            rule = ec2.CfnSecurityGroupIngress(
                self,
                f"CollectorTo{port}",
                group_id=cluster.cluster_security_group_id,
                ip_protocol="tcp",
                from_port=port,
                to_port=port,
                source_security_group_id=self.collector_security_group.security_group_id,
                description=f"managed Prometheus collector: {why}",
            )
            ingress_rules.append(rule)
        self.collector_security_group.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "CloudWatch, should delivery leave through the VPC"
        )
        self.scraper = aps.CfnScraper(
            self,
            "RayMetricsCollector",
            alias=settings.metrics_collector_alias,
            source=aps.CfnScraper.SourceProperty(
                eks_configuration=aps.CfnScraper.EksConfigurationProperty(
                    # Built, not imported: one export fewer for the cluster stack to keep while this one exists.
                    cluster_arn=f"arn:{Aws.PARTITION}:eks:{Aws.REGION}:{Aws.ACCOUNT_ID}:cluster/{cluster_name}",
                    subnet_ids=[subnet.ref for subnet in self.collector_subnets],
                    security_group_ids=[self.collector_security_group.security_group_id],
                )
            ),
            scrape_configuration=aps.CfnScraper.ScrapeConfigurationProperty(
                configuration_blob=base64.b64encode(
                    yaml.safe_dump(ray_scrape_configuration(settings), sort_keys=False).encode()
                ).decode()
            ),
            destination=aps.CfnScraper.DestinationProperty(
                cloud_watch_configuration=aps.CfnScraper.CloudWatchConfigurationProperty(
                    dataset_arn=f"arn:{Aws.PARTITION}:cloudwatch:{Aws.REGION}:{Aws.ACCOUNT_ID}:dataset/default"
                )
            ),
        )

        for rule in ingress_rules:  # it reaches the API and the pods from its first scrape
            self.scraper.node.add_dependency(rule)

    def _container_insights(self, cluster: eks.ICluster, settings: Settings) -> None:
        # The agent's Pod Identity comes with the add-on (stacks/addons/managed.py).
        (self.addon,) = install_managed(self, "observability", cluster=cluster, settings=settings).values()
