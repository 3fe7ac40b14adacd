"""Elastic prefill/decode capacity (PREFILL_MAX_REPLICAS, DECODE_MAX_REPLICAS): each phase autoscales on its own
load, the RayCluster's in-tree autoscaler adds worker pods of that phase's group, the Cluster Autoscaler adds
GPU nodes.

Decided by other people's code: Ray Serve's own schema for the serve config, KubeRay's CRD, Ray Serve LLM's own
placement code for the bundles, an IAM evaluator for the Cluster Autoscaler's policy. Ray's bin-packer on Ray's node
types and the whole chain on a real Ray cluster with Ray's autoscaler: tests/test_autoscaling_ray.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s_constructs.ray_autoscaling import SERVICE_ACCOUNT_MOUNT
from k8s_constructs.ray_service import build_rayservice_chart
from settings import SettingError
from stacks.addons import cluster_autoscaler
from tests.conftest import Synth, settings_for
from tests.iam_documents import Resolver
from tests.iam_simulator import Request, decisions
from tests.test_serving import deployed_manifest
from tests.validators import crd_errors, kuberay_cluster_errors, ray_serve_errors

ELASTIC = {"PREFILL_MAX_REPLICAS": "2", "DECODE_MAX_REPLICAS": "3"}
ALLOWED, DENIED = "Allowed", "ImplicitlyDenied"


def _ray_service(synth: Synth) -> dict[str, Any]:
    (rs,) = [o for o in deployed_manifest(synth) if o["kind"] == "RayService"]
    return rs


def _llm_configs(rs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    args = yaml.safe_load(rs["spec"]["serveConfigV2"])["applications"][0]["args"]
    return {"prefill": args["prefill_config"], "decode": args["decode_config"]}


# --- the synth ----------------------------------------------------------------------------------------------------


def test_each_phase_autoscales_between_its_minimum_and_maximum(autoscaling_synth: Synth) -> None:
    rs = _ray_service(autoscaling_synth)
    serve = yaml.safe_load(rs["spec"]["serveConfigV2"])
    assert ray_serve_errors(serve) == []
    for phase, (low, high, target) in {"prefill": (1, 2, 4), "decode": (1, 3, 16)}.items():
        config = _llm_configs(rs)[phase]
        deployment = config["deployment_config"]
        assert "num_replicas" not in deployment
        scaling = deployment["autoscaling_config"]
        assert (scaling["min_replicas"], scaling["max_replicas"], scaling["target_ongoing_requests"]) == (
            low,
            high,
            target,
        )
        assert "accelerator_type" not in config


def test_the_raycluster_runs_the_in_tree_autoscaler_with_each_groups_nodes(autoscaling_synth: Synth) -> None:
    rs = _ray_service(autoscaling_synth)
    cluster = rs["spec"]["rayClusterConfig"]
    assert crd_errors(rs) == [] and kuberay_cluster_errors(cluster) == []
    assert cluster["enableInTreeAutoscaling"] is True
    assert (
        cluster["autoscalerOptions"]["idleTimeoutSeconds"] == 120
        and cluster["autoscalerOptions"]["upscalingMode"] == "Default"
    )
    groups = {g["groupName"]: (g["replicas"], g["minReplicas"], g["maxReplicas"]) for g in cluster["workerGroupSpecs"]}
    assert groups == {"prefill": (1, 1, 2), "decode": (1, 1, 3)}
    for group in cluster["workerGroupSpecs"]:
        assert group["template"]["metadata"]["annotations"] == {
            "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"
        }


def _mounts_kube_api_token(container: dict[str, Any], volumes: dict[str, dict[str, Any]]) -> bool:
    """Whether the container can read a Kubernetes API token: a projected service-account token or the standard path."""
    for mount in container.get("volumeMounts", []):
        sources = volumes.get(mount["name"], {}).get("projected", {}).get("sources", [])
        if mount["mountPath"].startswith(SERVICE_ACCOUNT_MOUNT) or any(
            "serviceAccountToken" in source for source in sources
        ):
            return True
    return False


@pytest.mark.parametrize("synth_name", ["autoscaling_synth", "default_synth"])
def test_only_the_autoscaler_container_holds_a_kubernetes_token(
    synth_name: str, request: pytest.FixtureRequest
) -> None:
    """KubeRay 1.7's autoscaler Role (rbac.go) may get/list/watch/patch every pod of the namespace and patch
    RayClusters; automountServiceAccountToken is pod-wide. The head pod mounts none; with autoscaling a projected token
    (what the kubelet would mount) goes into KubeRay's autoscaler container only, at the path Ray's KubeRay node
    provider reads (node_provider.py, load_k8s_secrets). Checked on the synthesized template and on the Pods KubeRay
    makes from it."""
    import kubernetes_validate

    from tools.maintainer.k8s_objects import AUTOSCALER_CONTAINER, kuberay_pods

    synth: Synth = request.getfixturevalue(synth_name)
    rs = _ray_service(synth)
    head_template = rs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    assert head_template["automountServiceAccountToken"] is False and not head_template.get("shareProcessNamespace")
    pods = kuberay_pods(rs)
    containers = {c["name"]: c for c in pods[0]["spec"]["containers"]}
    for pod in pods:
        kubernetes_validate.validate(pod, synth.settings.kubernetes_version, strict=True)
        assert pod["spec"]["automountServiceAccountToken"] is False
        volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
        holders = [c["name"] for c in pod["spec"]["containers"] if _mounts_kube_api_token(c, volumes)]
        assert holders == ([AUTOSCALER_CONTAINER] if pod is pods[0] and synth.settings.autoscaling else []), pod[
            "metadata"
        ]["name"]
    if not synth.settings.autoscaling:
        assert AUTOSCALER_CONTAINER not in containers
        return
    volumes = {v["name"]: v for v in pods[0]["spec"]["volumes"]}
    (mount,) = [m for m in containers[AUTOSCALER_CONTAINER]["volumeMounts"] if m["mountPath"] == SERVICE_ACCOUNT_MOUNT]
    sources = volumes[mount["name"]]["projected"]["sources"]
    assert mount["readOnly"] is True
    assert {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}} in sources
    assert {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}} in sources
    # The files Ray's node provider opens.
    from ray.autoscaler._private.kuberay import node_provider

    source = Path(node_provider.__file__).read_text()
    assert f'"{SERVICE_ACCOUNT_MOUNT}/token"' in source and f'"{SERVICE_ACCOUNT_MOUNT}/ca.crt"' in source


def test_the_gpu_nodegroup_covers_both_maxima(autoscaling_synth: Synth) -> None:
    (nodegroup,) = autoscaling_synth.resources("gpu", "AWS::EKS::Nodegroup").values()
    assert nodegroup["Properties"]["ScalingConfig"] == {"MinSize": 2, "DesiredSize": 2, "MaxSize": 5}


def test_without_maxima_nothing_of_it_is_there(default_synth: Synth) -> None:
    rs = _ray_service(default_synth)
    cluster = rs["spec"]["rayClusterConfig"]
    assert "enableInTreeAutoscaling" not in cluster and "autoscalerOptions" not in cluster
    assert all(
        c["deployment_config"]["num_replicas"] == 1 and "autoscaling_config" not in c["deployment_config"]
        for c in _llm_configs(rs).values()
    )
    assert all(c["accelerator_type"] == "L4" for c in _llm_configs(rs).values())
    assert not [
        r
        for r in default_synth.resources("system", "Custom::AWSCDK-EKS-HelmChart").values()
        if r["Properties"]["Chart"] == "cluster-autoscaler"
    ]
    (nodegroup,) = default_synth.resources("gpu", "AWS::EKS::Nodegroup").values()
    assert nodegroup["Properties"]["ScalingConfig"] == {"MinSize": 2, "DesiredSize": 2, "MaxSize": 2}


def test_the_cluster_autoscaler_is_pinned_on_the_system_nodes_and_discovers_only_the_gpu_group(
    autoscaling_synth: Synth,
) -> None:
    (release,) = [
        r
        for r in autoscaling_synth.resources("system", "Custom::AWSCDK-EKS-HelmChart").values()
        if r["Properties"]["Chart"] == "cluster-autoscaler"
    ]
    props = release["Properties"]
    assert (props["Repository"], props["Version"], props["Namespace"]) == (
        cluster_autoscaler.PIN.repository,
        cluster_autoscaler.PIN.version,
        "kube-system",
    )
    values = json.loads(props["Values"])
    assert values["image"]["tag"] == "v1.35.2" and values["nodeSelector"] == {"role": "system"}
    assert values["autoDiscovery"]["tags"] == [
        "k8s.io/cluster-autoscaler/enabled",
        "k8s.io/cluster-autoscaler/ray-llm-multinode",
        "eks:nodegroup-name=gpu-workers",
    ]
    assert values["rbac"]["serviceAccount"]["name"] == "cluster-autoscaler"
    # Every supported Kubernetes minor has its Cluster Autoscaler.
    from settings.versions import SUPPORTED_KUBERNETES_VERSIONS

    assert set(cluster_autoscaler.IMAGE_TAGS) == set(SUPPORTED_KUBERNETES_VERSIONS)
    assert all(tag.startswith(f"v{minor}.") for minor, tag in cluster_autoscaler.IMAGE_TAGS.items())


def test_the_cluster_autoscaler_may_resize_only_the_gpu_nodegroup(autoscaling_synth: Synth) -> None:
    resources = autoscaling_synth.templates["system"]["Resources"]
    (association,) = [a for a in autoscaling_synth.resources("system", "AWS::EKS::PodIdentityAssociation").values()]
    assert (association["Properties"]["Namespace"], association["Properties"]["ServiceAccount"]) == (
        "kube-system",
        "cluster-autoscaler",
    )
    role_id = association["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    (policy,) = [
        v
        for v in resources.values()
        if v["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in v["Properties"]["Roles"]
    ]
    document = Resolver(autoscaling_synth.templates, autoscaling_synth.settings.region).resolve(
        policy["Properties"]["PolicyDocument"], "system"
    )
    asg = "arn:aws:autoscaling:sa-east-1:123456789012:autoScalingGroup:1234:autoScalingGroupName/eks-gpu-workers-abc"
    gpu = {"aws:ResourceTag/eks:cluster-name": "ray-llm-multinode", "aws:ResourceTag/eks:nodegroup-name": "gpu-workers"}
    system = {**gpu, "aws:ResourceTag/eks:nodegroup-name": "system-nodes"}
    other_cluster = {**gpu, "aws:ResourceTag/eks:cluster-name": "prod"}
    got = decisions(
        [
            Request("autoscaling:SetDesiredCapacity", asg, gpu),
            Request("autoscaling:TerminateInstanceInAutoScalingGroup", asg, gpu),
            Request("autoscaling:SetDesiredCapacity", asg, system),
            Request("autoscaling:SetDesiredCapacity", asg, other_cluster),
            Request("autoscaling:UpdateAutoScalingGroup", asg, gpu),
            Request("autoscaling:DescribeAutoScalingGroups", "*"),
            Request(
                "eks:DescribeNodegroup",
                "arn:aws:eks:sa-east-1:123456789012:nodegroup/ray-llm-multinode/gpu-workers/0c1",
            ),
            Request(
                "eks:DescribeNodegroup",
                "arn:aws:eks:sa-east-1:123456789012:nodegroup/ray-llm-multinode/system-nodes/0c1",
            ),
            Request("ec2:TerminateInstances", "arn:aws:ec2:sa-east-1:123456789012:instance/i-1"),
        ],
        identity_policy=document,
    )
    assert got == [ALLOWED, ALLOWED, DENIED, DENIED, DENIED, ALLOWED, ALLOWED, DENIED, DENIED]


# --- settings -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "name", "fragment"),
    [
        (
            {"PREFILL_REPLICAS": "2", "PREFILL_MAX_REPLICAS": "1"},
            "PREFILL_MAX_REPLICAS",
            "at least PREFILL_REPLICAS (2)",
        ),
        ({"DECODE_MAX_REPLICAS": "0"}, "DECODE_MAX_REPLICAS", "empty, or integer 1-64"),
        ({"DECODE_MAX_REPLICAS": "many"}, "DECODE_MAX_REPLICAS", "empty, or integer 1-64"),
        (
            {"PREFILL_MAX_REPLICAS": "40", "DECODE_MAX_REPLICAS": "40"},
            "PREFILL_MAX_REPLICAS",
            "fit the GPU nodegroup's 64: 40 prefill + 40 decode",
        ),
    ],
)
def test_a_bad_maximum_is_one_line(env: dict[str, str], name: str, fragment: str) -> None:
    with pytest.raises(SettingError) as error:
        settings_for(env)
    assert error.value.env_name == name and fragment in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    "env", [{}, {"DECODE_MAX_REPLICAS": "2"}, {"MAX_MODEL_LEN": "16384", "GPU_NODE_TYPE": "g6e.8xlarge"}]
)
def test_decode_and_the_ingress_drain_their_streams_for_the_longest_response(env: dict[str, str]) -> None:
    """Serve's default graceful_shutdown_timeout_s (20 s) would cut every stream longer than that when Serve removes a
    decode or ingress replica (a scale-down or a rolling change): both wait MAX_MODEL_LEN tokens at the slowest decode.
    """
    from ray.serve._private.constants import DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_S
    from ray.serve.schema import DeploymentSchema

    from settings.decode_rate import SLOWEST_DECODE_S_PER_TOKEN

    settings = settings_for(env)
    args = yaml.safe_load(build_rayservice_chart(settings).serve_config_yaml)["applications"][0]["args"]
    longest = settings.max_model_len * SLOWEST_DECODE_S_PER_TOKEN
    decode = args["decode_config"]["deployment_config"]
    ingress = args["ingress_deployment_config"]
    for options in (decode, ingress):
        assert (
            longest <= options["graceful_shutdown_timeout_s"] < longest + 1
            and options["graceful_shutdown_timeout_s"] > DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_S
        )
        DeploymentSchema.model_validate({"name": "x", **options})  # Ray's own options schema takes it
    # Prefill holds a request for one forward pass: Serve's default.
    assert "graceful_shutdown_timeout_s" not in args["prefill_config"]["deployment_config"]
    assert ray_serve_errors(yaml.safe_load(build_rayservice_chart(settings).serve_config_yaml)) == []


def test_one_phase_can_scale_alone() -> None:
    settings = settings_for({"DECODE_MAX_REPLICAS": "2"})
    configs = _llm_configs(build_rayservice_chart(settings).ray_service.to_json())
    assert (
        configs["prefill"]["deployment_config"] == {"num_replicas": 1}
        and configs["prefill"]["accelerator_type"] == "L4"
    )
    assert configs["decode"]["deployment_config"]["graceful_shutdown_timeout_s"] == 328
    assert (
        configs["decode"]["deployment_config"]["autoscaling_config"]["max_replicas"] == 2
        and "accelerator_type" not in configs["decode"]
    )
    assert (settings.gpu_node_count, settings.gpu_node_max) == (2, 3)
    assert settings_for({"DECODE_MAX_REPLICAS": "2", "GPU_NODE_COUNT": "0"}).gpu_node_max == 0  # parked


# --- day 2: the preflight ------------------------------------------------------------------------------------------


def test_a_new_maximum_is_refused_while_the_autoscaler_holds_more_nodes_than_the_minimum() -> None:
    from preflight.redeploy import check_stack_changes
    from tests.day2_helpers import deployed_as, redeploy_of

    before = {"DECODE_MAX_REPLICAS": "3"}
    after = redeploy_of(DECODE_MAX_REPLICAS="4")
    # The Cluster Autoscaler has grown the group to 4 nodes; the new maximum changes ScalingConfig (MaxSize), so
    # CloudFormation would send DesiredSize 2 with it.
    busy = check_stack_changes(after, deployed_as(before, gpu_desired=4))
    assert (
        not busy.ok and "runs 4 nodes (the Cluster Autoscaler grew it)" in busy.fix and "set it back to 2" in busy.fix
    )
    # At the minimum, the same change applies in place; a deploy that leaves ScalingConfig alone never asks.
    assert check_stack_changes(after, deployed_as(before, gpu_desired=2)).ok
    assert check_stack_changes(redeploy_of(DECODE_MAX_REPLICAS="3"), deployed_as(before, gpu_desired=4)).ok
    # A lower minimum, with the group at the old minimum: the reset is what was asked for.
    lower = {"PREFILL_REPLICAS": "2", "PREFILL_MAX_REPLICAS": "2", "DECODE_MAX_REPLICAS": "3"}
    assert check_stack_changes(
        redeploy_of(PREFILL_MAX_REPLICAS="2", DECODE_MAX_REPLICAS="3"), deployed_as(lower, gpu_desired=3)
    ).ok


def test_the_preflight_counts_quota_and_reservation_room_for_the_maxima() -> None:
    from tools.preflight import preflight_input

    assert preflight_input(settings_for(ELASTIC)).gpu_node_count == 5
    assert preflight_input(settings_for()).gpu_node_count == 2
    # And that the Cluster Autoscaler will add nodes after the deploy (the placement-group warning, issue 28.7).
    assert preflight_input(settings_for(ELASTIC)).autoscaling and not preflight_input(settings_for()).autoscaling
    assert preflight_input(settings_for({**ELASTIC, "GPU_NODE_COUNT": "0"})).gpu_node_count == 0


def test_new_gpu_nodes_carry_the_cluster_autoscalers_gpu_label(autoscaling_synth: Synth, default_synth: Synth) -> None:
    (nodegroup,) = autoscaling_synth.resources("gpu", "AWS::EKS::Nodegroup").values()
    assert nodegroup["Properties"]["Labels"]["k8s.amazonaws.com/accelerator"] == "l4"
    (fixed,) = default_synth.resources("gpu", "AWS::EKS::Nodegroup").values()
    assert "k8s.amazonaws.com/accelerator" not in fixed["Properties"]["Labels"]


def test_parked_with_maxima_no_autoscaler_runs_so_no_gpu_node_can_start() -> None:
    """GPU_NODE_COUNT=0 with DECODE_MAX_REPLICAS: the worker pods stay Pending and EKS keeps the group's max at 1, so a
    running Cluster Autoscaler would start a GPU node for them; parked, it runs no pod, and unparked it runs again."""
    parked = settings_for({"GPU_NODE_COUNT": "0", "DECODE_MAX_REPLICAS": "3"})
    assert parked.autoscaling and parked.gpu_node_max == 0
    assert cluster_autoscaler.values(parked)["replicaCount"] == 0
    assert "replicaCount" not in cluster_autoscaler.values(settings_for({"DECODE_MAX_REPLICAS": "3"}))  # chart's 1
