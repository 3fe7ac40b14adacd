"""The preflight over a deployed cluster, on moto: quotas net of this cluster's own nodes, the
rolling-update surge, a Kubernetes version skip, a leftover control-plane log group, and the pinned
Helm charts against a local chart repository.

moto serves EC2 (instances with EKS's tags), EKS (DescribeCluster, ListNodegroups, DescribeNodegroup),
CloudWatch Logs and STS. Two clients are botocore Stubbers instead, as in tests/preflight_fakes.py:
- service-quotas (moto has no EC2 quotas);
- cloudformation: moto 5.2.5 cannot create a stack from our synthesized templates (it has no
  AWS::EKS::Cluster or AWS::EC2::PlacementGroup and fails on the CDK bootstrap parameter), so
  DescribeStacks and GetTemplate answer with the real synthesized templates as "what is deployed". The
  Stubber checks each request's parameters and their order.
"""

from __future__ import annotations

import http.server
import json
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from botocore.stub import Stubber  # type: ignore[import-untyped]

from preflight.charts import check_helm_charts
from preflight.redeploy import Redeploy
from preflight.runner import G_QUOTA_CODE, STANDARD_QUOTA_CODE, PreflightInput, run_checks
from settings.versions import HelmChartPin
from tests import preflight_fakes
from tests.loopback import serving
from tests.preflight_fakes import INPUT, REGION, by_name
from tests.test_day2 import redeploy_of, synth

CLUSTER = INPUT.cluster_name
aws = preflight_fakes.aws  # the `aws` fixture (fake credentials, moto) of tests/preflight_fakes.py


def _launch(instance_type: str, count: int = 1, *, cluster: str | None = CLUSTER) -> None:
    tags = [{"ResourceType": "instance", "Tags": [{"Key": "eks:cluster-name", "Value": cluster}]}] if cluster else []
    boto3.client("ec2", region_name=REGION).run_instances(
        ImageId="ami-12345678", MinCount=count, MaxCount=count, InstanceType=instance_type, TagSpecifications=tags
    )


class _Session(boto3.session.Session):  # type: ignore[misc]
    """moto for everything but the Stubber'd clients given."""

    def __init__(self, stubbed: Mapping[str, Any]) -> None:
        super().__init__(region_name=REGION)
        self._stubbed = stubbed

    def client(self, service_name: str, *args: Any, **kwargs: Any) -> Any:
        return self._stubbed.get(service_name) or super().client(service_name, *args, **kwargs)


def _quotas(gpu: float, standard: float) -> Any:
    client = boto3.session.Session().client("service-quotas", region_name=REGION)
    stubber = Stubber(client)
    for code, value in ((G_QUOTA_CODE, gpu), (STANDARD_QUOTA_CODE, standard)):
        stubber.add_response(
            "get_service_quota",
            {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "Value": value}},
            {"ServiceCode": "ec2", "QuotaCode": code},
        )
    stubber.activate()
    return client


def _cloudformation(redeploy: Redeploy | None, deployed: Mapping[str, dict[str, Any]]) -> Any:
    """DescribeStacks/GetTemplate of our stacks (``deployed``: name -> template; absent = not deployed), then the
    bootstrap stack."""
    client = boto3.session.Session().client("cloudformation", region_name=REGION)
    stubber = Stubber(client)
    for name in redeploy.templates if redeploy else ():
        if name not in deployed:
            stubber.add_client_error(
                "describe_stacks",
                "ValidationError",
                f"Stack with id {name} does not exist",
                expected_params={"StackName": name},
            )
            continue
        stack = {
            "StackName": name,
            "StackStatus": "UPDATE_COMPLETE",
            "CreationTime": "2026-11-01T00:00:00Z",
            "Outputs": [],
        }
        stubber.add_response("describe_stacks", {"Stacks": [stack]}, {"StackName": name})
        stubber.add_response(
            "get_template",
            {"TemplateBody": json.dumps(deployed[name])},
            {"StackName": name, "TemplateStage": "Original"},
        )
    bootstrap = {
        "StackName": "CDKToolkit",
        "StackStatus": "CREATE_COMPLETE",
        "CreationTime": "2026-01-01T00:00:00Z",
        "Outputs": [],
    }
    stubber.add_response("describe_stacks", {"Stacks": [bootstrap]}, {"StackName": "CDKToolkit"})
    stubber.activate()
    return client


def _eks_cluster(version: str, nodegroups: Mapping[str, int]) -> None:
    eks = boto3.client("eks", region_name=REGION)
    eks.create_cluster(
        name=CLUSTER,
        version=version,
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": ["subnet-12345678"]},
    )
    for name, size in nodegroups.items():
        eks.create_nodegroup(
            clusterName=CLUSTER,
            nodegroupName=name,
            nodeRole="arn:aws:iam::123456789012:role/node",
            subnets=["subnet-12345678"],
            scalingConfig={"minSize": size, "maxSize": max(1, size), "desiredSize": size},
        )


def _run(
    inp: PreflightInput,
    *,
    gpu_quota: float,
    standard_quota: float,
    deployed: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    session = _Session(
        {
            "service-quotas": _quotas(gpu_quota, standard_quota),
            "cloudformation": _cloudformation(inp.redeploy, deployed or {}),
        }
    )
    return by_name(run_checks(inp, session))


def _with_redeploy(redeploy: Redeploy, **changes: Any) -> PreflightInput:
    return replace(INPUT, redeploy=redeploy, **changes)


def _deployed_templates(**env: str) -> dict[str, dict[str, Any]]:
    settings, templates = synth(**env)
    return {settings.stack_names[part]: template for part, template in templates.items()}


# --- quotas on a redeploy -----------------------------------------------------------------------------


def test_this_clusters_own_nodes_are_held_capacity_not_a_new_need(aws: None) -> None:
    _launch("g6.8xlarge", 2)
    _launch("m7i.xlarge")
    results = _run(INPUT, gpu_quota=64, standard_quota=4)
    assert results["gpu-vcpu-quota"].ok, results["gpu-vcpu-quota"].detail
    assert "this cluster holds 64, other workloads 0; quota 64" in results["gpu-vcpu-quota"].detail
    assert results["standard-vcpu-quota"].ok


def test_another_workload_on_the_quota_still_fails(aws: None) -> None:
    _launch("g6.8xlarge", 2)
    _launch("g5.xlarge", cluster="someone-else")  # 4 vCPU of G quota
    _launch("g5.xlarge", cluster=None)
    gpu = _run(INPUT, gpu_quota=64, standard_quota=4)["gpu-vcpu-quota"]
    assert not gpu.ok
    assert gpu.detail.startswith("need 72 vCPU") and "this cluster holds 64, other workloads 8" in gpu.detail
    assert "to at least 72" in gpu.fix


def test_a_rolling_update_asks_for_the_surge_only_with_the_default_strategy(aws: None) -> None:
    _launch("g6.8xlarge", 2)
    _launch("m7i.xlarge")
    _eks_cluster("1.35", {"gpu-workers": 2, "system-nodes": 1})
    deployed = _deployed_templates()
    # A bigger GPU root volume: a new launch template version, so the GPU nodes roll.
    redeploy = redeploy_of(GPU_ROOT_VOLUME_GIB="300")
    minimal = _run(
        _with_redeploy(redeploy, gpu_update_surge_nodes=0), gpu_quota=64, standard_quota=4, deployed=deployed
    )
    assert minimal["gpu-vcpu-quota"].ok, minimal["gpu-vcpu-quota"].detail
    assert minimal["stack-changes"].ok and "rolling update of gpu-workers" in minimal["stack-changes"].detail
    surge = _run(_with_redeploy(redeploy, gpu_update_surge_nodes=2), gpu_quota=64, standard_quota=4, deployed=deployed)[
        "gpu-vcpu-quota"
    ]
    assert not surge.ok
    assert (
        "at most 128 during it (rolling update with 2 extra node(s))" in surge.detail and "to at least 128" in surge.fix
    )


def test_a_change_that_rolls_nothing_needs_no_surge(aws: None) -> None:
    _launch("g6.8xlarge", 2)
    _launch("m7i.xlarge")
    _eks_cluster("1.35", {"gpu-workers": 2, "system-nodes": 1})
    results = _run(
        _with_redeploy(redeploy_of(MAX_MODEL_LEN="2048"), gpu_update_surge_nodes=2, system_update_surge_nodes=6),
        gpu_quota=64,
        standard_quota=4,
        deployed=_deployed_templates(),
    )
    failed = {name: r.fix for name, r in results.items() if not r.ok and name != "helm-charts"}
    assert failed == {}


# --- versions, refused changes, leftovers ---------------------------------------------------------------


def test_a_kubernetes_version_skip_is_refused_before_anything_is_touched(aws: None) -> None:
    _eks_cluster("1.34", {"gpu-workers": 2, "system-nodes": 1})
    results = _run(
        _with_redeploy(redeploy_of(K8S_VERSION="1.36")),
        gpu_quota=64,
        standard_quota=4,
        deployed=_deployed_templates(K8S_VERSION="1.34"),
    )
    version = results["kubernetes-version"]
    assert not version.ok and "deploy K8S_VERSION=1.35 first" in version.fix


def test_a_gpu_az_change_is_refused(aws: None) -> None:
    _eks_cluster("1.35", {"gpu-workers": 2, "system-nodes": 1})
    results = _run(
        _with_redeploy(redeploy_of(GPU_AZ="sa-east-1b")), gpu_quota=64, standard_quota=4, deployed=_deployed_templates()
    )
    assert not results["stack-changes"].ok and "under the same name" in results["stack-changes"].fix


def test_a_leftover_control_plane_log_group_is_caught_on_the_first_deploy(aws: None) -> None:
    boto3.client("logs", region_name=REGION).create_log_group(logGroupName=f"/aws/eks/{CLUSTER}/cluster")
    results = _run(_with_redeploy(redeploy_of()), gpu_quota=64, standard_quota=4)
    leftover = results["control-plane-log-group"]
    assert not leftover.ok and "already exists outside the stacks" in leftover.detail
    assert f"aws logs delete-log-group --region {REGION} --log-group-name /aws/eks/{CLUSTER}/cluster" in leftover.fix
    assert results["stack-states"].ok and "first deploy" in results["stack-states"].detail


def test_a_log_group_eks_made_before_the_stack_owned_it_is_caught(aws: None) -> None:
    """A cluster stack deployed before it created the group: EKS made the group, and the next deploy's
    create of it would fail although the cluster stack exists."""
    boto3.client("logs", region_name=REGION).create_log_group(logGroupName=f"/aws/eks/{CLUSTER}/cluster")
    _eks_cluster("1.35", {"gpu-workers": 2, "system-nodes": 1})
    deployed = _deployed_templates()
    cluster_stack = f"{CLUSTER}-cluster"
    deployed[cluster_stack] = {
        **deployed[cluster_stack],
        "Resources": {
            k: v for k, v in deployed[cluster_stack]["Resources"].items() if v["Type"] != "AWS::Logs::LogGroup"
        },
    }
    results = _run(_with_redeploy(redeploy_of()), gpu_quota=64, standard_quota=4, deployed=deployed)
    assert not results["control-plane-log-group"].ok
    owned = _run(_with_redeploy(redeploy_of()), gpu_quota=64, standard_quota=4, deployed=_deployed_templates())
    assert (
        owned["control-plane-log-group"].ok and "belongs to a deployed stack" in owned["control-plane-log-group"].detail
    )


def test_no_leftover_passes(aws: None) -> None:
    results = _run(_with_redeploy(redeploy_of()), gpu_quota=64, standard_quota=4)
    assert results["control-plane-log-group"].ok


# --- pinned charts against a chart repository on this machine -----------------------------------------

_INDEX = """apiVersion: v1
entries:
  kuberay-operator:
  - name: kuberay-operator
    version: 1.7.0
  - name: kuberay-operator
    version: 1.6.1
  aws-efa-k8s-device-plugin:
  - name: aws-efa-k8s-device-plugin
    version: v0.5.29
"""


@pytest.fixture
def chart_repository() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = _INDEX.encode() if self.path == "/charts/index.yaml" else b""
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "application/x-yaml")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with serving(Handler) as base:
        yield base


def test_pinned_charts_found_in_the_index(chart_repository: str) -> None:
    pins = (
        HelmChartPin(f"{chart_repository}/charts", "kuberay-operator", "1.7.0"),
        HelmChartPin(f"{chart_repository}/charts/", "aws-efa-k8s-device-plugin", "v0.5.29"),
    )
    result = check_helm_charts(pins, timeout=5)
    assert (
        result.ok
        and result.detail == "in their repositories: kuberay-operator 1.7.0, aws-efa-k8s-device-plugin v0.5.29"
    )


def test_a_missing_chart_version_or_repository_fails_with_what_exists(chart_repository: str) -> None:
    result = check_helm_charts(
        (
            HelmChartPin(f"{chart_repository}/charts", "kuberay-operator", "1.9.9"),
            HelmChartPin(f"{chart_repository}/charts", "nvidia-device-plugin", "0.20.1"),
            HelmChartPin(f"{chart_repository}/elsewhere", "x", "1.0.0"),
        ),
        timeout=5,
    )
    assert not result.ok
    assert "kuberay-operator 1.9.9 is not in" in result.detail and "(its newest: 1.6.1, 1.7.0)" in result.detail
    assert "has no chart nvidia-device-plugin" in result.detail
    assert "cannot read" in result.detail and "elsewhere/index.yaml" in result.detail
    assert "settings/versions.py" in result.fix


# --- an export the deploy would remove --------------------------------------------------------------------------------


def _list_imports(answers: Mapping[str, list[str]]) -> Any:
    """CloudFormation's ListImports (a botocore Stubber: moto 5.2.5 has ListExports but no ListImports)."""
    client = boto3.session.Session().client("cloudformation", region_name=REGION)
    stubber = Stubber(client)
    for export, importers in answers.items():
        if importers:
            stubber.add_response("list_imports", {"Imports": importers}, {"ExportName": export})
        else:
            stubber.add_client_error(
                "list_imports",
                "ValidationError",
                f"Export '{export}' is not imported by any stack.",
                expected_params={"ExportName": export},
            )
    stubber.activate()
    return client


def test_turning_the_store_off_is_refused_while_the_serving_stack_imports_its_exports(
    features_synth: Any, default_synth: Any
) -> None:
    """GCS_FAULT_TOLERANCE redis -> off with `make deploy` alone: the system stack would delete the store's exports
    while the deployed serving stack imports them, and CloudFormation fails the update. The preflight names them and the
    procedure.
    """
    from preflight.deployed import Deployed, DeployedStack
    from preflight.redeploy_live import check_removed_exports, removed_exports

    names = default_synth.settings.stack_names
    deployed = Deployed(
        stacks={
            names[p]: DeployedStack(names[p], "UPDATE_COMPLETE", {}, t) for p, t in features_synth.templates.items()
        }
    )
    redeploy = Redeploy.of(default_synth.settings, {names[p]: t for p, t in default_synth.templates.items()})
    removed = removed_exports(redeploy, deployed)
    system, serving = names["system"], names["serving"]
    assert len(removed) == 2 and set(removed.values()) == {system} and any("GcsStore" in e for e in removed)
    # The serving stack imports them as deployed (its template's Fn::ImportValue), which ListImports answers.
    assert all(e in json.dumps(features_synth.templates["serving"]) for e in removed)
    refused = check_removed_exports(redeploy, deployed, _list_imports({e: [serving] for e in removed}))
    assert (
        not refused.ok and all(e in refused.detail for e in removed) and f"which {serving} import(s)" in refused.detail
    )
    assert (
        refused.fix
        == f're-create the importing stack(s) without the import: `make destroy STACKS="{serving}"`, then `make deploy`'
    )
    # Nothing imports them any more (the serving stack was re-created first): the deploy may delete them.
    assert check_removed_exports(redeploy, deployed, _list_imports({e: [] for e in removed})).ok
    # The other way (off -> redis) removes no export and asks CloudFormation nothing.
    back = Deployed(
        stacks={names[p]: DeployedStack(names[p], "UPDATE_COMPLETE", {}, t) for p, t in default_synth.templates.items()}
    )
    assert check_removed_exports(
        Redeploy.of(features_synth.settings, {names[p]: t for p, t in features_synth.templates.items()}),
        back,
        _list_imports({}),
    ).ok
