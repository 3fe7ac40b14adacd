"""Day 2: what a deploy over a deployed stack does, setting by setting, from pairs of real synths.

"Before" is the default synth (what is deployed), "after" the same app with one change. The planner
reads CloudFormation's own create-only property lists (the schemas cfn-lint ships), so a replacement
here is one CloudFormation would make.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from preflight.redeploy import (
    Redeploy,
    check_kubernetes_version,
    check_stack_changes,
    nodegroup_change,
    rolls,
)
from preflight.template_plan import ADD, MODIFY, PROTECTED_TYPES, REMOVE, REPLACE, plan
from tests.day2_helpers import PARTS, _only, changes, deployed_as, redeploy_of, synth, templates_of

# --- the planner itself -------------------------------------------------------------------------------


def test_same_templates_plan_nothing() -> None:
    for part in PARTS:
        assert changes(part, {}) == []


def test_planner_reads_create_only_properties_from_the_cloudformation_schemas() -> None:
    before = {"Resources": {"Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16", "Tags": []}}}}
    after = {"Resources": {"Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.1.0.0/16", "Tags": []}}}}
    (change,) = plan(before, after)
    assert (change.action, change.replaced_by, change.protected) == (REPLACE, ("CidrBlock",), True)
    tagged = {
        "Resources": {
            "Vpc": {
                "Type": "AWS::EC2::VPC",
                "Properties": {"CidrBlock": "10.0.0.0/16", "Tags": [{"Key": "a", "Value": "b"}]},
            }
        }
    }
    assert [c.action for c in plan(before, tagged)] == [MODIFY]


def test_a_replacement_propagates_to_what_refers_to_it() -> None:
    before = {
        "Resources": {
            "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}},
            "Subnet": {"Type": "AWS::EC2::Subnet", "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": "10.0.0.0/19"}},
        }
    }
    after = {
        "Resources": {
            **before["Resources"],
            "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.1.0.0/16"}},
        }
    }
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
    parked = check_stack_changes(
        redeploy_of(**moved, GPU_NODE_COUNT="0"), deployed_as({"GPU_NODE_COUNT": "0"}, gpu_desired=0)
    )
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


@cache
def _addon_templates(kubernetes_version: str) -> dict[str, dict[str, Any]]:
    """The templates synthesized after `make lookup` cached the add-on versions of ``kubernetes_version`` (once per
    version: four tests use two)."""
    from settings.versions import addon_versions_context_key
    from tests.conftest import settings_for

    context = {
        addon_versions_context_key("sa-east-1", kubernetes_version): {
            "vpc-cni": "v1.21.0-eksbuild.1",
            "kube-proxy": "v1.36.0-eksbuild.2",
            "coredns": "v1.13.1-eksbuild.1",
            "eks-pod-identity-agent": "v1.3.9-eksbuild.1",
        }
    }
    return templates_of(settings_for({"K8S_VERSION": kubernetes_version}, context))


def _with_addon_versions(redeploy: Redeploy, kubernetes_version: str) -> Redeploy:
    """The same deploy synthesized after `make lookup` cached the add-on versions of ``kubernetes_version``."""
    from dataclasses import replace

    return replace(redeploy, templates=_addon_templates(kubernetes_version))


def test_cached_add_on_versions_follow_the_kubernetes_version() -> None:
    upgraded = _with_addon_versions(redeploy_of(K8S_VERSION="1.36"), "1.36")
    cluster = upgraded.templates["ray-llm-multinode-cluster"]
    addons = {
        r["Properties"]["AddonName"]: r["Properties"].get("AddonVersion")
        for r in cluster["Resources"].values()
        if r["Type"] == "AWS::EKS::Addon"
    }
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
    result = check_kubernetes_version(
        _with_addon_versions(redeploy_of(K8S_VERSION=target), target), deployed_as(cluster_version=current)
    )
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
    found = [
        c
        for c in changes("serving", {"NAMESPACE": "serving"})
        if c.resource_type == "Custom::AWSCDK-EKS-KubernetesResource"
    ]
    assert sorted(c.action for c in found) == [ADD, ADD, REMOVE, REMOVE]


def test_a_serve_config_change_touches_only_the_rayservice_manifest() -> None:
    assert [c for p in ("network", "cluster", "gpu") for c in changes(p, {"MAX_MODEL_LEN": "2048"})] == []
    (change,) = changes("serving", {"MAX_MODEL_LEN": "2048"})
    assert (change.resource_type, change.action, change.properties) == (
        "Custom::AWSCDK-EKS-KubernetesResource",
        MODIFY,
        ("Manifest",),
    )


def test_parking_changes_only_the_gpu_nodegroup_scaling() -> None:
    (change,) = changes("gpu", {"GPU_NODE_COUNT": "0"})
    assert (change.resource_type, change.properties, rolls(change)) == (
        "AWS::EKS::Nodegroup",
        ("ScalingConfig",),
        False,
    )


def test_every_protected_type_is_a_cloudformation_type() -> None:
    from preflight.template_plan import create_only_properties

    assert all(t.startswith("AWS::") for t in PROTECTED_TYPES)
    assert "Subnets" in create_only_properties("AWS::EKS::Nodegroup")


def test_nodegroup_change_is_found_by_either_name() -> None:
    change = nodegroup_change(redeploy_of(SYSTEM_NODEGROUP_NAME="system-b"), deployed_as(), "system-b")
    assert change is not None and change.action == REPLACE


def test_a_ray_cluster_change_over_a_running_rayservice_is_refused_with_the_command_that_applies_it() -> None:
    """SERVE_EXPOSURE leaving `cluster` turns API keys on: the serve config's ingress changes in place, the key volume
    and the ingress module are RayCluster changes KubeRay ignores (upgradeStrategy None), and Ray keeps the keyless
    application serving when the keyed one cannot import (tests/test_serve_auth.py shows that on a real Ray). The
    preflight refuses that deploy; the same settings again, or a serve-config-only change, pass."""
    from preflight.redeploy import check_ray_cluster_change
    from tests.conftest import ENDPOINT

    keyless = deployed_as()
    refused = check_ray_cluster_change(redeploy_of(**ENDPOINT), keyless)
    assert not refused.ok
    assert "make destroy STACKS=ray-llm-multinode-serving && make deploy" in refused.fix
    assert "keyless application would keep serving" in refused.detail
    assert check_ray_cluster_change(redeploy_of(**ENDPOINT), deployed_as(ENDPOINT)).ok
    assert check_ray_cluster_change(redeploy_of(), keyless).ok
    assert check_ray_cluster_change(redeploy_of(MAX_MODEL_LEN="2048"), keyless).ok  # serveConfigV2 only: in place
    # Back to keyless (keys off) is a RayCluster change too.
    assert not check_ray_cluster_change(redeploy_of(), deployed_as(ENDPOINT)).ok
