"""The NodeConfig in every launch template's user data, against nodeadm's own CRD made strict.

nodeadm (AL2023) decodes its NodeConfig non-strictly: a misspelt field is dropped at boot, silently, and the
node comes up without it (no RAID0: image and weights on the root EBS volume). The CRD is carried in
schemas/nodeadm/ (awslabs/amazon-eks-ami, MIT-0).
"""

from __future__ import annotations

import email
from typing import Any

import pytest
import yaml

from settings.scheduling import LOCAL_NVME_MOUNT
from tests.conftest import Synth
from tests.validators import nodeconfig_errors

NODECONFIG_CONTENT_TYPE = "application/node.eks.aws"
SYNTHS = ["default_synth", "p5_synth", "observed_synth", "hf_token_synth", "private_synth"]


def nodeconfigs(launch_template_data: dict[str, Any]) -> list[dict[str, Any]]:
    """The NodeConfig documents of a launch template's MIME multi-part user data (none without user data)."""
    user_data = launch_template_data.get("UserData")
    if user_data is None:
        return []
    text = user_data["Fn::Base64"]
    assert isinstance(text, str), "user data must be a literal, to be checked here"
    message = email.message_from_string(text)
    assert message.is_multipart(), "nodeadm reads MIME multi-part user data"
    return [
        document
        for part in message.walk()
        if part.get_content_type() == NODECONFIG_CONTENT_TYPE
        for document in yaml.safe_load_all(part.get_payload())
        if document
    ]


def _launch_templates(synth: Synth) -> dict[str, dict[str, Any]]:
    return {
        f"{stack}/{name}": resource["Properties"]["LaunchTemplateData"]
        for stack in synth.templates
        for name, resource in synth.resources(stack, "AWS::EC2::LaunchTemplate").items()
    }


@pytest.mark.parametrize("synth_name", SYNTHS)
def test_every_nodeconfig_is_valid_against_nodeadms_crd(synth_name: str, request: pytest.FixtureRequest) -> None:
    synth: Synth = request.getfixturevalue(synth_name)
    templates = _launch_templates(synth)
    assert templates
    for name, data in templates.items():
        for document in nodeconfigs(data):
            assert nodeconfig_errors(document) == [], name


def test_the_gpu_nodes_with_instance_store_get_the_raid0_array(default_synth: Synth, p5_synth: Synth) -> None:
    for synth in (default_synth, p5_synth):
        (gpu,) = synth.resources("gpu", "AWS::EC2::LaunchTemplate").values()
        (document,) = nodeconfigs(gpu["Properties"]["LaunchTemplateData"])
        assert document["spec"]["instance"]["localStorage"] == {"strategy": "RAID0"}


def test_the_model_cache_lies_on_the_array_nodeadm_mounts(default_synth: Synth) -> None:
    """nodeadm's RAID0 strategy (setup-local-disks) mounts /dev/md/kubernetes at /mnt/k8s-disks/0 (the CRD
    version carried has no mountPath to move it): the workers' hostPath must be under it, or the weights
    land on the root EBS volume."""
    (ray_service,) = [
        d
        for r in default_synth.resources("serving", "Custom::AWSCDK-EKS-KubernetesResource").values()
        for d in _manifest(r)
        if d["kind"] == "RayService"
    ]
    for group in ray_service["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
        (cache,) = [v for v in group["template"]["spec"]["volumes"] if v["name"] == "model-cache"]
        assert cache["hostPath"]["path"].startswith(LOCAL_NVME_MOUNT + "/")
    assert LOCAL_NVME_MOUNT == "/mnt/k8s-disks/0"


def _manifest(resource: dict[str, Any]) -> list[dict[str, Any]]:
    import json

    manifest = resource["Properties"]["Manifest"]
    documents: list[dict[str, Any]] = json.loads(manifest) if isinstance(manifest, str) else []
    return documents


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        ({"spec": {"instance": {"localStorage": {"strategy": "RAID0"}}}}, "not a node.eks.aws/v1alpha1 NodeConfig"),
        (
            {
                "apiVersion": "node.eks.aws/v1alpha1",
                "kind": "NodeConfig",
                "spec": {"instance": {"localStorage": {"stratgy": "RAID0"}}},
            },
            "stratgy",
        ),
        (
            {
                "apiVersion": "node.eks.aws/v1alpha1",
                "kind": "NodeConfig",
                "spec": {"instance": {"localStorage": {"strategy": "RAID5"}}},
            },
            "RAID5",
        ),
        ({"apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig", "spec": {"instanse": {}}}, "instanse"),
    ],
)
def test_the_strict_schema_catches_what_nodeadm_would_drop(document: dict[str, Any], fragment: str) -> None:
    assert any(fragment in error for error in nodeconfig_errors(document))
