"""The optional Hugging Face token: read from Secrets Manager by the workers' Pod Identity through the
Secrets Store CSI driver; only the secret's name is in the templates and manifests."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate

from stacks.addons import secrets_store_provider
from tests.conftest import Synth
from tests.test_serving import deployed_manifest
from tests.validators import crd_errors

SECRET = "prod/hf-token"


def _objects(synth: Synth, kind: str) -> list[dict[str, Any]]:
    return [o for o in deployed_manifest(synth) if o["kind"] == kind]


def test_no_token_means_none_of_this(default_synth: Synth) -> None:
    assert not default_synth.resources("serving", "AWS::EKS::PodIdentityAssociation")
    assert not _objects(default_synth, "SecretProviderClass") and not _objects(default_synth, "ServiceAccount")
    worker = _objects(default_synth, "RayService")[0]["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"][
        "spec"
    ]
    assert "serviceAccountName" not in worker
    assert all(e["name"] != "HF_TOKEN" for e in worker["containers"][0]["env"])


def test_secrets_provider_release_is_pinned_and_runs_on_gpu_nodes(hf_token_synth: Synth) -> None:
    releases = {
        v["Properties"]["Chart"]: v
        for v in hf_token_synth.resources("serving", "Custom::AWSCDK-EKS-HelmChart").values()
    }
    props = releases[secrets_store_provider.PIN.chart]["Properties"]
    assert (
        props["Version"] == secrets_store_provider.PIN.version
        and props["Repository"] == secrets_store_provider.PIN.repository
    )
    values = json.loads(props["Values"])
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert values["tolerations"] == [toleration]
    driver = values["secrets-store-csi-driver"]
    assert driver["install"] is True and driver["syncSecret"] == {"enabled": True}
    assert driver["linux"]["tolerations"] == [toleration]
    assert {"audience": "pods.eks.amazonaws.com"} in driver["tokenRequests"]


def test_pod_identity_role_reads_only_that_secret(hf_token_synth: Synth) -> None:
    resources = hf_token_synth.templates["serving"]["Resources"]
    (association,) = hf_token_synth.resources("serving", "AWS::EKS::PodIdentityAssociation").values()
    assert association["Properties"]["Namespace"] == "inference"
    assert association["Properties"]["ServiceAccount"] == "ray-llm-worker"
    role_id = association["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    trust = resources[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert {a for s in trust for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])} == {
        "sts:AssumeRole",
        "sts:TagSession",
    }
    assert all(s["Principal"] == {"Service": "pods.eks.amazonaws.com"} for s in trust)
    (policy,) = [
        v
        for v in resources.values()
        if v["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in v["Properties"]["Roles"]
    ]
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert sorted(statement["Action"]) == ["secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue"]
    assert f":secret:{SECRET}-??????" in json.dumps(statement["Resource"])


def test_workers_get_the_token_from_the_synced_secret(hf_token_synth: Synth) -> None:
    (rs,) = _objects(hf_token_synth, "RayService")
    pod = rs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]
    assert pod["serviceAccountName"] == "ray-llm-worker"
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["hf-token"]["csi"] == {
        "driver": "secrets-store.csi.k8s.io",
        "readOnly": True,
        "volumeAttributes": {"secretProviderClass": "hf-token"},
    }
    assert crd_errors(rs) == []


def test_secret_provider_class_and_service_account(hf_token_synth: Synth) -> None:
    (spc,) = _objects(hf_token_synth, "SecretProviderClass")
    assert spc["apiVersion"] == "secrets-store.csi.x-k8s.io/v1"
    params = spc["spec"]["parameters"]
    assert spc["spec"]["provider"] == "aws" and params["usePodIdentity"] == "true" and params["region"] == "sa-east-1"
    assert "objectName: prod/hf-token" in params["objects"] and "objectType: secretsmanager" in params["objects"]
    assert spc["spec"]["secretObjects"] == [
        {"secretName": "hf-token", "type": "Opaque", "data": [{"objectName": "token", "key": "token"}]}
    ]
    (account,) = _objects(hf_token_synth, "ServiceAccount")
    assert account["metadata"] == {"name": "ray-llm-worker", "namespace": "inference"}
    assert account["automountServiceAccountToken"] is False  # the workers never call the Kubernetes API
    kubernetes_validate.validate(account, "1.35", strict=True)


def test_the_token_value_is_nowhere_in_templates_or_manifests(hf_token_synth: Synth) -> None:
    text = json.dumps(hf_token_synth.templates)
    assert "resolve:secretsmanager" not in text and "SecretString" not in text
    assert not any(o["kind"] == "Secret" for o in deployed_manifest(hf_token_synth))


def test_rayservice_waits_for_the_provider_and_the_association(hf_token_synth: Synth) -> None:
    serving = hf_token_synth.deployment.serving
    deps = {c.node.path for c in serving.ray_service.node.dependencies}
    assert any(p.endswith("/SecretsStoreCsiProvider") for p in deps)
    assert any(p.endswith("/HfTokenPodIdentity") for p in deps)


def test_nag_and_the_acknowledged_secret_wildcard(hf_token_synth: Synth) -> None:
    findings = [v["ruleName"] for p in hf_token_synth.nag_report["pluginReports"] for v in p["violations"]]
    assert findings == [] and hf_token_synth.nag_error == ""
