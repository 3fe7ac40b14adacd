"""`make destroy`'s two steps: Kubernetes-made AWS resources first, leftovers listed after (moto)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from moto import mock_aws

from tests.conftest import settings_for
from tools import teardown

REGION = "sa-east-1"
CLUSTER = "ray-llm-multinode"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[boto3.session.Session]:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    with mock_aws():
        yield boto3.session.Session(region_name=REGION)


def test_nothing_left_passes(aws: boto3.session.Session) -> None:
    assert teardown.after(settings_for(), aws) == []


def test_leftovers_are_listed_with_the_command_that_removes_them(aws: boto3.session.Session) -> None:
    ec2 = aws.client("ec2", region_name=REGION)
    volume = ec2.create_volume(
        AvailabilityZone=f"{REGION}a",
        Size=10,
        TagSpecifications=[
            {"ResourceType": "volume", "Tags": [{"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"}]}
        ],
    )["VolumeId"]
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    group = ec2.create_security_group(
        GroupName="k8s-elb",
        Description="left by the load balancer controller",
        VpcId=vpc,
        TagSpecifications=[
            {
                "ResourceType": "security-group",
                "Tags": [
                    {"Key": "elbv2.k8s.aws/cluster", "Value": CLUSTER},
                    {"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"},
                ],
            }
        ],
    )["GroupId"]
    ec2.create_volume(
        AvailabilityZone=f"{REGION}a",
        Size=10,
        TagSpecifications=[
            {"ResourceType": "volume", "Tags": [{"Key": "kubernetes.io/cluster/other", "Value": "owned"}]}
        ],
    )
    logs = aws.client("logs", region_name=REGION)
    logs.create_log_group(logGroupName=f"/aws/eks/{CLUSTER}/cluster")
    logs.create_log_group(logGroupName=f"/aws/containerinsights/{CLUSTER}/performance")  # the add-on's agent's
    logs.create_log_group(logGroupName="/aws/containerinsights/other/performance")
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.0.0/24", AvailabilityZone=f"{REGION}a")["Subnet"]["SubnetId"]
    subnet2 = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.1.0/24", AvailabilityZone=f"{REGION}b")["Subnet"]["SubnetId"]
    elb = aws.client("elbv2", region_name=REGION)
    arn = elb.create_load_balancer(
        Name="k8s-inference-serve", Subnets=[subnet, subnet2], Tags=[{"Key": "elbv2.k8s.aws/cluster", "Value": CLUSTER}]
    )["LoadBalancers"][0]["LoadBalancerArn"]
    elb.create_load_balancer(Name="unrelated", Subnets=[subnet, subnet2])

    leftovers = {(item.kind, item.identifier): item.remove for item in teardown.after(settings_for(), aws)}
    assert leftovers == {
        ("EBS volume", volume): f"aws ec2 delete-volume --region {REGION} --volume-id {volume}",
        ("security group", group): f"aws ec2 delete-security-group --region {REGION} --group-id {group}",
        ("load balancer", arn): f"aws elbv2 delete-load-balancer --region {REGION} --load-balancer-arn {arn}",
        (
            "log group",
            f"/aws/eks/{CLUSTER}/cluster",
        ): f"aws logs delete-log-group --region {REGION} --log-group-name /aws/eks/{CLUSTER}/cluster",
        (
            "log group",
            f"/aws/containerinsights/{CLUSTER}/performance",
        ): f"aws logs delete-log-group --region {REGION} --log-group-name /aws/containerinsights/{CLUSTER}/performance",
    }


def test_after_exits_1_and_prints_the_commands(aws: boto3.session.Session, capsys: pytest.CaptureFixture[str]) -> None:
    logs = aws.client("logs", region_name=REGION)
    logs.create_log_group(logGroupName=f"/aws/eks/{CLUSTER}/cluster")
    logs.create_log_group(logGroupName=f"/aws/containerinsights/{CLUSTER}/performance")  # the add-on's agent's
    logs.create_log_group(logGroupName="/aws/containerinsights/other/performance")
    assert teardown.main(["after"]) == 1
    out = capsys.readouterr().out
    assert "2 resource(s) tagged with ray-llm-multinode are left" in out and "remove: aws logs delete-log-group" in out


class FakeKubectl:
    def __init__(self, services: list[dict[str, Any]], reachable: bool = True) -> None:
        self.calls: list[list[str]] = []
        self.services = services
        self.reachable = reachable

    def __call__(self, args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        self.calls.append(args)
        if not self.reachable:
            return subprocess.CompletedProcess(args, 1, "", "The connection to the server was refused")
        stdout = json.dumps({"items": self.services}) if args[:2] == ["get", "services"] else ""
        return subprocess.CompletedProcess(args, 0, stdout, "")


def _service(namespace: str, name: str, kind: str) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}, "spec": {"type": kind}}


def test_before_deletes_load_balancers_ingresses_and_the_rayservice() -> None:
    kubectl = FakeKubectl(
        [_service("inference", "public", "LoadBalancer"), _service("inference", "ray-llm-serve-svc", "ClusterIP")]
    )
    done = teardown.before(settings_for(), kubectl)
    assert ["delete", "service", "-n", "inference", "public", "--wait=true"] in kubectl.calls
    assert not any("ray-llm-serve-svc" in call for call in kubectl.calls if call[0] == "delete")
    assert ["delete", "ingress", "--all-namespaces", "--all", "--wait=true"] in kubectl.calls
    assert kubectl.calls[-1] == [
        "delete",
        "rayservice",
        "-n",
        "inference",
        "ray-llm",
        "--ignore-not-found",
        "--wait=true",
    ]
    assert "deleted RayService inference/ray-llm" in done


def test_before_without_access_says_so_and_lets_the_destroy_go_on() -> None:
    kubectl = FakeKubectl([], reachable=False)
    (line,) = teardown.before(settings_for(), kubectl)
    assert line.startswith("skipped: cannot list the cluster's Services") and len(kubectl.calls) == 1


def test_before_never_uses_the_current_kubectl_context(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    """`make destroy` binds kubectl to this cluster through a kubeconfig of its own: a fake `aws` that
    writes it and a fake `kubectl` that records the KUBECONFIG it was given."""
    import os
    import stat

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "kubectl.log"
    (bin_dir / "aws").write_text(
        '#!/bin/sh\n# aws eks update-kubeconfig ... --kubeconfig FILE\nfor a; do last="$a"; done\necho "apiVersion: v1"'
        ' > "$last"\n'
    )
    (bin_dir / "kubectl").write_text(f'#!/bin/sh\necho "$KUBECONFIG $*" >> {log}\necho \'{{"items": []}}\'\n')
    for tool in ("aws", "kubectl"):
        (bin_dir / tool).chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("KUBECONFIG", "/the/users/own/config")
    monkeypatch.setattr(teardown, "deployed_but_left_out", lambda settings, session: [])  # no AWS here
    assert teardown.main(["before"]) == 0
    calls = log.read_text().splitlines()
    assert calls and all(
        line.split()[0].endswith("/config") and not line.startswith("/the/users/own") for line in calls
    )
    assert "deleted RayService inference/ray-llm" in capsys.readouterr().out


def _stack(aws: boto3.session.Session, name: str) -> None:
    template = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}
    aws.client("cloudformation", region_name=REGION).create_stack(StackName=name, TemplateBody=json.dumps(template))


def test_a_deployed_stack_the_configuration_leaves_out_is_found(aws: boto3.session.Session) -> None:
    assert teardown.deployed_but_left_out(settings_for(), aws) == []
    _stack(aws, f"{CLUSTER}-observability")
    _stack(aws, f"{CLUSTER}-network")  # in every configuration: cdk destroy --all deletes it
    assert teardown.deployed_but_left_out(settings_for(), aws) == [f"{CLUSTER}-observability"]
    assert (
        teardown.deployed_but_left_out(settings_for({"OBSERVABILITY": "on"}), aws) == []
    )  # in the app: destroyed with it


def test_before_refuses_while_a_left_out_stack_is_deployed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing is deleted: the user reruns with OBSERVABILITY=on, and the observability stack goes first."""
    monkeypatch.setattr(teardown, "deployed_but_left_out", lambda settings, session: [f"{CLUSTER}-observability"])
    monkeypatch.setattr(teardown, "cluster_kubectl", lambda *a: pytest.fail("kubectl must not run"))
    assert teardown.main(["before"]) == 1
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "ray-llm-multinode-observability is deployed" in err
        and "OBSERVABILITY=on make destroy" in err
    )
