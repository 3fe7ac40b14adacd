"""`make lookup` on moto: the answers land in cdk.context.json and then decide the synth, offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from preflight.lookups import look_up
from settings import SettingError
from settings.context_files import write_cached_lookups
from settings.instance_types import instance_type_context_key
from settings.versions import addon_versions_context_key
from settings.zones import offerings_context_key, zones_context_key
from tests.conftest import run_entry_point, settings_for
from tests.preflight_fakes import _shared_loader
from tools.preflight import preflight_input

ADDONS = ("coredns", "eks-pod-identity-agent", "kube-proxy", "vpc-cni")


class _Session(boto3.session.Session):  # type: ignore[misc]
    """moto for EC2; eks DescribeAddonVersions from a Stubber (moto 5.2.5 does not implement it)."""

    def __init__(self, kubernetes_version: str = "1.35") -> None:
        super().__init__(region_name="sa-east-1")
        self.eks = boto3.session.Session().client("eks", region_name="sa-east-1")
        stubber = Stubber(self.eks)
        for name in ADDONS:
            versions = [
                # An older build that is no longer the default, and the default one; for another version too.
                {
                    "addonVersion": f"v1.0.0-{name}",
                    "compatibilities": [{"clusterVersion": kubernetes_version, "defaultVersion": False}],
                },
                {
                    "addonVersion": f"v1.1.0-{name}",
                    "compatibilities": [{"clusterVersion": kubernetes_version, "defaultVersion": True}],
                },
            ]
            stubber.add_response(
                "describe_addon_versions",
                {"addons": [{"addonName": name, "addonVersions": versions}]},
                {"addonName": name, "kubernetesVersion": kubernetes_version},
            )
        stubber.activate()

    def client(self, service_name: str, *args: Any, **kwargs: Any) -> Any:
        return self.eks if service_name == "eks" else super().client(service_name, *args, **kwargs)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> boto3.session.Session:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    # One botocore loader for every session (each new one re-parsed the service models), as tests/preflight_fakes.py.
    monkeypatch.setattr(botocore.session, "create_loader", _shared_loader)
    with mock_aws():
        yield _Session()


def test_look_up_caches_zones_offerings_and_unknown_type_facts(aws: boto3.session.Session, tmp_path: Path) -> None:
    entries = look_up(
        aws, region="sa-east-1", gpu_node_type="g6.8xlarge", system_node_type="m6in.xlarge", kubernetes_version="1.35"
    )
    zones = entries[zones_context_key("sa-east-1")]
    offering = entries[offerings_context_key("sa-east-1", "g6.8xlarge")]
    assert zones == sorted(zones) and set(offering) <= set(zones) and offering
    facts = entries[instance_type_context_key("m6in.xlarge")]
    assert facts["vcpus"] == 4 and facts["memory_mib"] == 16384
    assert instance_type_context_key("g6.8xlarge") not in entries  # built in: nothing to cache

    path = tmp_path / "cdk.context.json"
    write_cached_lookups(entries, path)
    context = json.loads(path.read_text())
    settings = settings_for({"SYSTEM_NODE_TYPE": "m6in.xlarge"}, context)
    assert settings.gpu_az == offering[0] and settings.gpu_az_source == "cached look-up"
    assert settings.system_node.vcpus == 4
    # The add-ons follow K8S_VERSION: EKS's default build of each, pinned in the template.
    assert entries[addon_versions_context_key("sa-east-1", "1.35")] == {name: f"v1.1.0-{name}" for name in ADDONS}
    assert (
        dict(settings.eks_addon_versions) == {name: f"v1.1.0-{name}" for name in ADDONS}
        and settings.unresolved_addons == ()
    )
    assert set(settings_for({"K8S_VERSION": "1.36"}, context).unresolved_addons) == set(ADDONS)


def test_looked_up_gpu_type_outside_the_table_becomes_usable(aws: boto3.session.Session) -> None:
    entries = look_up(
        _Session(),
        region="sa-east-1",
        gpu_node_type="g6.16xlarge",
        system_node_type="m7i.xlarge",
        kubernetes_version="1.35",
    )
    assert instance_type_context_key("g6.16xlarge") not in entries  # g6.16xlarge is built in
    entries = look_up(
        aws, region="us-east-1", gpu_node_type="g4dn.8xlarge", system_node_type="m7i.xlarge", kubernetes_version="1.35"
    )
    facts = entries[instance_type_context_key("g4dn.8xlarge")]
    assert facts["gpus"] == 1 and facts["efa_supported"] is True
    # A T4 (16 GB) cannot hold Qwen3.5-9B: the fit check says so, with the type's looked-up facts.
    with pytest.raises(SettingError, match=r"g4dn.8xlarge \(T4, TP 1\) needs"):
        settings_for({"REGION": "us-east-1", "GPU_NODE_TYPE": "g4dn.8xlarge"}, entries)
    # A model without facts is not checked (the synth says so): the type's facts are what is used.
    settings = settings_for(
        {"REGION": "us-east-1", "GPU_NODE_TYPE": "g4dn.8xlarge", "MODEL_SOURCE": "acme/tiny-model"}, entries
    )
    assert settings.gpu_node.gpu_model == facts["gpu_model"]


def test_preflight_input_comes_from_the_settings() -> None:
    inp = preflight_input(settings_for({}, {}))
    assert (inp.gpu_instance_type, inp.gpu_vcpus, inp.gpu_node_count) == ("g6.8xlarge", 32, 2)
    assert (inp.gpu_quota_code, inp.system_vcpus, inp.system_node_count) == ("L-DB2E81BA", 4, 1)


def test_the_image_tag_is_resolved_to_its_digest_and_the_pods_use_it(aws: boto3.session.Session) -> None:
    """ECR BatchGetImage on moto: the tag's digest is cached, and the synth pins head and workers to it."""
    from k8s_constructs.ray_service import build_rayservice_chart
    from settings.images import image_digest_context_key

    image = "123456789012.dkr.ecr.sa-east-1.amazonaws.com/ray:serve-llm-cuda-v1.0"
    ecr = boto3.client("ecr", region_name="sa-east-1")
    ecr.create_repository(repositoryName="ray")
    # With its layers: moto 5.2.5 digests a manifest by its layers' digests, and gives one without layers a digest
    # drawn from 101 (ecr/models.py `_create_digest`), so the moved tag below kept its digest about once in a hundred.
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"digest": "sha256:" + "c" * 64},
            "layers": [
                {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "digest": "sha256:" + "1" * 64}
            ],
        }
    )
    ecr.put_image(repositoryName="ray", imageManifest=manifest, imageTag="serve-llm-cuda-v1.0")
    entries = look_up(
        aws,
        region="sa-east-1",
        gpu_node_type="g6.8xlarge",
        system_node_type="m7i.xlarge",
        kubernetes_version="1.35",
        image=image,
    )
    digest = entries[image_digest_context_key(image)]
    assert digest.startswith("sha256:") and len(digest) == 71

    settings = settings_for({"DLC_IMAGE": image}, entries)
    assert (
        settings.dlc_image == f"123456789012.dkr.ecr.sa-east-1.amazonaws.com/ray@{digest}"
        and settings.dlc_image_source == "cached look-up"
    )
    cluster = build_rayservice_chart(settings).ray_service.to_json()["spec"]["rayClusterConfig"]
    images = [cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]]
    images += [g["template"]["spec"]["containers"][0]["image"] for g in cluster["workerGroupSpecs"]]
    assert images == [settings.dlc_image] * 3

    # AWS moves the tag: a new digest, and the pods' image changes with it (what `cdk diff` then shows).
    ecr.put_image(
        repositoryName="ray", imageManifest=manifest.replace("1" * 64, "2" * 64), imageTag="serve-llm-cuda-v1.0"
    )
    moved = look_up(
        _Session(),
        region="sa-east-1",
        gpu_node_type="g6.8xlarge",
        system_node_type="m7i.xlarge",
        kubernetes_version="1.35",
        image=image,
    )
    assert moved[image_digest_context_key(image)] != digest
    assert settings_for({"DLC_IMAGE": image}, moved).dlc_image != settings.dlc_image


def test_without_a_cached_digest_the_synth_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # app.py's main() in this process, on the pinned settings (tests/test_settings_bad_values.py runs the real process).
    status, _, stderr = run_entry_point("app", {}, tmp_path / "out", monkeypatch, capfd)
    assert status == 0, stderr
    notices = [line for line in stderr.splitlines() if "make lookup" in line]
    assert len(notices) == 1 and "DLC_IMAGE is a tag, not a digest" in notices[0], notices  # the look-ups: one line
