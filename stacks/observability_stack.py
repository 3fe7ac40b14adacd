"""Metrics with nothing installed by hand: the EKS `amazon-cloudwatch-observability` add-on (Container
Insights with NVIDIA GPU and EFA metrics, and a CloudWatch agent that scrapes the Ray pods' Prometheus
port), a CloudWatch dashboard and alarms. Optional (OBSERVABILITY=on): it costs money while idle.

Why the add-on and CloudWatch rather than Amazon Managed Service for Prometheus: the GPU, EFA and node
metrics come from the add-on with no scrape configuration, and everything lands where CloudWatch
dashboards and alarms (defined here, in CDK) can use it; AMP's metrics are not visible to CloudWatch
alarms. The limit of this path: the agent's Prometheus input keeps gauges and counters, not histograms,
so TTFT and inter-token latency percentiles come from `make bench-serving` and the Ray dashboard.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Duration, Environment, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from k8s_constructs.ray_facts import RAY_NODE_LABEL
from settings import Settings
from settings.scheduling import CLOUDWATCH_AGENT_NAMESPACE
from stacks import nag

ADDON = "amazon-cloudwatch-observability"
AGENT_NAMESPACE, AGENT_SERVICE_ACCOUNT = CLOUDWATCH_AGENT_NAMESPACE, "cloudwatch-agent"
RAY_NAMESPACE = "RayServe"  # CloudWatch namespace of the Ray metrics
CONTAINER_INSIGHTS = "ContainerInsights"


def _sd_label(label: str) -> str:
    """Prometheus's Kubernetes service-discovery name of a pod label (non-alphanumerics become '_')."""
    return "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in label)


def ray_scrape_agent(settings: Settings) -> dict[str, Any]:
    """A single-replica agent (a DaemonSet would scrape every Ray pod once per node) that scrapes the Ray
    pods' `metrics` port and publishes Ray Serve and vLLM gauges and counters through EMF."""
    by_model = {"source_labels": ["job"], "label_matcher": "^ray$", "dimensions": [["ClusterName"], ["ClusterName", "model_name"]]}
    return {
        "name": "cloudwatch-agent-ray",
        "mode": "deployment",
        "replicas": 1,
        "config": {
            "agent": {"region": settings.region},
            "logs": {
                "metrics_collected": {
                    "prometheus": {
                        "cluster_name": settings.cluster_name,
                        "log_group_name": f"/aws/containerinsights/{settings.cluster_name}/prometheus",
                        "prometheus_config_path": "/etc/prometheusconfig/prometheus.yaml",
                        "emf_processor": {
                            "metric_namespace": RAY_NAMESPACE,
                            "metric_declaration": [
                                {
                                    **by_model,
                                    "metric_selectors": [
                                        "^ray_vllm_num_requests_(running|waiting)$",
                                        "^ray_vllm_kv_cache_usage_perc$",
                                        "^ray_vllm_nixl_num_(failed_transfers|failed_notifications|kv_expired_reqs)_total$",
                                    ],
                                },
                                {
                                    "source_labels": ["job"],
                                    "label_matcher": "^ray$",
                                    "dimensions": [["ClusterName"], ["ClusterName", "application"]],
                                    "metric_selectors": ["^ray_serve_num_http_(error_)?requests_total$"],
                                },
                            ],
                        },
                    }
                }
            },
        },
        "prometheus": {
            "config": {
                "global": {"scrape_interval": "30s", "scrape_timeout": "10s"},
                "scrape_configs": [
                    {
                        "job_name": "ray",
                        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [settings.namespace]}}],
                        "relabel_configs": [
                            {"source_labels": [_sd_label(RAY_NODE_LABEL[0])], "regex": RAY_NODE_LABEL[1], "action": "keep"},
                            {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": "metrics", "action": "keep"},
                        ],
                    }
                ],
            }
        },
    }


def addon_configuration(settings: Settings) -> dict[str, Any]:
    """The add-on's values: the default node agent (Container Insights, GPU via DCGM, EFA), plus the Ray scraper."""
    return {"containerInsights": {"enabled": True}, "agents": [{"name": "cloudwatch-agent"}, ray_scrape_agent(settings)]}


def _search(namespace: str, dimensions: str, metric: str, cluster: str, stat: str, label: str) -> cw.MathExpression:
    return cw.MathExpression(
        expression=f"SEARCH('{{{namespace},{dimensions}}} MetricName=\"{metric}\" ClusterName=\"{cluster}\"', '{stat}', 60)",
        label=label,
        using_metrics={},
        period=Duration.minutes(1),
    )


class ObservabilityStack(Stack):
    """Exposes ``addon``, ``dashboard``, ``nixl_failures_alarm`` and ``gpu_capacity_alarm`` (None while parked)."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, cluster: eks.ICluster, env: Environment) -> None:
        super().__init__(scope, construct_id, env=env, description=f"{settings.cluster_name}: CloudWatch metrics, dashboard and alarms")
        cluster_name = settings.cluster_name
        role = iam.Role(
            self,
            "CloudWatchAgentRole",
            description=f"EKS Pod Identity of {AGENT_NAMESPACE}/{AGENT_SERVICE_ACCOUNT}: writes metrics and logs to CloudWatch",
            assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com"),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("CloudWatchAgentServerPolicy")],
        )
        role.assume_role_policy.add_statements(  # type: ignore[union-attr]
            iam.PolicyStatement(actions=["sts:TagSession"], principals=[iam.ServicePrincipal("pods.eks.amazonaws.com")])
        )
        nag.acknowledge(
            role,
            "AwsSolutions-IAM4",
            "The CloudWatch agent's AWS managed policy: what the amazon-cloudwatch-observability add-on documents for its agent.",
            applies_to=["Policy::arn:<AWS::Partition>:iam::aws:policy/CloudWatchAgentServerPolicy"],
        )
        association = eks.CfnPodIdentityAssociation(
            self,
            "CloudWatchAgentPodIdentity",
            cluster_name=cluster.cluster_name,
            namespace=AGENT_NAMESPACE,
            service_account=AGENT_SERVICE_ACCOUNT,
            role_arn=role.role_arn,
        )
        self.addon = eks.Addon(
            self, "CloudWatchObservability", cluster=cluster, addon_name=ADDON, configuration_values=addon_configuration(settings), preserve_on_delete=False
        )
        self.addon.node.add_dependency(association)

        ray_by_model = "ClusterName,model_name"
        widgets: list[cw.IWidget] = [
            cw.GraphWidget(
                title="GPU utilisation per node (%)",
                left=[_search(CONTAINER_INSIGHTS, "ClusterName,InstanceId,NodeName", "node_gpu_utilization", cluster_name, "Average", "")],
            ),
            cw.GraphWidget(
                title="GPU memory utilisation per node (%)",
                left=[_search(CONTAINER_INSIGHTS, "ClusterName,InstanceId,NodeName", "node_gpu_memory_utilization", cluster_name, "Average", "")],
            ),
            cw.GraphWidget(
                title="EFA bytes per node (rx, tx, RDMA read)",
                left=[
                    _search(CONTAINER_INSIGHTS, "ClusterName,InstanceId,NodeName", m, cluster_name, "Sum", m)
                    for m in ("node_efa_rx_bytes", "node_efa_tx_bytes", "node_efa_rdma_read_bytes")
                ],
            ),
            cw.GraphWidget(
                title="Requests running / waiting",
                left=[
                    _search(RAY_NAMESPACE, ray_by_model, m, cluster_name, "Maximum", m)
                    for m in ("ray_vllm_num_requests_running", "ray_vllm_num_requests_waiting")
                ],
            ),
            cw.GraphWidget(title="KV-cache usage", left=[_search(RAY_NAMESPACE, ray_by_model, "ray_vllm_kv_cache_usage_perc", cluster_name, "Maximum", "")]),
            cw.GraphWidget(
                title="Serve HTTP requests",
                left=[_search(RAY_NAMESPACE, "ClusterName,application", "ray_serve_num_http_requests_total", cluster_name, "Sum", "")],
            ),
            cw.GraphWidget(
                title="NIXL failed transfers", left=[_search(RAY_NAMESPACE, "ClusterName", "ray_vllm_nixl_num_failed_transfers_total", cluster_name, "Sum", "")]
            ),
            cw.TextWidget(
                markdown="TTFT and inter-token latency percentiles: `make bench-serving`, and the Ray dashboard's Serve LLM panels "
                "(the agent's Prometheus input keeps gauges and counters, not histograms).",
                width=24,
                height=2,
            ),
        ]
        self.dashboard = cw.Dashboard(
            self, "Dashboard", dashboard_name=f"{cluster_name}-serving", widgets=[widgets[i : i + 3] for i in range(0, len(widgets), 3)]
        )

        self.nixl_failures_alarm = cw.Alarm(
            self,
            "NixlFailedTransfers",
            alarm_description="NIXL KV-cache transfers failed: the decode engine could not read the prefill node's KV cache over EFA",
            metric=cw.Metric(
                namespace=RAY_NAMESPACE,
                metric_name="ray_vllm_nixl_num_failed_transfers_total",
                dimensions_map={"ClusterName": cluster_name},
                statistic="Sum",
                period=Duration.minutes(5),
            ),
            threshold=0,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            # vLLM creates the series with the first failure: no data means no failure.
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        expected_gpus = settings.gpu_node_count * settings.gpu_node.gpus
        self.gpu_capacity_alarm = (
            cw.Alarm(
                self,
                "GpuCapacity",
                alarm_description=f"Fewer than {expected_gpus} GPUs schedulable: a GPU node is not ready, or its device plugin is not advertising",
                metric=cw.Metric(
                    namespace=CONTAINER_INSIGHTS,
                    metric_name="node_gpu_limit",
                    dimensions_map={"ClusterName": cluster_name},
                    statistic="Sum",
                    period=Duration.minutes(5),
                ),
                threshold=expected_gpus,
                comparison_operator=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                evaluation_periods=2,
                treat_missing_data=cw.TreatMissingData.BREACHING,
            )
            if expected_gpus
            else None  # parked: no GPU is expected
        )
        CfnOutput(self, "DashboardName", value=f"{cluster_name}-serving")
