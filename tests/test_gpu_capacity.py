"""GPU capacity stack: the EFA nodegroup, its launch template and the device plugins."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from settings import versions
from stacks.addons import efa_device_plugin, nvidia_device_plugin
from tests.conftest import Synth


def _one(synth: Synth, stack: str, resource_type: str) -> tuple[str, dict[str, Any]]:
    found = synth.resources(stack, resource_type)
    assert len(found) == 1, list(found)
    return next(iter(found.items()))


def test_gpu_nodegroup_defaults(default_synth: Synth) -> None:
    _, nodegroup = _one(default_synth, "gpu", "AWS::EKS::Nodegroup")
    props = nodegroup["Properties"]
    assert props["NodegroupName"] == "gpu-workers"
    assert props["AmiType"] == "AL2023_x86_64_NVIDIA"
    assert props["Version"] == "1.35"  # nodes follow K8S_VERSION with the control plane
    assert props["ScalingConfig"] == {"MinSize": 2, "DesiredSize": 2, "MaxSize": 2}
    assert props["Labels"] == {"role": "gpu-worker", "nvidia.com/gpu.present": "true"}
    assert props["Taints"] == [{"Key": "nvidia.com/gpu", "Value": "true", "Effect": "NO_SCHEDULE"}]
    assert "InstanceTypes" not in props  # the type is in the launch template
    assert "DiskSize" not in props


def test_gpu_nodegroup_uses_exactly_one_private_subnet_in_the_gpu_az(default_synth: Synth) -> None:
    _, nodegroup = _one(default_synth, "gpu", "AWS::EKS::Nodegroup")
    (subnet,) = nodegroup["Properties"]["Subnets"]
    export = subnet["Fn::ImportValue"]
    network = default_synth.templates["network"]
    exported = {
        o["Export"]["Name"]: o["Value"]["Ref"]
        for o in network["Outputs"].values()
        if "Export" in o and "Ref" in o["Value"]
    }
    subnet_resource = network["Resources"][exported[export]]
    assert subnet_resource["Properties"]["AvailabilityZone"] == default_synth.settings.gpu_az
    tags = {t["Key"]: t["Value"] for t in subnet_resource["Properties"]["Tags"]}
    assert tags["aws-cdk:subnet-type"] == "Private"


def test_launch_template_one_efa_interface_placement_group_imdsv2(default_synth: Synth) -> None:
    _, template = _one(default_synth, "gpu", "AWS::EC2::LaunchTemplate")
    data = template["Properties"]["LaunchTemplateData"]
    assert data["InstanceType"] == "g6.8xlarge"
    (interface,) = data["NetworkInterfaces"]
    assert interface["DeviceIndex"] == 0 and interface["NetworkCardIndex"] == 0
    assert interface["InterfaceType"] == "efa"
    assert "SubnetId" not in interface
    assert interface["AssociatePublicIpAddress"] is False  # private nodes, whatever the subnet's default
    assert len(interface["Groups"]) == 2  # the cluster security group and the EFA group
    assert "SecurityGroupIds" not in data and "SecurityGroups" not in data
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    ebs = data["BlockDeviceMappings"][0]["Ebs"]
    assert ebs["Encrypted"] is True and ebs["VolumeType"] == "gp3" and ebs["VolumeSize"] == 200
    placement_id, placement = _one(default_synth, "gpu", "AWS::EC2::PlacementGroup")
    assert placement["Properties"]["Strategy"] == "cluster"
    assert data["Placement"] == {"GroupName": {"Fn::GetAtt": [placement_id, "GroupName"]}}


def test_local_nvme_is_raid0_for_containerd_and_kubelet(default_synth: Synth) -> None:
    _, template = _one(default_synth, "gpu", "AWS::EC2::LaunchTemplate")
    user_data = template["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"]
    assert "Content-Type: application/node.eks.aws" in user_data
    assert "strategy: RAID0" in user_data


def test_efa_security_group_allows_all_traffic_within_itself(default_synth: Synth) -> None:
    group_id, group = _one(default_synth, "gpu", "AWS::EC2::SecurityGroup")
    ingress = [v["Properties"] for v in default_synth.resources("gpu", "AWS::EC2::SecurityGroupIngress").values()]
    egress = [v["Properties"] for v in default_synth.resources("gpu", "AWS::EC2::SecurityGroupEgress").values()]
    self_ref = {"Fn::GetAtt": [group_id, "GroupId"]}
    assert {
        "IpProtocol": "-1",
        "GroupId": self_ref,
        "SourceSecurityGroupId": self_ref,
        "Description": "EFA from the GPU nodes",
    } in ingress
    assert {
        "IpProtocol": "-1",
        "GroupId": self_ref,
        "DestinationSecurityGroupId": self_ref,
        "Description": "EFA to the GPU nodes",
    } in egress
    # No rule to or from anywhere else: internet egress is the cluster security group's job.
    assert all(
        "CidrIp" not in rule
        for rule in group["Properties"].get("SecurityGroupEgress", [])
        if rule.get("IpProtocol") == "-1"
    )


def test_multi_card_type_gets_one_efa_interface_per_card(p5_synth: Synth) -> None:
    _, template = _one(p5_synth, "gpu", "AWS::EC2::LaunchTemplate")
    interfaces = template["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]
    assert len(interfaces) == 32
    assert [i["NetworkCardIndex"] for i in interfaces] == list(range(32))
    assert interfaces[0]["DeviceIndex"] == 0
    assert all(i["DeviceIndex"] == 1 for i in interfaces[1:])
    assert all(i["InterfaceType"] == "efa" and "SubnetId" not in i and len(i["Groups"]) == 2 for i in interfaces)
    assert all(i["AssociatePublicIpAddress"] is False for i in interfaces)
    _, nodegroup = _one(p5_synth, "gpu", "AWS::EKS::Nodegroup")
    # One prefill node and one decode node, each engine 8-way tensor parallel on its node's 8 GPUs.
    assert nodegroup["Properties"]["ScalingConfig"] == {"MinSize": 2, "DesiredSize": 2, "MaxSize": 2}


def _helm(synth: Synth, chart: str) -> tuple[str, dict[str, Any]]:
    matches = [
        (k, v)
        for k, v in synth.resources("gpu", "Custom::AWSCDK-EKS-HelmChart").items()
        if v["Properties"]["Chart"] == chart
    ]
    assert len(matches) == 1, chart
    return matches[0]


@pytest.mark.parametrize(
    ("chart", "repository", "version"),
    [(pin.chart, pin.repository, pin.version) for pin in (nvidia_device_plugin.PIN, efa_device_plugin.PIN)],
)
def test_device_plugins_are_pinned_tolerate_the_taint_and_follow_the_nodegroup(
    default_synth: Synth, chart: str, repository: str, version: str
) -> None:
    import json

    nodegroup_id, _ = _one(default_synth, "gpu", "AWS::EKS::Nodegroup")
    _, release = _helm(default_synth, chart)
    props = release["Properties"]
    assert props["Repository"] == repository
    assert props["Version"] == version
    assert props["Namespace"] == "kube-system"
    values = json.loads(props["Values"])
    assert values["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert values["nodeSelector"] == {"role": "gpu-worker"}
    assert any(nodegroup_id in dep for dep in release["DependsOn"])
    if chart == efa_device_plugin.PIN.chart:  # the chart's own instance allow-list names our type
        assert values["supportedInstanceLabels"] == {
            "keys": ["node.kubernetes.io/instance-type"],
            "values": ["g6.8xlarge"],
        }
        # The image from the deploy Region's EKS registry, not the chart's default us-west-2 one.
        assert values["image"] == {
            "repository": "602401143452.dkr.ecr.sa-east-1.amazonaws.com/eks/aws-efa-k8s-device-plugin"
        }


@pytest.mark.parametrize(
    ("region", "registry"),
    [
        ("us-east-2", "602401143452.dkr.ecr.us-east-2.amazonaws.com"),
        ("af-south-1", "877085696533.dkr.ecr.af-south-1.amazonaws.com"),
    ],
)
def test_the_efa_plugin_image_comes_from_the_deploy_regions_registry(region: str, registry: str) -> None:
    from stacks.addons import efa_device_plugin
    from tests.conftest import settings_for

    env = {
        "REGION": region,
        "GPU_AZ": f"{region}a",
        **({"DLC_IMAGE": versions.DLC_PUBLIC_IMAGE} if region == "af-south-1" else {}),
    }
    settings = settings_for(env)
    values = efa_device_plugin.values(settings)
    assert values["image"]["repository"] == f"{registry}/eks/aws-efa-k8s-device-plugin"
    assert "us-west-2" not in values["image"]["repository"] or region == "us-west-2"


def test_a_capacity_block_in_its_own_placement_group(tmp_path_factory: Any) -> None:
    from tests.conftest import settings_for, synthesize

    env = {
        "GPU_CAPACITY_RESERVATION_ID": "cr-0123456789abcdef0",
        "GPU_CAPACITY_RESERVATION_TYPE": "capacity-block",
        "GPU_PLACEMENT_GROUP": "gpu-pg",
    }
    synth = synthesize(settings_for(env), tmp_path_factory.mktemp("capacity_block"))
    _, template = _one(synth, "gpu", "AWS::EC2::LaunchTemplate")
    data = template["Properties"]["LaunchTemplateData"]
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}
    }
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["Placement"] == {"GroupName": "gpu-pg"}  # the user's, not one of the stack's
    assert synth.resources("gpu", "AWS::EC2::PlacementGroup") == {}
    _, nodegroup = _one(synth, "gpu", "AWS::EKS::Nodegroup")
    assert nodegroup["Properties"]["CapacityType"] == "CAPACITY_BLOCK"
    assert "InstanceTypes" not in nodegroup["Properties"]


def test_an_on_demand_reservation_without_a_placement_group(tmp_path_factory: Any, default_synth: Synth) -> None:
    from tests.conftest import settings_for, synthesize

    synth = synthesize(
        settings_for({"GPU_CAPACITY_RESERVATION_ID": "cr-0123456789abcdef0", "GPU_PLACEMENT_GROUP": "off"}),
        tmp_path_factory.mktemp("odcr"),
    )
    _, template = _one(synth, "gpu", "AWS::EC2::LaunchTemplate")
    data = template["Properties"]["LaunchTemplateData"]
    assert data["CapacityReservationSpecification"]["CapacityReservationTarget"] == {
        "CapacityReservationId": "cr-0123456789abcdef0"
    }
    assert "Placement" not in data and "InstanceMarketOptions" not in data
    assert synth.resources("gpu", "AWS::EC2::PlacementGroup") == {}
    _, nodegroup = _one(synth, "gpu", "AWS::EKS::Nodegroup")
    assert "CapacityType" not in nodegroup["Properties"]  # On-Demand, EKS's default
    # The default has neither: only what the reservation changes.
    _, default = _one(default_synth, "gpu", "AWS::EC2::LaunchTemplate")
    assert "CapacityReservationSpecification" not in default["Properties"]["LaunchTemplateData"]


def test_gpu_node_count_zero_parks_the_nodes(default_synth: Synth, parked_synth: Synth) -> None:
    parked = parked_synth
    _, nodegroup = _one(parked, "gpu", "AWS::EKS::Nodegroup")
    assert nodegroup["Properties"]["ScalingConfig"] == {"MinSize": 0, "DesiredSize": 0, "MaxSize": 1}
    # Nothing else of the GPU stack goes: launch template, placement group, device plugins stay.
    for resource_type in ("AWS::EC2::LaunchTemplate", "AWS::EC2::PlacementGroup", "Custom::AWSCDK-EKS-HelmChart"):
        assert parked.resources("gpu", resource_type) == default_synth.resources("gpu", resource_type)


def test_user_data_is_valid_base64_free_text(default_synth: Synth) -> None:
    # Fn::Base64 encodes at deploy time; the text itself must be plain MIME.
    _, template = _one(default_synth, "gpu", "AWS::EC2::LaunchTemplate")
    text = template["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"]
    assert text.startswith("MIME-Version: 1.0") and text.rstrip().endswith("--BOUNDARY--")
    assert text.isascii()
    assert base64.b64decode(base64.b64encode(text.encode("ascii"))).decode("ascii") == text
