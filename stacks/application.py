"""Wires the stacks together: one Settings in, one CDK App out."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import App, Environment, Stack, Tags

from settings import Settings
from stacks import nag
from stacks.app_base import DETERMINISTIC_CONTEXT, PROJECT_TAG, new_app, synthesize_or_say_why
from stacks.cluster_stack import ClusterStack
from stacks.gpu_capacity_stack import GpuCapacityStack
from stacks.network_stack import NetworkStack
from stacks.observability_stack import ObservabilityStack
from stacks.serving_stack import ServingStack
from stacks.system_stack import SystemStack

__all__ = ["DETERMINISTIC_CONTEXT", "PROJECT_TAG", "Deployment", "build_stacks", "new_app", "synthesize_or_say_why"]


@dataclass(frozen=True)
class Deployment:
    """The stacks of one deployment, in the order `cdk deploy` creates them (destroy is the reverse)."""

    network: NetworkStack
    cluster: ClusterStack
    system: SystemStack
    gpu: GpuCapacityStack
    serving: ServingStack
    observability: ObservabilityStack | None = None

    @property
    def stacks(self) -> tuple[Stack, ...]:
        return (self.network, self.cluster, self.system, self.gpu, self.serving) + (
            (self.observability,) if self.observability else ()
        )


def build_stacks(app: App, settings: Settings) -> Deployment:
    # Region only, no account: the templates do not depend on who synthesizes them and no CDK
    # context look-up (which would need credentials) is triggered.
    env = Environment(region=settings.region)
    names = settings.stack_names
    network = NetworkStack(app, names["network"], settings=settings, env=env)
    cluster = ClusterStack(
        app, names["cluster"], settings=settings, vpc=network.vpc, logs_key=network.logs_key, env=env
    )
    system = SystemStack(app, names["system"], settings=settings, cluster=cluster.cluster_ref, env=env)
    gpu = GpuCapacityStack(
        app,
        names["gpu"],
        settings=settings,
        cluster=cluster.cluster_ref,
        vpc=network.vpc,
        gpu_subnet=network.private_subnet_in(settings.gpu_az),
        env=env,
    )
    serving = ServingStack(
        app,
        names["serving"],
        settings=settings,
        cluster=cluster.cluster_ref,
        system_nodegroup=system.system_nodegroup,
        gpu_nodegroup=gpu.gpu_nodes.nodegroup,
        kuberay=system.kuberay,
        gcs_store=system.gcs_store,
        load_balancer_controller=system.load_balancer_controller,
        env=env,
    )
    observability = (
        ObservabilityStack(
            app,
            names["observability"],
            settings=settings,
            cluster=cluster.cluster_ref,
            vpc=network.vpc,
            system_nodegroup=system.system_nodegroup,
            env=env,
        )
        if settings.observability
        else None
    )
    for stack in (network, cluster, system, gpu, serving):
        nag.acknowledge_checkov_on_cdk_lambdas(stack)
    Tags.of(app).add("project", PROJECT_TAG)
    Tags.of(app).add("cluster", settings.cluster_name)
    return Deployment(
        network=network, cluster=cluster, system=system, gpu=gpu, serving=serving, observability=observability
    )
