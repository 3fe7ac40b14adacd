"""Who may reach the Ray pods: NetworkPolicies of the serving namespace, enforced by the VPC CNI's
network policy agent (the cluster stack turns it on in the vpc-cni add-on).

Ingress is denied by default; then only: the pods of the RayCluster among themselves (GCS, object
transfers, NIXL's side channel, Serve's internal calls), the KubeRay operator to the head's dashboard
(serve config, status) and Serve health port, the namespaces named by SERVE_CLIENT_NAMESPACES to the Serve
port, the Serve endpoint's load balancer (SERVE_EXPOSURE internal or internet-facing) to the Serve port from the
public subnets it alone has addresses in, and the metrics collectors to the metrics port: METRICS_NAMESPACE (a
collector run in the cluster) and, with OBSERVABILITY=on, the managed Prometheus collector, which connects from
network interfaces in subnets of its own (no node or pod has an address there), named by their address blocks.
Ray's token authentication guards the dashboard, the Jobs API and GCS; it does not cover Serve's HTTP port, so
this is the Serve endpoint's only guard.
EFA's OS-bypass traffic does not pass through the kernel's IP stack: the EFA security group governs it.
"""

from __future__ import annotations

from dataclasses import dataclass

import cdk8s
import cdk8s_plus_28 as kplus
from constructs import Construct

from k8s_constructs.ray_facts import DASHBOARD_PORT, METRICS_PORT, NODE_TYPE_LABEL, RAY_NODE_LABEL, SERVE_PORT

RAY_NODE_LABELS = dict([RAY_NODE_LABEL])
HEAD_LABELS = {NODE_TYPE_LABEL: "head"}
OPERATOR_LABELS = {"app.kubernetes.io/name": "kuberay-operator"}


@dataclass(frozen=True)
class NetworkPolicyProps:
    namespace: str
    operator_namespace: str
    serve_client_namespaces: tuple[str, ...]
    metrics_namespace: str
    collector_cidrs: tuple[str, ...] = ()  # the managed collector's subnets, with OBSERVABILITY=on
    load_balancer_cidrs: tuple[
        str, ...
    ] = ()  # the Serve endpoint's load balancer's subnets, with SERVE_EXPOSURE beyond cluster


class RayNetworkPolicies(Construct):
    """Exposes ``policies``: the NetworkPolicies, in the order they are listed above."""

    def __init__(self, scope: Construct, construct_id: str, *, props: NetworkPolicyProps) -> None:
        super().__init__(scope, construct_id)

        def metadata(name: str) -> cdk8s.ApiObjectMetadata:
            return cdk8s.ApiObjectMetadata(name=name, namespace=props.namespace)

        ray_pods = kplus.Pods.select(self, "RayPods", labels=RAY_NODE_LABELS)
        head = kplus.Pods.select(self, "Head", labels=HEAD_LABELS)

        deny = kplus.NetworkPolicy(
            self,
            "DefaultDenyIngress",
            metadata=metadata("default-deny-ingress"),
            selector=kplus.Pods.all(self, "AllPods"),
            ingress=kplus.NetworkPolicyTraffic(default=kplus.NetworkPolicyTrafficDefault.DENY),
        )
        internal = kplus.NetworkPolicy(
            self, "RayClusterInternal", metadata=metadata("ray-cluster-internal"), selector=ray_pods
        )
        internal.add_ingress_rule(ray_pods)  # every port: GCS, raylets, object manager, NIXL side channel

        operator = kplus.NetworkPolicy(
            self, "KubeRayOperatorToHead", metadata=metadata("kuberay-operator-to-head"), selector=head
        )
        operator.add_ingress_rule(
            kplus.Pods.select(
                self,
                "Operator",
                labels=OPERATOR_LABELS,
                namespaces=kplus.Namespaces.select(self, "OperatorNamespace", names=[props.operator_namespace]),
            ),
            # The dashboard (serve config, status) and Serve's health check of the head (ray.io/serve label).
            [kplus.NetworkPolicyPort.tcp(DASHBOARD_PORT), kplus.NetworkPolicyPort.tcp(SERVE_PORT)],
        )
        serve = kplus.NetworkPolicy(self, "ServeClients", metadata=metadata("serve-clients"), selector=ray_pods)
        serve.add_ingress_rule(
            kplus.Namespaces.select(self, "ServeClientNamespaces", names=list(props.serve_client_namespaces)),
            [kplus.NetworkPolicyPort.tcp(SERVE_PORT)],
        )
        metrics = kplus.NetworkPolicy(
            self, "MetricsCollector", metadata=metadata("metrics-collector"), selector=ray_pods
        )
        metrics.add_ingress_rule(
            kplus.Namespaces.select(self, "MetricsNamespace", names=[props.metrics_namespace]),
            [kplus.NetworkPolicyPort.tcp(METRICS_PORT)],
        )
        for index, cidr in enumerate(props.collector_cidrs):
            # The metrics port only; the dashboard, GCS and Serve ports stay closed to it.
            metrics.add_ingress_rule(
                kplus.NetworkPolicyIpBlock.ipv4(self, f"ManagedCollector{index}", cidr),
                [kplus.NetworkPolicyPort.tcp(METRICS_PORT)],
            )
        self.policies: tuple[kplus.NetworkPolicy, ...] = (deny, internal, operator, serve, metrics)
        if props.load_balancer_cidrs:
            # The load balancer connects to the pods' addresses (target type ip) from its subnets, where nothing else
            # has an address: the Serve port only.
            balancer = kplus.NetworkPolicy(
                self, "LoadBalancer", metadata=metadata("load-balancer-to-serve"), selector=ray_pods
            )
            for index, cidr in enumerate(props.load_balancer_cidrs):
                balancer.add_ingress_rule(
                    kplus.NetworkPolicyIpBlock.ipv4(self, f"LoadBalancerSubnet{index}", cidr),
                    [kplus.NetworkPolicyPort.tcp(SERVE_PORT)],
                )
            self.policies += (balancer,)
