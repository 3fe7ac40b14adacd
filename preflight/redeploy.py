"""Checks for a deploy over deployed stacks: every change applies cleanly, or it is refused before
anything is touched, with the procedure that applies it.

The deployed side is read from AWS (preflight.deployed); the new side is the synthesized assembly that
`make deploy` then deploys unchanged (`cdk deploy --app cdk.out`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from preflight.template_plan import (
    ADD,
    MODIFY,
    REMOVE,
    REPLACE,
    ResourceChange,
    clashes_across_stacks,
    helm_namespace_moves,
    identity_of,
    plan,
)

__all__ = ["MODIFY", "REPLACE", "Redeploy", "ResourceChange"]
from preflight.deployed import Deployed, find_resources
from preflight.results import CheckResult, fail, ok
from settings import Settings
from settings.configuration import RAY_CLUSTER_FINGERPRINT_OUTPUT

NODEGROUP = "AWS::EKS::Nodegroup"
# A nodegroup property change that makes EKS replace its nodes one by one (UpdateNodegroupVersion).
ROLLING_PROPERTIES = frozenset({"LaunchTemplate", "Version", "ReleaseVersion"})
_BUSY = ("_IN_PROGRESS",)


@dataclass(frozen=True)
class Redeploy:
    """What the day-2 checks need to know about the deploy being checked."""

    cluster_name: str
    region: str
    kubernetes_version: str
    gpu_nodegroup_name: str
    system_nodegroup_name: str
    gpu_node_count: int
    kuberay_version: str
    stack_prefix: str
    serving_stack: str
    templates: Mapping[str, Mapping[str, Any]]  # stack name -> synthesized template

    @staticmethod
    def of(settings: Settings, templates: Mapping[str, Mapping[str, Any]]) -> Redeploy:
        return Redeploy(
            cluster_name=settings.cluster_name,
            region=settings.region,
            kubernetes_version=settings.kubernetes_version,
            gpu_nodegroup_name=settings.gpu_nodegroup_name,
            system_nodegroup_name=settings.system_nodegroup_name,
            gpu_node_count=settings.gpu_node_count,
            kuberay_version=settings.kuberay_version,
            serving_stack=settings.stack_names["serving"],
            stack_prefix=settings.stack_prefix,
            templates=templates,
        )


def stack_plans(redeploy: Redeploy, deployed: Deployed) -> dict[str, list[ResourceChange]]:
    """For each deployed stack, what deploying the synthesized template would do to its resources."""
    return {
        name: plan(deployed.stacks[name].template, template)
        for name, template in redeploy.templates.items()
        if name in deployed.stacks
    }


def nodegroup_change(redeploy: Redeploy, deployed: Deployed, nodegroup_name: str) -> ResourceChange | None:
    """The planned change of the nodegroup deployed under ``nodegroup_name``, if any."""
    for changes in stack_plans(redeploy, deployed).values():
        for change in changes:
            names = {side.get("Properties", {}).get("NodegroupName") for side in (change.before, change.after)}
            if change.resource_type == NODEGROUP and nodegroup_name in names:
                return change
    return None


def rolls(change: ResourceChange | None) -> bool:
    """Whether a planned nodegroup change replaces its nodes (a new launch template version, AMI or version)."""
    return change is not None and change.action == MODIFY and bool(ROLLING_PROPERTIES & set(change.properties))


def check_stack_states(redeploy: Redeploy, deployed: Deployed) -> CheckResult:
    name = "stack-states"
    if not deployed.stacks and deployed.cluster_version is None:
        return ok(name, "no stack deployed yet: a first deploy")
    states = ", ".join(
        f"{s.name.removeprefix(redeploy.stack_prefix + '-')}={s.status}" for s in deployed.stacks.values()
    )
    if deployed.cluster_version is not None and f"{redeploy.stack_prefix}-cluster" not in deployed.stacks:
        return fail(
            name,
            f"an EKS cluster named {redeploy.cluster_name} exists, but not the stack {redeploy.stack_prefix}-cluster"
            " that would own it",
            "it was made by another tool (eksctl?): delete it, or choose another CLUSTER_NAME",
        )
    for stack in deployed.stacks.values():
        if stack.status.endswith(_BUSY):
            return fail(
                name,
                states,
                f"wait until {stack.name} leaves {stack.status} (another deploy or destroy is running), then run the"
                " preflight again",
            )
        if stack.status == "UPDATE_ROLLBACK_FAILED":
            return fail(
                name,
                states,
                f"finish the rollback of {stack.name} first: `npx cdk rollback {stack.name}` (or"
                " continue-update-rollback in the console)",
            )
        if stack.status in ("ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "CREATE_FAILED", "DELETE_FAILED"):
            return fail(
                name,
                states,
                f"{stack.name} cannot be updated from {stack.status}: delete it (`make destroy STACKS={stack.name}`)"
                " and deploy again",
            )
    return ok(name, states)


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def check_kubernetes_version(redeploy: Redeploy, deployed: Deployed) -> CheckResult:
    name = "kubernetes-version"
    target = redeploy.kubernetes_version
    current = deployed.cluster_version
    if current is None:
        return ok(name, f"no cluster {redeploy.cluster_name} yet: it is created at {target}")
    if current == target:
        lagging = [f"{n.name}={n.version}" for n in deployed.nodegroups.values() if n.version and n.version != target]
        if lagging:
            return ok(
                name,
                f"control plane at {target}; nodegroups brought to it by this deploy: {', '.join(sorted(lagging))}",
            )
        return ok(name, f"control plane and nodegroups at {target}")
    (cur_major, cur_minor), (new_major, new_minor) = _minor(current), _minor(target)
    if (new_major, new_minor) < (cur_major, cur_minor):
        return fail(
            name,
            f"the cluster runs {current}; K8S_VERSION={target}",
            f"EKS cannot downgrade: set K8S_VERSION={current} (or destroy and redeploy at {target})",
        )
    if new_major != cur_major or new_minor - cur_minor > 1:
        step = f"{cur_major}.{cur_minor + 1}"
        return fail(
            name,
            f"the cluster runs {current}; K8S_VERSION={target} skips a minor version",
            f"EKS upgrades one minor version at a time: deploy K8S_VERSION={step} first (`make lookup` then `make"
            " deploy`), then each next version",
        )
    unversioned = sorted(
        str(resource["Properties"].get("AddonName"))
        for template in redeploy.templates.values()
        for resource in find_resources(template, "AWS::EKS::Addon").values()
        if "AddonVersion" not in resource.get("Properties", {})
    )
    if unversioned:
        return fail(
            name,
            f"upgrade {current} -> {target}, but the add-ons {', '.join(unversioned)} have no version for {target} and"
            " would stay where they are",
            f"run `make lookup` (caches EKS's default add-on versions for K8S_VERSION={target}), commit"
            " cdk.context.json, then deploy",
        )
    return ok(name, f"upgrade {current} -> {target}: the control plane first, then the add-ons and each nodegroup roll")


def _procedure(change: ResourceChange, redeploy: Redeploy, deployed: Deployed) -> str | None:
    """How to apply a change that cannot be deployed as it is; None when it can."""
    props = set(change.replaced_by)
    after = change.after.get("Properties", {})
    before = change.before.get("Properties", {})
    if change.resource_type == NODEGROUP and change.action == REPLACE:
        name_before, name_after = before.get("NodegroupName"), after.get("NodegroupName")
        if name_before == name_after:
            return (
                f"nodegroup {name_after} would be replaced ({', '.join(sorted(props))}) under the same name, which EKS"
                " refuses ('already exists'): change GPU_NODEGROUP_NAME/SYSTEM_NODEGROUP_NAME in the same deploy (the"
                " new group is created beside the old one), or destroy the stack that holds it first"
            )
        parked = redeploy.gpu_node_count == 0 and all(
            n.desired_size == 0 for n in deployed.nodegroups.values() if n.name == name_before
        )
        if name_after == redeploy.gpu_nodegroup_name and not parked:
            return (
                f"GPU nodegroup {name_before} -> {name_after}: the new group would need GPUs of its own (quota and"
                " placement-group room) while the old one holds the RayService's: park first (`GPU_NODE_COUNT=0 make"
                " deploy`), deploy the change with GPU_NODE_COUNT=0, then unpark"
            )
        return None  # a renamed system nodegroup, or a parked GPU one: the new group starts beside the old one
    if change.action == REPLACE and change.resource_type in ("AWS::EC2::VPC", "AWS::EC2::Subnet"):
        return (
            f"{change.resource_type} {change.logical_id} would be replaced ({', '.join(sorted(props))}: VPC_CIDR or the"
            " AZs, which follow GPU_AZ and the cached look-up) while the cluster uses it: keep the deployed value, or"
            " `make destroy` and deploy again"
        )
    if change.action == REPLACE and change.resource_type == "AWS::EKS::Cluster":
        return (
            f"the EKS cluster would be replaced ({', '.join(sorted(props))}): keep the deployed value, or `make"
            " destroy` and deploy again"
        )
    if change.protected:
        return (
            f"{change.describe()}: keep the deployed value, or destroy the stack that holds it (`make destroy"
            " STACKS=...`) and deploy again"
        )
    return None


def _desired_size_reset(change: ResourceChange, redeploy: Redeploy, deployed: Deployed) -> str | None:
    """A ScalingConfig change makes CloudFormation send the template's DesiredSize: with PREFILL/DECODE_MAX_REPLICAS
    the Cluster Autoscaler may hold the GPU nodegroup above it, and the update would drain busy GPU nodes."""
    if (
        change.resource_type != NODEGROUP
        or change.action != MODIFY
        or "ScalingConfig" not in change.properties
        or redeploy.gpu_node_count == 0
    ):
        return None
    name = str(change.after.get("Properties", {}).get("NodegroupName"))
    running = next((n for n in deployed.nodegroups.values() if n.name == name), None)
    desired = int(change.after.get("Properties", {}).get("ScalingConfig", {}).get("DesiredSize", 0))
    # Nodes the autoscaler added are those above the deployed minimum: a lower new minimum resets only those.
    deployed_minimum = int((change.before or {}).get("Properties", {}).get("ScalingConfig", {}).get("MinSize", 0))
    if running is None or running.desired_size <= max(desired, deployed_minimum):
        return None
    return (
        f"nodegroup {name} runs {running.desired_size} nodes (the Cluster Autoscaler grew it) and this deploy changes"
        f" its scaling, so CloudFormation would set it back to {desired} and drain busy GPU nodes: deploy once it is"
        f" back at {max(desired, deployed_minimum)} (idle nodes go ~12 min after the load: `make status`), or park"
        " first"
    )


def check_stack_changes(redeploy: Redeploy, deployed: Deployed) -> CheckResult:
    name = "stack-changes"
    plans = stack_plans(redeploy, deployed)
    if not plans:
        return ok(name, "nothing deployed to change")
    refused: list[str] = []
    ordered = [
        (s, plan(deployed.stacks[s].template if s in deployed.stacks else None, t))
        for s, t in redeploy.templates.items()
    ]
    names = [s for s, _ in ordered]
    for stack, changes in plans.items():
        # A resource that moves to a later stack (the same identity added there) is deleted by this stack's
        # update before the later stack creates it again: a move, not a loss.
        added_later = {
            i
            for _, later in ordered[names.index(stack) + 1 :]
            for c in later
            if c.action in (ADD, REPLACE) and (i := identity_of(c.after))
        }
        for change in changes:
            if change.action == REMOVE and identity_of(change.before) in added_later:
                continue
            procedure = _procedure(change, redeploy, deployed)
            if procedure:
                refused.append(f"{stack}: {procedure}")
            if (
                change.resource_type == NODEGROUP
                and change.action == MODIFY
                and "Version" in change.properties
                and len(change.properties) > 1
            ):
                others = ", ".join(p for p in change.properties if p != "Version")
                refused.append(
                    f"{stack}: nodegroup {change.after.get('Properties', {}).get('NodegroupName')} would change its"
                    f" Kubernetes version together with {others}, which EKS refuses in one update: deploy the"
                    " K8S_VERSION change alone first, then the rest"
                )
            reset = _desired_size_reset(change, redeploy, deployed)
            if reset:
                refused.append(f"{stack}: {reset}")
        for move in helm_namespace_moves(changes):
            refused.append(
                f"{stack}: {move}: destroy the stack first (`make destroy STACKS={stack}`), then deploy with the new"
                " namespace"
            )
    for clash in clashes_across_stacks(ordered):
        refused.append(
            f"{clash}: remove the old one first — destroy the stack that holds it (`make destroy STACKS=...`) or deploy"
            " without it — then deploy"
        )
    summary = "; ".join(f"{s.removeprefix(redeploy.stack_prefix + '-')}: {len(c)} change(s)" for s, c in plans.items())
    if refused:
        return fail(name, f"{len(refused)} change(s) cannot be deployed as they are ({summary})", " | ".join(refused))
    rolling = [
        str(c.after.get("Properties", {}).get("NodegroupName"))
        for changes in plans.values()
        for c in changes
        if c.resource_type == NODEGROUP and rolls(c)
    ]
    suffix = f"; rolling update of {', '.join(rolling)}" if rolling else ""
    return ok(name, f"every change applies in place ({summary}){suffix}")


def _fingerprint(template: Mapping[str, Any] | None) -> str | None:
    output = (template or {}).get("Outputs", {}).get(RAY_CLUSTER_FINGERPRINT_OUTPUT, {})
    value = output.get("Value")
    return value if isinstance(value, str) else None


def check_ray_cluster_change(redeploy: Redeploy, deployed: Deployed) -> CheckResult:
    """A RayCluster change over a running RayService is refused with the command that re-creates it.

    With upgradeStrategy None KubeRay applies a new serveConfigV2 in place and ignores the RayCluster's changes
    (k8s_constructs/ray_service.py). A deploy that changes both would leave a serve config running on pods that lack
    what it needs. The worst case is the endpoint's: SERVE_EXPOSURE leaving `cluster` turns API keys on, the serve
    config then names the API-key ingress, whose module and key volume are RayCluster changes; Ray 2.58 halts the new
    application at DEPLOY_FAILED and keeps the old, keyless deployments serving (serve/_private/application_state.py),
    while the same deploy puts a load balancer in front of them."""
    name = "ray-cluster-change"
    stack = redeploy.serving_stack
    running = deployed.stacks.get(stack)
    new = _fingerprint(redeploy.templates.get(stack))
    if running is None or new is None:
        return ok(name, "no RayService deployed yet: its RayCluster is created with this deploy")
    old = _fingerprint(running.template)
    if old == new:
        return ok(name, f"the RayCluster is unchanged ({RAY_CLUSTER_FINGERPRINT_OUTPUT} {new}): changes apply in place")
    return fail(
        name,
        f"this deploy changes the RayCluster ({RAY_CLUSTER_FINGERPRINT_OUTPUT} {old} -> {new}), which KubeRay does not"
        " apply to a running RayService: its serve config would run on pods without what it needs (with API keys"
        " turning on, the old keyless application would keep serving behind the new load balancer)",
        f"re-create the serving stack: `make destroy STACKS={stack} && make deploy` (GPU nodes stay)",
    )
