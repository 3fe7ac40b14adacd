"""Network and cluster stacks: every resource of the foundation, asserted on the synthesized templates."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match

from tests.conftest import Synth


def _only(resources: dict[str, dict[str, Any]]) -> dict[str, Any]:
    assert len(resources) == 1, list(resources)
    return next(iter(resources.values()))


def test_vpc_spans_three_azs_including_the_gpu_az(default_synth: Synth) -> None:
    s = default_synth.settings
    assert s.gpu_az in s.availability_zones and len(s.availability_zones) == 3
    subnets = default_synth.resources("network", "AWS::EC2::Subnet")
    azs = sorted({v["Properties"]["AvailabilityZone"] for v in subnets.values()})
    assert azs == sorted(s.availability_zones)
    assert len(subnets) == 6  # a public and a private subnet per AZ


def test_private_subnets_are_private_and_tagged_for_internal_load_balancers(default_synth: Synth) -> None:
    for subnet in default_synth.resources("network", "AWS::EC2::Subnet").values():
        props = subnet["Properties"]
        tags = {t["Key"]: t["Value"] for t in props["Tags"]}
        assert props["MapPublicIpOnLaunch"] is False
        if tags["aws-cdk:subnet-type"] == "Private":
            assert tags["kubernetes.io/role/internal-elb"] == "1"
        else:
            assert tags["kubernetes.io/role/elb"] == "1"


def test_one_nat_gateway_in_the_gpu_az(default_synth: Synth) -> None:
    nat = _only(default_synth.resources("network", "AWS::EC2::NatGateway"))
    subnet_id = nat["Properties"]["SubnetId"]["Ref"]
    subnet = default_synth.templates["network"]["Resources"][subnet_id]
    assert subnet["Properties"]["AvailabilityZone"] == default_synth.settings.gpu_az


def test_vpc_flow_logs_rejected_traffic(default_synth: Synth) -> None:
    default_synth.template("network").has_resource_properties(
        "AWS::EC2::FlowLog", {"TrafficType": "REJECT", "LogDestinationType": "cloud-watch-logs"}
    )


def test_cluster_version_logging_encryption_and_no_auto_mode(default_synth: Synth) -> None:
    cluster = _only(default_synth.resources("cluster", "AWS::EKS::Cluster"))["Properties"]
    assert cluster["Name"] == "ray-llm-multinode"
    assert cluster["Version"] == "1.35"
    logging = {t["Type"] for t in cluster["Logging"]["ClusterLogging"]["EnabledTypes"]}
    assert logging == {"api", "audit", "authenticator", "controllerManager", "scheduler"}
    assert cluster["EncryptionConfig"][0]["Resources"] == ["secrets"]
    assert "KeyArn" in cluster["EncryptionConfig"][0]["Provider"]
    assert cluster["BootstrapSelfManagedAddons"] is False
    assert "ComputeConfig" not in cluster or cluster["ComputeConfig"].get("Enabled") is not True
    vpc_config = cluster["ResourcesVpcConfig"]
    assert vpc_config["EndpointPublicAccess"] is True and vpc_config["EndpointPrivateAccess"] is True


def test_control_plane_log_group_has_a_retention_and_exists_before_the_cluster(default_synth: Synth) -> None:
    resources = default_synth.templates["cluster"]["Resources"]
    (group_id,) = [k for k, v in resources.items() if v["Type"] == "AWS::Logs::LogGroup"]
    group = resources[group_id]
    assert (group["Properties"]["LogGroupName"], group["Properties"]["RetentionInDays"]) == (
        "/aws/eks/ray-llm-multinode/cluster",
        30,
    )
    assert group["DeletionPolicy"] == "Delete"
    (cluster,) = [v for v in resources.values() if v["Type"] == "AWS::EKS::Cluster"]
    assert group_id in cluster["DependsOn"]


def test_secrets_key_rotates(default_synth: Synth) -> None:
    default_synth.template("cluster").has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


def test_managed_addons_and_their_order(default_synth: Synth) -> None:
    cluster = {v["Properties"]["AddonName"] for v in default_synth.resources("cluster", "AWS::EKS::Addon").values()}
    # The add-ons a node needs to turn Ready are in the cluster stack, which both nodegroup stacks follow.
    assert cluster == {"vpc-cni", "kube-proxy", "eks-pod-identity-agent"}
    d = default_synth.deployment
    for stack in (d.system, d.gpu):
        assert d.cluster.stack_name in {s.stack_name for s in stack.dependencies}
    # CoreDNS needs nodes to run on: the system stack, after its nodegroup.
    system = default_synth.templates["system"]["Resources"]
    (coredns,) = [v for v in system.values() if v["Type"] == "AWS::EKS::Addon"]
    assert coredns["Properties"]["AddonName"] == "coredns"
    (nodegroup_id,) = [k for k, v in system.items() if v["Type"] == "AWS::EKS::Nodegroup"]
    assert nodegroup_id in coredns["DependsOn"]


def test_system_nodegroup(default_synth: Synth) -> None:
    template = default_synth.template("system")
    template.has_resource_properties(
        "AWS::EKS::Nodegroup",
        {
            "NodegroupName": "system-nodes",
            "AmiType": "AL2023_x86_64_STANDARD",
            "Labels": {"role": "system"},
            "Version": "1.35",
            "ScalingConfig": {"MinSize": 1, "DesiredSize": 1, "MaxSize": 1},
            "LaunchTemplate": Match.object_like({"Id": Match.any_value()}),
        },
    )
    nodegroup = _only(default_synth.resources("system", "AWS::EKS::Nodegroup"))["Properties"]
    # Type and disks live in the launch template: a SYSTEM_NODE_TYPE change is a rolling update.
    assert "DiskSize" not in nodegroup and "InstanceTypes" not in nodegroup
    assert nodegroup["UpdateConfig"] == {"MaxUnavailable": 1, "UpdateStrategy": "DEFAULT"}
    # Imported from the network stack: one private subnet per AZ, no public one.
    assert len(nodegroup["Subnets"]) == 3
    assert all("privateSubnet" in s["Fn::ImportValue"] for s in nodegroup["Subnets"])


def test_system_launch_template_imdsv2_and_encrypted_gp3(default_synth: Synth) -> None:
    data = _only(default_synth.resources("system", "AWS::EC2::LaunchTemplate"))["Properties"]["LaunchTemplateData"]
    assert data["InstanceType"] == "m7i.xlarge"
    assert data["MetadataOptions"] == {
        "HttpEndpoint": "enabled",
        "HttpTokens": "required",
        "HttpPutResponseHopLimit": 1,
    }
    ebs = data["BlockDeviceMappings"][0]["Ebs"]
    assert ebs == {"VolumeSize": 100, "VolumeType": "gp3", "Encrypted": True, "DeleteOnTermination": True}


def test_kubectl_provider_uses_the_1_35_layer(default_synth: Synth) -> None:
    from settings import versions

    descriptions = [
        v["Properties"].get("Description", "")
        for v in default_synth.resources("cluster", "AWS::Lambda::LayerVersion").values()
    ]
    (kubectl,) = [d for d in descriptions if "kubectl" in d]
    # kubectl 1.35.x serves clusters at 1.34-1.36 (one minor version of skew either way).
    assert f"kubectl 1.{versions.KUBECTL_LAYER_KUBERNETES_MINOR}." in kubectl and "helm" in kubectl


def test_outputs(default_synth: Synth) -> None:
    outputs = default_synth.templates["cluster"]["Outputs"]
    assert outputs["Region"]["Value"] == "sa-east-1"
    assert (
        outputs["UpdateKubeconfigCommand"]["Value"]
        == "aws eks update-kubeconfig --region sa-east-1 --name ray-llm-multinode"
    )
    assert "ClusterName" in outputs


def test_admin_access_entries_and_private_endpoint(tmp_path_factory: Any) -> None:
    from tests.conftest import settings_for, synthesize

    arn = "arn:aws:iam::123456789012:role/ci-deploy"
    synth = synthesize(
        settings_for(
            {
                "ADMIN_PRINCIPAL_ARNS": arn,
                "ENDPOINT_ACCESS": "public-and-private",
                "PUBLIC_ACCESS_CIDRS": "203.0.113.0/24",
            }
        ),
        tmp_path_factory.mktemp("admin"),
    )
    entries = [
        v["Properties"]
        for v in synth.resources("cluster", "AWS::EKS::AccessEntry").values()
        if v["Properties"]["PrincipalArn"] == arn
    ]
    assert len(entries) == 1
    (policy,) = entries[0]["AccessPolicies"]
    assert policy["AccessScope"] == {"Type": "cluster"}
    assert "policy/AmazonEKSClusterAdminPolicy" in json.dumps(policy["PolicyArn"])
    cluster = _only(synth.resources("cluster", "AWS::EKS::Cluster"))["Properties"]
    assert cluster["ResourcesVpcConfig"]["PublicAccessCidrs"] == ["203.0.113.0/24"]


@pytest.mark.parametrize("synth_name", ["default_synth", "private_synth"])
def test_the_kubectl_provider_in_the_vpc_has_a_security_group_of_its_own(
    synth_name: str, request: pytest.FixtureRequest
) -> None:
    """aws-cdk-lib puts the provider's Lambdas in the VPC whenever the endpoint has private access (the
    default too) and would give them the cluster security group, which their late ENIs then hold at teardown."""
    synth: Synth = request.getfixturevalue(synth_name)
    groups = synth.resources("cluster", "AWS::EC2::SecurityGroup")
    (own,) = [k for k in groups if k.startswith("KubectlProviderSecurityGroup")]
    functions = [
        v["Properties"]
        for k, v in synth.resources("cluster", "AWS::Lambda::Function").items()
        if k.startswith("ClusterKubectlProvider")
    ]
    assert len(functions) == 2
    for function in functions:
        assert function["VpcConfig"]["SecurityGroupIds"] == [{"Fn::GetAtt": [own, "GroupId"]}]
        assert len(function["VpcConfig"]["SubnetIds"]) == 3
    # Let in on 443 by the cluster security group.
    ingress = [v["Properties"] for v in synth.resources("cluster", "AWS::EC2::SecurityGroupIngress").values()]
    assert any(r["SourceSecurityGroupId"] == {"Fn::GetAtt": [own, "GroupId"]} and r["FromPort"] == 443 for r in ingress)


def test_the_kubectl_provider_is_in_the_vpc_unless_the_endpoint_is_public_only() -> None:
    from stacks.cluster_stack import kubectl_provider_in_vpc

    assert kubectl_provider_in_vpc("public-and-private") and kubectl_provider_in_vpc("private")
    assert not kubectl_provider_in_vpc("public")


def test_stacks_are_environment_agnostic_on_account(default_synth: Synth) -> None:
    for stack in default_synth.deployment.stacks:
        assert stack.region == "sa-east-1"
