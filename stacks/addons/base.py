"""What a Helm add-on declares, once: its pinned chart, release, namespace, values from the Settings, the values
only known at deploy time (another stack's resources), its EKS Pod Identity (the service account its pods run as
and what that role may do), when it is installed and which stack (and construct) installs it. The stacks, the
preflight's chart-index check, dist/helm/ and the docs' chart table are derived from the registry
(stacks/addons/__init__.py); the deploy-time values appear there as placeholders."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from settings import Settings
from settings.versions import HelmChartPin
from stacks.helm import pinned_release
from stacks.pod_identity import pod_identity_role


def _always(_: Settings) -> bool:
    return True


@dataclass(frozen=True)
class DeployTimeRefs:
    """What an add-on's values may take from the deployment itself (tokens at synth, values at deploy): pods
    that cannot reach IMDS cannot discover them."""

    vpc_id: str

    @staticmethod
    def of(cluster: eks.ICluster) -> DeployTimeRefs:
        return DeployTimeRefs(vpc_id=cluster.vpc.vpc_id)


# What dist/helm/ and the docs show in their place.
PLACEHOLDERS: Final = DeployTimeRefs(vpc_id="<deploy time: the network stack's VPC id>")


@dataclass(frozen=True)
class PodIdentityGrant:
    """An add-on's EKS Pod Identity: the ServiceAccount its pods call AWS as (its values must name it: a chart
    value `serviceAccount.name` without a grant fails tests/test_addons.py), one line on what the role is for
    (its description), and the statements it may use."""

    service_account: str
    does: Callable[[Settings], str]
    grant: Callable[[iam.Role, Settings, DeployTimeRefs], None]
    namespace: str | None = None  # a managed add-on's (a Helm add-on's is its release's)
    ids: str | None = None  # the prefix of the role's and association's logical IDs; default: the add-on's construct id

    def create(
        self, scope: Construct, *, cluster: eks.ICluster, settings: Settings, namespace: str, ids: str
    ) -> eks.CfnPodIdentityAssociation:
        """The role with its statements and the association, named {ids}Role and {ids}PodIdentity (never renamed)."""
        prefix = self.ids or ids
        role, association = pod_identity_role(
            scope,
            f"{prefix}Role",
            f"{prefix}PodIdentity",
            cluster=cluster,
            namespace=self.namespace or namespace,
            service_account=self.service_account,
            description=(
                f"EKS Pod Identity of {self.namespace or namespace}/{self.service_account}: {self.does(settings)}"
            ),
        )
        self.grant(role, settings, DeployTimeRefs.of(cluster))
        return association


@dataclass(frozen=True)
class HelmAddon:
    construct_id: str  # the construct's id: it names the release's logical ID, so it never changes
    stack: str  # the part of Settings.stack_names whose stack installs it
    pin: Callable[[Settings], HelmChartPin]
    release: str
    namespace: Callable[[Settings], str]
    values: Callable[[Settings], dict[str, Any]]
    enabled: Callable[[Settings], bool] = field(default=_always)
    create_namespace: bool = False
    purpose: str = ""  # one line for the docs' chart table
    # Its role and association are named after construct_id (…Role and …PodIdentity), so never renamed either.
    pod_identity: PodIdentityGrant | None = None
    # Values that name the deployment's own resources (merged over `values`; placeholders in dist/ and the docs).
    deploy_values: Callable[[DeployTimeRefs], dict[str, Any]] | None = None

    def all_values(self, settings: Settings, refs: DeployTimeRefs) -> dict[str, Any]:
        values = self.values(settings)
        late = self.deploy_values(refs) if self.deploy_values else {}
        clash = sorted(set(values) & set(late))
        if clash:
            raise ValueError(f"{self.release}: {clash} set both from the settings and at deploy time")
        return {**values, **late}

    def install(self, scope: Construct, *, cluster: eks.ICluster, settings: Settings) -> eks.HelmChart:
        release = pinned_release(
            scope,
            self.construct_id,
            cluster=cluster,
            pin=self.pin(settings),
            release=self.release,
            namespace=self.namespace(settings),
            values=self.all_values(settings, DeployTimeRefs.of(cluster)),
            create_namespace=self.create_namespace,
        )
        if self.pod_identity is not None:
            # Its Pod Identity exists before its pods start (they read credentials once, at start).
            identity = self.pod_identity.create(
                scope, cluster=cluster, settings=settings, namespace=self.namespace(settings), ids=self.construct_id
            )
            release.node.add_dependency(identity)
        return release


def spread_affinity(match_labels: dict[str, str]) -> dict[str, Any]:
    """Pods of one Deployment preferably on different AZs, then on different nodes (preferred: with fewer system
    nodes than replicas they still schedule)."""
    selector = {"matchLabels": dict(match_labels)}
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {"labelSelector": selector, "topologyKey": "topology.kubernetes.io/zone"},
                },
                {"weight": 50, "podAffinityTerm": {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}},
            ]
        }
    }
