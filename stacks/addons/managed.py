"""Every EKS managed add-on, declared once: its name, the stack that installs it, its configuration values
and where its version comes from. The node add-ons (network, kube-proxy, Pod Identity) are DaemonSets, ACTIVE
without nodes, so both nodegroups can start as soon as the cluster stack is done; CoreDNS (a Deployment) and
the CloudWatch add-on need nodes and go with the system nodes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from settings import Settings
from stacks import nag
from stacks.addons.base import DeployTimeRefs, PodIdentityGrant, spread_affinity


def _no_configuration(_: Settings) -> dict[str, Any] | None:
    return None


@dataclass(frozen=True)
class ManagedAddon:
    name: str
    stack: str  # the part of Settings.stack_names whose stack installs it
    construct_id: str  # names its logical ID: never changed once deployed
    configuration: Callable[[Settings], dict[str, Any] | None] = field(default=_no_configuration)
    # The version follows K8S_VERSION (settings/versions.py EKS_ADDON_VERSIONS, cached by `make lookup`) and a
    # version bump overwrites fields changed by hand: the stack is the source of truth for its configuration.
    follows_kubernetes_version: bool = True
    purpose: str = ""
    # Its pods' EKS Pod Identity (namespace and logical-ID prefix given): created before the add-on, which waits for it.
    pod_identity: PodIdentityGrant | None = None

    def install(self, scope: Construct, *, cluster: eks.ICluster, settings: Settings) -> eks.Addon:
        association = None
        if self.pod_identity is not None:
            if self.pod_identity.namespace is None:
                raise ValueError(
                    f"{self.name}: a managed add-on's Pod Identity names the namespace of its service account"
                )
            association = self.pod_identity.create(
                scope, cluster=cluster, settings=settings, namespace=self.pod_identity.namespace, ids=self.construct_id
            )
        version = dict(settings.eks_addon_versions).get(self.name) if self.follows_kubernetes_version else None
        addon = eks.Addon(
            scope,
            self.construct_id,
            cluster=cluster,
            addon_name=self.name,
            addon_version=version,
            preserve_on_delete=False,
            configuration_values=self.configuration(settings),
        )
        if self.follows_kubernetes_version:
            cast(eks.CfnAddon, addon.node.default_child).add_property_override("ResolveConflicts", "OVERWRITE")
        if association is not None:
            addon.node.add_dependency(association)
        return addon


def _coredns_configuration(settings: Settings) -> dict[str, Any] | None:
    """SYSTEM_NODE_COUNT >= 2: CoreDNS's two replicas preferably in different AZs (the add-on's default spreads them
    over hosts only). Its schema's `affinity` replaces the default, so the default's node terms are kept."""
    if settings.system_node_count < 2:
        return None
    node_terms = [
        {
            "matchExpressions": [
                {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
            ]
        }
    ]
    return {
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": node_terms}},
            **spread_affinity({"k8s-app": "kube-dns"}),
        }
    }


def _cloudwatch_configuration(_: Settings) -> dict[str, Any]:
    """Container Insights with its default node agent (GPU via DCGM, EFA)."""
    return {"containerInsights": {"enabled": True}}


CLOUDWATCH_AGENT_POLICY = "CloudWatchAgentServerPolicy"


def _cloudwatch_agent_grant(role: iam.Role, _: Settings, __: DeployTimeRefs) -> None:
    role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(CLOUDWATCH_AGENT_POLICY))
    nag.acknowledge(
        role,
        "AwsSolutions-IAM4",
        "The CloudWatch agent's AWS managed policy: what the amazon-cloudwatch-observability add-on documents for its"
        " agent.",
        applies_to=[f"Policy::arn:<AWS::Partition>:iam::aws:policy/{CLOUDWATCH_AGENT_POLICY}"],
    )


MANAGED_ADDONS: tuple[ManagedAddon, ...] = (
    # The VPC CNI's network policy agent enforces the serving namespace's NetworkPolicies (none would be
    # enforced without it: EKS ships the agent off).
    ManagedAddon(
        "vpc-cni",
        "cluster",
        "Addon-vpc-cni",
        lambda s: {"enableNetworkPolicy": "true"},
        purpose="pod networking, NetworkPolicy enforcement",
    ),
    ManagedAddon("kube-proxy", "cluster", "Addon-kube-proxy", purpose="Service routing on the nodes"),
    ManagedAddon(
        "eks-pod-identity-agent", "cluster", "Addon-eks-pod-identity-agent", purpose="EKS Pod Identity credentials"
    ),
    ManagedAddon(
        "coredns", "system", "Addon-coredns", _coredns_configuration, purpose="cluster DNS, on the system nodes"
    ),
    ManagedAddon(
        "amazon-cloudwatch-observability",
        "observability",
        "CloudWatchObservability",
        _cloudwatch_configuration,
        follows_kubernetes_version=False,
        purpose="Container Insights with GPU and EFA metrics (OBSERVABILITY=on)",
        # Where the add-on runs its agent (fixed by the add-on).
        pod_identity=PodIdentityGrant(
            "cloudwatch-agent",
            lambda s: "writes metrics and logs to CloudWatch",
            _cloudwatch_agent_grant,
            namespace="amazon-cloudwatch",
            ids="CloudWatchAgent",
        ),
    ),
)


def install_managed(scope: Construct, stack: str, *, cluster: eks.ICluster, settings: Settings) -> dict[str, eks.Addon]:
    """The stack's managed add-ons, in declaration order; name -> add-on."""
    return {a.name: a.install(scope, cluster=cluster, settings=settings) for a in MANAGED_ADDONS if a.stack == stack}


def managed_table_markdown(settings: Settings) -> str:
    """The docs' table of the managed add-ons: where each version comes from."""
    rows = ["| Managed add-on | Stack | Version | What for |", "|---|---|---|---|"]
    versions = dict(settings.eks_addon_versions)
    for addon in MANAGED_ADDONS:
        version = (
            (versions.get(addon.name) or "EKS's default for K8S_VERSION (`make lookup` pins it)")
            if addon.follows_kubernetes_version
            else "EKS's default"
        )
        rows.append(f"| `{addon.name}` | `{addon.stack}` | {version} | {addon.purpose} |")
    return "\n".join(rows)
