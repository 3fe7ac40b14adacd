"""Day 2, continued: the states of deployed stacks, KubeRay's CRDs, and Kubernetes objects a deploy would apply and
then delete (renames, moves between stacks, an old manifest layout)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from preflight.deployed import Deployed, DeployedStack
from preflight.redeploy import check_stack_changes, check_stack_states
from preflight.redeploy_live import KUBERAY_CRD_LABEL, check_kuberay_crds
from preflight.template_plan import MODIFY, REMOVE, clashes_across_stacks, plan
from tests.day2_helpers import changes, deployed_as, redeploy_of, synth

# --- stack states and KubeRay's CRDs ---------------------------------------------------------------


def test_a_cluster_of_the_name_made_outside_the_stacks_is_refused() -> None:
    result = check_stack_states(redeploy_of(), Deployed(stacks={}, cluster_version="1.35"))
    assert (
        not result.ok
        and "exists, but not the stack ray-llm-multinode-cluster" in result.detail
        and "eksctl" in result.fix
    )


@pytest.mark.parametrize(
    ("status", "ok", "fragment"),
    [
        ("UPDATE_COMPLETE", True, "gpu=UPDATE_COMPLETE"),
        ("UPDATE_IN_PROGRESS", False, "wait until"),
        ("UPDATE_ROLLBACK_FAILED", False, "npx cdk rollback"),
        ("ROLLBACK_COMPLETE", False, "delete it (`make destroy STACKS="),
    ],
)
def test_stack_states(status: str, ok: bool, fragment: str) -> None:
    deployed = deployed_as()
    stacks = dict(deployed.stacks)
    gpu = stacks["ray-llm-multinode-gpu"]
    stacks[gpu.name] = DeployedStack(gpu.name, status, {}, gpu.template)
    result = check_stack_states(redeploy_of(), Deployed(stacks=stacks, cluster_version="1.35"))
    assert result.ok is ok and fragment in result.detail + result.fix


def _as_kuberay(deployed: Deployed, version: str) -> Deployed:
    import copy

    stacks = dict(deployed.stacks)
    serving = stacks["ray-llm-multinode-system"]
    template = copy.deepcopy(dict(serving.template))
    for resource in template["Resources"].values():
        if resource["Type"] == "Custom::AWSCDK-EKS-HelmChart" and resource["Properties"]["Chart"] == "kuberay-operator":
            resource["Properties"]["Version"] = version
    stacks[serving.name] = DeployedStack(serving.name, serving.status, {}, template)
    return Deployed(stacks=stacks, cluster_version=deployed.cluster_version, nodegroups=deployed.nodegroups)


def _kubectl(returncode: int, stdout: str, seen: list[list[str]]) -> Any:
    def run(args: list[str]) -> subprocess.CompletedProcess[str]:
        seen.append(args)
        return subprocess.CompletedProcess(
            ["kubectl", *args], returncode, stdout, "" if returncode == 0 else "Unable to connect to the server"
        )

    return run


def test_kuberay_upgrade_needs_its_crds_applied_first() -> None:
    older = _as_kuberay(deployed_as(), "1.6.0")
    seen: list[list[str]] = []
    stale = check_kuberay_crds(redeploy_of(), older, _kubectl(0, "1.6.0 1.6.0", seen))
    assert not stale.ok and "make kuberay-crds" in stale.fix and "Helm never upgrades them" in stale.detail
    assert seen and KUBERAY_CRD_LABEL.replace(".", "\\.") in seen[0][-1]
    assert check_kuberay_crds(redeploy_of(), older, _kubectl(0, "1.7.0 1.7.0", [])).ok
    unreachable = check_kuberay_crds(redeploy_of(), older, _kubectl(1, "", []))
    assert not unreachable.ok and "Unable to connect" in unreachable.detail


def test_same_kuberay_needs_no_cluster_access() -> None:
    seen: list[list[str]] = []
    assert check_kuberay_crds(redeploy_of(), deployed_as(), _kubectl(1, "", seen)).ok
    assert seen == []


# --- objects a deploy would apply and then delete --------------------------------------------------------


def test_a_kuberay_namespace_change_is_refused() -> None:
    """The chart's ClusterRoles have fixed names: a release in a second namespace cannot be installed
    beside the first, and `helm upgrade --install` in place would leave the old operator running."""
    found = [
        c
        for c in changes("system", {"KUBERAY_NAMESPACE": "ray-system"})
        if c.resource_type == "Custom::AWSCDK-EKS-HelmChart"
    ]
    assert [(c.action, c.properties) for c in found] == [(MODIFY, ("Namespace",))]
    result = check_stack_changes(redeploy_of(KUBERAY_NAMESPACE="ray-system"), deployed_as())
    assert not result.ok
    assert "Helm release kuberay-operator would move from namespace kuberay-operator to ray-system" in result.fix
    assert "make destroy STACKS=ray-llm-multinode-system" in result.fix


def test_admin_access_entries_are_keyed_by_principal() -> None:
    a, b = "arn:aws:iam::123456789012:role/a", "arn:aws:iam::123456789012:role/b"
    found = changes("cluster", {"ADMIN_PRINCIPAL_ARNS": b}, {"ADMIN_PRINCIPAL_ARNS": f"{a},{b}"})
    assert [(c.resource_type, c.action) for c in found] == [("AWS::EKS::AccessEntry", REMOVE)]
    reordered = changes("cluster", {"ADMIN_PRINCIPAL_ARNS": f"{b},{a}"}, {"ADMIN_PRINCIPAL_ARNS": f"{a},{b}"})
    assert reordered == []


def test_a_resource_created_beside_one_of_the_same_identity_is_refused() -> None:
    """E.g. an access entry whose logical id moved (an upgrade from index-keyed entries): EKS refuses a
    second entry for the principal while CloudFormation has not yet deleted the first."""
    import copy

    b = "arn:aws:iam::123456789012:role/b"
    _, after = synth(ADMIN_PRINCIPAL_ARNS=b)
    before = copy.deepcopy(after["cluster"])
    (logical_id,) = [
        k
        for k, v in before["Resources"].items()
        if v["Type"] == "AWS::EKS::AccessEntry" and v["Properties"]["PrincipalArn"] == b
    ]
    before["Resources"]["Admin0"] = before["Resources"].pop(logical_id)
    assert clashes_across_stacks([("cluster", plan(before, after["cluster"]))]) == [
        f"cluster: AWS::EKS::AccessEntry {logical_id} would be created while the one of the same identity in cluster"
        " still exists"
    ]


def test_renames_delete_only_the_old_objects() -> None:
    for env in ({"RAY_SERVICE_NAME": "ray-llm-2"}, {"NAMESPACE": "serving"}):
        assert clashes_across_stacks([("serving", changes("serving", env))]) == []


def test_an_old_layout_whose_manifest_holds_the_same_objects_is_refused() -> None:
    """Upgrading from a layout with one manifest under another construct id: CloudFormation would apply
    the new manifests and then `kubectl delete` the old one, deleting the namespace and the RayService."""
    import copy
    import json

    settings, templates = synth()
    before = copy.deepcopy(templates["serving"])
    manifests = {k: v for k, v in before["Resources"].items() if v["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"}
    merged = [obj for resource in manifests.values() for obj in json.loads(resource["Properties"]["Manifest"])]
    first = next(iter(manifests.values()))
    for logical_id in manifests:
        del before["Resources"][logical_id]
    before["Resources"]["PdRayService9A1B2C3D"] = {
        **first,
        "Properties": {**first["Properties"], "Manifest": json.dumps(merged)},
    }
    doomed = " ".join(clashes_across_stacks([("serving", plan(before, templates["serving"]))]))
    assert (
        "Namespace -/inference" in doomed
        and "RayService inference/ray-llm" in doomed
        and "NetworkPolicy inference/default-deny-ingress" in doomed
    )
    deployed = deployed_as()
    stacks = dict(deployed.stacks)
    serving = settings.stack_names["serving"]
    stacks[serving] = DeployedStack(serving, "UPDATE_COMPLETE", {}, before)
    result = check_stack_changes(
        redeploy_of(), Deployed(stacks=stacks, cluster_version="1.35", nodegroups=deployed.nodegroups)
    )
    assert not result.ok
    assert (
        f"{serving}: RayService inference/ray-llm would be applied and then deleted with an old resource of {serving}"
        in result.fix
    )
    assert "destroy the stack that holds it (`make destroy STACKS=...`)" in result.fix


def _moved(deployed: Deployed, resource_type: str, source: str, target: str) -> Deployed:
    """The deployed templates with every ``resource_type`` of stack ``source`` moved to stack ``target``
    (the layout before a resource changed stacks)."""
    import copy

    stacks = {name: copy.deepcopy(dict(stack.template)) for name, stack in deployed.stacks.items()}
    moving = {k: v for k, v in stacks[source]["Resources"].items() if v["Type"] == resource_type}
    for logical_id in moving:
        del stacks[source]["Resources"][logical_id]
    stacks[target]["Resources"].update({f"Old{k}": v for k, v in moving.items()})
    return Deployed(
        stacks={name: DeployedStack(name, "UPDATE_COMPLETE", {}, template) for name, template in stacks.items()},
        cluster_version=deployed.cluster_version,
        nodegroups=deployed.nodegroups,
    )


def test_a_helm_release_moving_to_an_earlier_stack_is_refused() -> None:
    """Upgrading from the layout where KubeRay was in the serving stack: the system stack would install
    the release, then the serving stack's update would uninstall it with its old resource."""
    old = _moved(deployed_as(), "Custom::AWSCDK-EKS-HelmChart", "ray-llm-multinode-system", "ray-llm-multinode-serving")
    result = check_stack_changes(redeploy_of(), old)
    assert not result.ok
    assert (
        "ray-llm-multinode-system: Helm release kuberay-operator/kuberay-operator would be applied and then deleted"
        " with an old resource of ray-llm-multinode-serving" in result.fix
    )


def test_an_add_on_moving_to_a_later_stack_is_safe() -> None:
    """CoreDNS moving from the cluster stack to the system stack: the cluster stack's update (cleanup
    included) deletes it before the system stack creates it."""
    old = _moved(deployed_as(), "AWS::EKS::Addon", "ray-llm-multinode-system", "ray-llm-multinode-cluster")
    assert check_stack_changes(redeploy_of(), old).ok


def test_the_system_nodegroup_moving_from_the_cluster_stack_is_a_move() -> None:
    """The upgrade from the four-stack layout: the system nodegroup leaves the cluster stack and the new
    system stack creates it again under the same name, after the cluster stack's update removed it."""
    old = _moved(deployed_as(), "AWS::EKS::Nodegroup", "ray-llm-multinode-system", "ray-llm-multinode-cluster")
    result = check_stack_changes(redeploy_of(), old)
    assert result.ok, result.fix
