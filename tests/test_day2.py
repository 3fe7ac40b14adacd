"""Day 2: what a deploy over a deployed stack does, setting by setting, from pairs of real synths.

"Before" is the default synth (what is deployed), "after" the same app with one change. The planner
reads CloudFormation's own create-only property lists (the schemas cfn-lint ships), so a replacement
here is one CloudFormation would make.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from preflight.deployed import Deployed, DeployedNodegroup, DeployedStack
from preflight.redeploy import (
    KUBERAY_CRD_LABEL,
    Redeploy,
    check_kuberay_crds,
    check_kubernetes_version,
    check_stack_changes,
    check_stack_states,
    nodegroup_change,
    rolls,
)
from preflight.template_plan import ADD, MODIFY, PROTECTED_TYPES, REMOVE, REPLACE, ResourceChange, clashes_across_stacks, plan
from settings import Settings
from stacks.application import build_stacks, new_app
from tests.conftest import settings_for

PARTS = ("network", "cluster", "system", "gpu", "serving")


@cache
def _synth(items: frozenset[tuple[str, str]]) -> tuple[Settings, dict[str, dict[str, Any]]]:
    """One configuration's templates by part (no cdk-nag: only the templates matter here)."""
    import json

    settings = settings_for(dict(items))
    outdir = Path(tempfile.mkdtemp(prefix="day2-"))
    app = new_app(str(outdir))
    build_stacks(app, settings)
    app.synth()
    return settings, {part: json.loads((outdir / f"{name}.template.json").read_text()) for part, name in settings.stack_names.items()}


def synth(**env: str) -> tuple[Settings, dict[str, dict[str, Any]]]:
    return _synth(frozenset(env.items()))


def changes(part: str, after_env: Mapping[str, str], before_env: Mapping[str, str] | None = None) -> list[ResourceChange]:
    return plan(synth(**(before_env or {}))[1][part], synth(**after_env)[1][part])


def deployed_as(env: Mapping[str, str] | None = None, *, gpu_desired: int = 2, cluster_version: str = "1.35") -> Deployed:
    settings, templates = synth(**(env or {}))
    stacks = {settings.stack_names[p]: DeployedStack(settings.stack_names[p], "UPDATE_COMPLETE", {}, templates[p]) for p in PARTS}
    nodegroups = {
        settings.gpu_nodegroup_name: DeployedNodegroup(settings.gpu_nodegroup_name, cluster_version, gpu_desired, "ACTIVE"),
        settings.system_nodegroup_name: DeployedNodegroup(settings.system_nodegroup_name, cluster_version, 1, "ACTIVE"),
    }
    return Deployed(stacks=stacks, cluster_version=cluster_version, nodegroups=nodegroups)


def redeploy_of(**env: str) -> Redeploy:
    settings, templates = synth(**env)
    return Redeploy.of(settings, {settings.stack_names[p]: templates[p] for p in PARTS})


def _only(found: list[ResourceChange], resource_type: str) -> ResourceChange:
    (change,) = [c for c in found if c.resource_type == resource_type]
    return change


# --- the planner itself -------------------------------------------------------------------------------


def test_same_templates_plan_nothing() -> None:
    for part in PARTS:
        assert changes(part, {}) == []


def test_planner_reads_create_only_properties_from_the_cloudformation_schemas() -> None:
    before = {"Resources": {"Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16", "Tags": []}}}}
    after = {"Resources": {"Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.1.0.0/16", "Tags": []}}}}
    (change,) = plan(before, after)
    assert (change.action, change.replaced_by, change.protected) == (REPLACE, ("CidrBlock",), True)
    tagged = {"Resources": {"Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16", "Tags": [{"Key": "a", "Value": "b"}]}}}}
    assert [c.action for c in plan(before, tagged)] == [MODIFY]


def test_a_replacement_propagates_to_what_refers_to_it() -> None:
    before = {
        "Resources": {
            "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}},
            "Subnet": {"Type": "AWS::EC2::Subnet", "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": "10.0.0.0/19"}},
        }
    }
    after = {"Resources": {**before["Resources"], "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.1.0.0/16"}}}}
    assert {c.logical_id: c.action for c in plan(before, after)} == {"Vpc": REPLACE, "Subnet": REPLACE}


# --- setting by setting -------------------------------------------------------------------------------


def test_system_node_type_is_a_rolling_update_not_a_replacement() -> None:
    found = changes("system", {"SYSTEM_NODE_TYPE": "m7i.2xlarge"})
    assert _only(found, "AWS::EC2::LaunchTemplate").action == MODIFY
    nodegroup = _only(found, "AWS::EKS::Nodegroup")
    assert nodegroup.action == MODIFY and nodegroup.properties == ("LaunchTemplate",) and rolls(nodegroup)
    assert not [c for c in found if c.action == REPLACE]


def test_gpu_node_type_is_a_rolling_update_not_a_replacement() -> None:
    found = changes("gpu", {"GPU_NODE_TYPE": "g6.16xlarge"})
    assert not [c for c in found if c.action in (REPLACE, REMOVE)]
    assert rolls(_only(found, "AWS::EKS::Nodegroup"))
    assert check_stack_changes(redeploy_of(GPU_NODE_TYPE="g6.16xlarge"), deployed_as()).ok


def test_gpu_az_is_refused_with_the_procedure() -> None:
    nodegroup = _only(changes("gpu", {"GPU_AZ": "sa-east-1b"}), "AWS::EKS::Nodegroup")
    assert (nodegroup.action, nodegroup.replaced_by) == (REPLACE, ("Subnets",))
    result = check_stack_changes(redeploy_of(GPU_AZ="sa-east-1b"), deployed_as())
    assert not result.ok
    assert "nodegroup gpu-workers would be replaced (Subnets) under the same name" in result.fix
    assert "GPU_NODEGROUP_NAME" in result.fix


def test_gpu_az_with_a_new_nodegroup_name_goes_through_when_parked_only() -> None:
    moved = {"GPU_AZ": "sa-east-1b", "GPU_NODEGROUP_NAME": "gpu-workers-b"}
    running = check_stack_changes(redeploy_of(**moved), deployed_as())
    assert not running.ok and "park first (`GPU_NODE_COUNT=0 make deploy`)" in running.fix
    parked = check_stack_changes(redeploy_of(**moved, GPU_NODE_COUNT="0"), deployed_as({"GPU_NODE_COUNT": "0"}, gpu_desired=0))
    assert parked.ok, parked.fix


def test_renamed_system_nodegroup_starts_beside_the_old_one() -> None:
    nodegroup = _only(changes("system", {"SYSTEM_NODEGROUP_NAME": "system-b"}), "AWS::EKS::Nodegroup")
    assert nodegroup.action == REPLACE and "NodegroupName" in nodegroup.replaced_by
    assert check_stack_changes(redeploy_of(SYSTEM_NODEGROUP_NAME="system-b"), deployed_as()).ok


def test_vpc_cidr_is_refused() -> None:
    found = changes("network", {"VPC_CIDR": "10.1.0.0/16"})
    assert _only(found, "AWS::EC2::VPC").action == REPLACE
    result = check_stack_changes(redeploy_of(VPC_CIDR="10.1.0.0/16"), deployed_as())
    assert not result.ok and "AWS::EC2::VPC" in result.fix and "`make destroy`" in result.fix


def test_kubernetes_version_alone_applies_in_place_and_rolls_the_nodes() -> None:
    assert _only(changes("cluster", {"K8S_VERSION": "1.36"}), "AWS::EKS::Cluster").properties == ("Version",)
    gpu = _only(changes("gpu", {"K8S_VERSION": "1.36"}), "AWS::EKS::Nodegroup")
    assert gpu.properties == ("Version",) and rolls(gpu)
    assert check_stack_changes(redeploy_of(K8S_VERSION="1.36"), deployed_as()).ok


def test_kubernetes_version_mixed_with_another_nodegroup_change_is_refused() -> None:
    result = check_stack_changes(redeploy_of(K8S_VERSION="1.36", SYSTEM_NODE_TYPE="m7i.2xlarge"), deployed_as())
    assert not result.ok
    assert "nodegroup system-nodes would change its Kubernetes version together with LaunchTemplate" in result.fix


def _with_addon_versions(redeploy: Redeploy, kubernetes_version: str) -> Redeploy:
    """The same deploy synthesized after `make lookup` cached the add-on versions of ``kubernetes_version``."""
    import json
    from dataclasses import replace

    from settings import load_settings
    from settings.versions import addon_versions_context_key

    context = {
        addon_versions_context_key("sa-east-1", kubernetes_version): {
            "vpc-cni": "v1.21.0-eksbuild.1",
            "kube-proxy": "v1.36.0-eksbuild.2",
            "coredns": "v1.13.1-eksbuild.1",
            "eks-pod-identity-agent": "v1.3.9-eksbuild.1",
        }
    }
    settings = load_settings({"K8S_VERSION": kubernetes_version}, context)
    outdir = Path(tempfile.mkdtemp(prefix="day2-addons-"))
    app = new_app(str(outdir))
    build_stacks(app, settings)
    app.synth()
    templates = {name: json.loads((outdir / f"{name}.template.json").read_text()) for name in settings.stack_names.values()}
    return replace(redeploy, templates=templates)


def test_cached_add_on_versions_follow_the_kubernetes_version() -> None:
    upgraded = _with_addon_versions(redeploy_of(K8S_VERSION="1.36"), "1.36")
    cluster = upgraded.templates["ray-llm-multinode-cluster"]
    addons = {r["Properties"]["AddonName"]: r["Properties"].get("AddonVersion") for r in cluster["Resources"].values() if r["Type"] == "AWS::EKS::Addon"}
    assert addons["kube-proxy"] == "v1.36.0-eksbuild.2" and None not in addons.values()
    found = plan(synth()[1]["cluster"], cluster)
    assert sorted(c.properties for c in found if c.resource_type == "AWS::EKS::Addon") == [("AddonVersion",)] * 3
    assert check_kubernetes_version(upgraded, deployed_as(cluster_version="1.35")).ok


def test_an_upgrade_without_add_on_versions_is_refused() -> None:
    result = check_kubernetes_version(redeploy_of(K8S_VERSION="1.36"), deployed_as(cluster_version="1.35"))
    assert not result.ok and "would stay where they are" in result.detail and "make lookup" in result.fix


@pytest.mark.parametrize(
    ("current", "target", "ok", "fragment"),
    [
        ("1.35", "1.35", True, "at 1.35"),
        ("1.34", "1.36", False, "deploy K8S_VERSION=1.35 first"),
        ("1.36", "1.35", False, "EKS cannot downgrade: set K8S_VERSION=1.36"),
    ],
)
def test_kubernetes_version_steps(current: str, target: str, ok: bool, fragment: str) -> None:
    result = check_kubernetes_version(_with_addon_versions(redeploy_of(K8S_VERSION=target), target), deployed_as(cluster_version=current))
    assert result.ok is ok
    assert fragment in (result.detail + result.fix)


def test_renaming_the_rayservice_deletes_the_old_one_and_keeps_the_namespace() -> None:
    found = changes("serving", {"RAY_SERVICE_NAME": "ray-llm-2"})
    manifests = [c for c in found if c.resource_type == "Custom::AWSCDK-EKS-KubernetesResource"]
    assert sorted(c.action for c in manifests) == [ADD, REMOVE]
    for change in manifests:
        manifest = (change.after or change.before)["Properties"]["Manifest"]
        assert '"kind":"RayService"' in manifest and '"kind":"Namespace"' not in manifest
    assert check_stack_changes(redeploy_of(RAY_SERVICE_NAME="ray-llm-2"), deployed_as()).ok


def test_renaming_the_namespace_moves_both_manifests() -> None:
    found = [c for c in changes("serving", {"NAMESPACE": "serving"}) if c.resource_type == "Custom::AWSCDK-EKS-KubernetesResource"]
    assert sorted(c.action for c in found) == [ADD, ADD, REMOVE, REMOVE]


def test_a_serve_config_change_touches_only_the_rayservice_manifest() -> None:
    assert [c for p in ("network", "cluster", "gpu") for c in changes(p, {"MAX_MODEL_LEN": "2048"})] == []
    (change,) = changes("serving", {"MAX_MODEL_LEN": "2048"})
    assert (change.resource_type, change.action, change.properties) == ("Custom::AWSCDK-EKS-KubernetesResource", MODIFY, ("Manifest",))


def test_parking_changes_only_the_gpu_nodegroup_scaling() -> None:
    (change,) = changes("gpu", {"GPU_NODE_COUNT": "0"})
    assert (change.resource_type, change.properties, rolls(change)) == ("AWS::EKS::Nodegroup", ("ScalingConfig",), False)


def test_every_protected_type_is_a_cloudformation_type() -> None:
    from preflight.template_plan import create_only_properties

    assert all(t.startswith("AWS::") for t in PROTECTED_TYPES)
    assert "Subnets" in create_only_properties("AWS::EKS::Nodegroup")


def test_nodegroup_change_is_found_by_either_name() -> None:
    change = nodegroup_change(redeploy_of(SYSTEM_NODEGROUP_NAME="system-b"), deployed_as(), "system-b")
    assert change is not None and change.action == REPLACE


# --- stack states and KubeRay's CRDs ---------------------------------------------------------------


def test_a_cluster_of_the_name_made_outside_the_stacks_is_refused() -> None:
    result = check_stack_states(redeploy_of(), Deployed(stacks={}, cluster_version="1.35"))
    assert not result.ok and "exists, but not the stack ray-llm-multinode-cluster" in result.detail and "eksctl" in result.fix


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
        return subprocess.CompletedProcess(["kubectl", *args], returncode, stdout, "" if returncode == 0 else "Unable to connect to the server")

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
    found = [c for c in changes("system", {"KUBERAY_NAMESPACE": "ray-system"}) if c.resource_type == "Custom::AWSCDK-EKS-HelmChart"]
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
    (logical_id,) = [k for k, v in before["Resources"].items() if v["Type"] == "AWS::EKS::AccessEntry" and v["Properties"]["PrincipalArn"] == b]
    before["Resources"]["Admin0"] = before["Resources"].pop(logical_id)
    assert clashes_across_stacks([("cluster", plan(before, after["cluster"]))]) == [
        f"cluster: AWS::EKS::AccessEntry {logical_id} would be created while the one of the same identity in cluster still exists"
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
    before["Resources"]["PdRayService9A1B2C3D"] = {**first, "Properties": {**first["Properties"], "Manifest": json.dumps(merged)}}
    doomed = " ".join(clashes_across_stacks([("serving", plan(before, templates["serving"]))]))
    assert "Namespace -/inference" in doomed and "RayService inference/ray-llm" in doomed and "NetworkPolicy inference/default-deny-ingress" in doomed
    deployed = deployed_as()
    stacks = dict(deployed.stacks)
    serving = settings.stack_names["serving"]
    stacks[serving] = DeployedStack(serving, "UPDATE_COMPLETE", {}, before)
    result = check_stack_changes(redeploy_of(), Deployed(stacks=stacks, cluster_version="1.35", nodegroups=deployed.nodegroups))
    assert not result.ok
    assert f"{serving}: RayService inference/ray-llm would be applied and then deleted with an old resource of {serving}" in result.fix
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
        "ray-llm-multinode-system: Helm release kuberay-operator/kuberay-operator would be applied and then deleted with an old resource of ray-llm-multinode-serving"
        in result.fix
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
