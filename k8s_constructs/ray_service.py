"""The prefill/decode RayService and its Namespace, as a cdk8s Chart of typed objects.

The RayService classes are generated from KubeRay's own CRD (imports/, `make imports`), so a field
KubeRay does not know is a Python error here, not a rejected apply 30 minutes into a deploy.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import cdk8s
import cdk8s_plus_28 as kplus
from constructs import Construct

from imports.io.ray import (
    RayService,
    RayServiceSpec,
    RayServiceSpecRayClusterConfig,
    RayServiceSpecRayClusterConfigAuthOptions,
    RayServiceSpecRayClusterConfigAuthOptionsMode,
    RayServiceSpecUpgradeStrategy,
)
from k8s_constructs import endpoint, gcs_ft
from k8s_constructs.network_policies import NetworkPolicyProps, RayNetworkPolicies
from k8s_constructs.ray_autoscaling import autoscaler_options
from k8s_constructs.ray_cluster_groups import head_group_spec, worker_group_spec, worker_identity_needed
from k8s_constructs.ray_facts import worker_service_account
from k8s_constructs.serve_config import pd_application
from k8s_constructs.synced_secrets import HfTokenProviderClass, hf_token_of
from settings import Settings
from settings.addressing import public_subnet_cidrs

# No new RayCluster on a cluster-level change: with every GPU node held by the running cluster, the
# default NewCluster strategy would wait forever for GPUs for its replacement. Serve config changes
# still roll out in place; cluster-level changes are applied by re-creating the serving stack.
UPGRADE_STRATEGY = "None"


@dataclass(frozen=True)
class RayServiceProps:
    settings: Settings
    # GCS_FAULT_TOLERANCE=redis: the deployed store (serving stack tokens); None: placeholders (dist/, validators).
    gcs_store: gcs_ft.GcsStoreRef | None = None
    # SERVE_EXPOSURE / SERVE_API_KEYS: the keys' secret and the load balancer's subnets (tokens), else placeholders.
    endpoint_refs: endpoint.EndpointRefs = field(default_factory=endpoint.EndpointRefs)


class PdRayServiceChart(cdk8s.Chart):
    """Namespace + RayService. Exposes ``namespace_object``, ``ray_service`` and ``serve_config_yaml``."""

    def __init__(self, scope: Construct, construct_id: str, *, props: RayServiceProps) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        s = props.settings

        self.namespace_object = kplus.Namespace(
            self,
            "Namespace",
            metadata=cdk8s.ApiObjectMetadata(
                name=s.namespace,
                labels={
                    # The GPU workers are privileged (CUDA memory is registered with the EFA NIC) and
                    # mount a hostPath model cache: the namespace must admit that, and only it.
                    "pod-security.kubernetes.io/enforce": "privileged",
                    "pod-security.kubernetes.io/warn": "baseline",
                },
            ),
        )
        self.serve_config_yaml = pd_application(s).to_yaml()
        self.network_policies = RayNetworkPolicies(
            self,
            "NetworkPolicies",
            props=NetworkPolicyProps(
                namespace=s.namespace,
                operator_namespace=s.kuberay_namespace,
                serve_client_namespaces=s.serve_client_namespaces,
                metrics_namespace=s.metrics_namespace,
                collector_cidrs=s.metrics_collector_cidrs if s.observability else (),
                load_balancer_cidrs=(
                    public_subnet_cidrs(s.vpc_cidr, len(s.availability_zones)) if s.serve_endpoint.exposed else ()
                ),
            ),
        )
        for policy in self.network_policies.policies:
            policy.node.add_dependency(self.namespace_object)

        token = hf_token_of(s)
        self.worker_service_account: kplus.ServiceAccount | None = None
        if worker_identity_needed(s):
            # The workers' identity for EKS Pod Identity: the CSI provider reads the token with it, Ray's S3
            # downloader the weights.
            self.worker_service_account = kplus.ServiceAccount(
                self,
                "WorkerServiceAccount",
                metadata=cdk8s.ApiObjectMetadata(
                    name=worker_service_account(s.ray_service_name), namespace=s.namespace
                ),
            )
            self.worker_service_account.node.add_dependency(self.namespace_object)
        if token is not None:
            self.hf_token_provider = HfTokenProviderClass(self, "HfToken", token=token, namespace=s.namespace)
            self.hf_token_provider.node.add_dependency(self.namespace_object)
        store = (
            (props.gcs_store or gcs_ft.GcsStoreRef(gcs_ft.PLACEHOLDER_ADDRESS, gcs_ft.PLACEHOLDER_SECRET))
            if s.gcs_redis
            else None
        )
        if store is not None:
            self.gcs_store_objects = gcs_ft.GcsStoreObjects(
                self,
                "GcsStore",
                store=store,
                namespace=s.namespace,
                region=s.region,
                ray_service_name=s.ray_service_name,
            )
            self.gcs_store_objects.node.add_dependency(self.namespace_object)

        # The ingress modules every configuration's ingress imports (the PD guard, and the API-key ingress over it).
        self.ingress_modules = endpoint.IngressModules(self, "IngressModules", settings=s)
        self.ingress_modules.node.add_dependency(self.namespace_object)
        if s.serve_endpoint.api_keys:
            # With the GCS store the head's ServiceAccount is among its objects; without, among the keys'.
            head_account = gcs_ft.head_service_account(s.ray_service_name) if store is None else None
            self.api_key_objects = endpoint.ApiKeyObjects(
                self, "ApiKeys", settings=s, refs=props.endpoint_refs, head_account=head_account
            )
            self.api_key_objects.node.add_dependency(self.namespace_object)
        if s.serve_endpoint.exposed:
            self.ingress = endpoint.ServeIngress(self, "ServeIngress", settings=s, refs=props.endpoint_refs)
            self.ingress.node.add_dependency(self.namespace_object)

        self.ray_service = RayService(
            self,
            "RayService",
            metadata=cdk8s.ApiObjectMetadata(name=s.ray_service_name, namespace=s.namespace),
            spec=RayServiceSpec(
                serve_config_v2=self.serve_config_yaml,
                upgrade_strategy=RayServiceSpecUpgradeStrategy(type=UPGRADE_STRATEGY),
                ray_cluster_config=RayServiceSpecRayClusterConfig(
                    ray_version=s.ray_version,
                    # Ray's token authentication (Ray >= 2.52; on by default only from 2.61): KubeRay makes a
                    # random token Secret per RayCluster, gives it to every Ray container and uses it for its
                    # own dashboard calls. Without it any pod that reaches the head's dashboard could submit
                    # a job, i.e. run code as root on the privileged GPU workers.
                    auth_options=RayServiceSpecRayClusterConfigAuthOptions(
                        mode=RayServiceSpecRayClusterConfigAuthOptionsMode.TOKEN
                    ),
                    head_group_spec=head_group_spec(s, fault_tolerant=store is not None),
                    worker_group_specs=[
                        worker_group_spec(s, "prefill", s.prefill_nodes, s.prefill_max_nodes),
                        worker_group_spec(s, "decode", s.decode_nodes, s.decode_max_nodes),
                    ],
                    enable_in_tree_autoscaling=True if s.autoscaling else None,
                    gcs_fault_tolerance_options=gcs_ft.fault_tolerance_options(store) if store else None,
                    autoscaler_options=autoscaler_options() if s.autoscaling else None,
                ),
            ),
        )
        self.ray_service.node.add_dependency(self.namespace_object)

    @property
    def ray_cluster_fingerprint(self) -> str:
        """A short hash of spec.rayClusterConfig: what KubeRay 1.7 does not apply to the running cluster under
        upgradeStrategy None. The worker groups' replicas, minReplicas and maxReplicas are in it too: KubeRay leaves
        them out of its own hash (utils.GenerateHashWithoutReplicasAndWorkersToDelete) and updates a RayService's
        running RayCluster only when that hash changes or worker groups are appended (shouldUpdateCluster)."""
        spec = self.ray_service.to_json()["spec"]["rayClusterConfig"]
        if "gcsFaultToleranceOptions" in spec:  # the store's address is a token of another stack: its presence counts
            spec["gcsFaultToleranceOptions"]["redisAddress"] = gcs_ft.PLACEHOLDER_ADDRESS
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def build_rayservice_chart(
    settings: Settings,
    gcs_store: gcs_ft.GcsStoreRef | None = None,
    endpoint_refs: endpoint.EndpointRefs | None = None,
) -> PdRayServiceChart:
    """The cdk8s chart in a cdk8s app of its own (``cdk8s.App.of(chart)``); `make synth` writes it to dist/."""
    props = RayServiceProps(
        settings=settings, gcs_store=gcs_store, endpoint_refs=endpoint_refs or endpoint.EndpointRefs()
    )
    return PdRayServiceChart(cdk8s.App(), "rayservice", props=props)
