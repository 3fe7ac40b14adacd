"""The Ray image is pulled onto each node as soon as it joins: a DaemonSet of the image itself, asleep."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate

from tests.conftest import Synth
from tests.test_serving import _ray_service


def _daemon_set(synth: Synth) -> tuple[str, dict[str, Any]]:
    manifests = {
        k: v
        for k, v in synth.resources("gpu", "Custom::AWSCDK-EKS-KubernetesResource").items()
        if "ray-image-prepull" in v["Properties"]["Manifest"]
    }
    ((logical_id, resource),) = manifests.items()
    (obj,) = json.loads(resource["Properties"]["Manifest"])
    return logical_id, obj


def test_it_passes_strict_kubernetes_validation(default_synth: Synth) -> None:
    _, obj = _daemon_set(default_synth)
    labels = obj["metadata"].get("labels", {})
    obj["metadata"]["labels"] = {k: v for k, v in labels.items() if not k.startswith("aws.cdk.eks/prune-")}
    assert obj["kind"] == "DaemonSet"
    kubernetes_validate.validate(obj, default_synth.settings.kubernetes_version, strict=True)


def test_it_runs_on_the_gpu_and_system_nodes_and_tolerates_the_gpu_taint(default_synth: Synth) -> None:
    pod = _daemon_set(default_synth)[1]["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "role", "operator": "In", "values": ["system", "gpu-worker"]}]
    assert pod["tolerations"] == [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}]


def test_it_pulls_exactly_the_ray_image_and_holds_no_device(default_synth: Synth, p5_synth: Synth) -> None:
    for synth in (default_synth, p5_synth):
        pod = _daemon_set(synth)[1]["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        head = _ray_service(synth)["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
        assert container["image"] == head["image"] == synth.settings.dlc_image
        resources = container["resources"]
        assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}  # no nvidia.com/gpu, no EFA
        assert (
            container["securityContext"]["runAsNonRoot"] is True and container["securityContext"]["privileged"] is False
        )
        assert "volumes" not in pod and pod["automountServiceAccountToken"] is False


def test_it_starts_with_the_gpu_stack_not_after_its_nodes(default_synth: Synth) -> None:
    logical_id, _ = _daemon_set(default_synth)
    resource = default_synth.templates["gpu"]["Resources"][logical_id]
    nodegroups = set(default_synth.resources("gpu", "AWS::EKS::Nodegroup"))
    assert not nodegroups & set(resource.get("DependsOn", []))
