"""Serving layer: the KubeRay release, the RayService, and their validation against KubeRay's, Ray's and
Kubernetes' own schemas."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import kubernetes_validate
import pytest
import yaml

from k8s_constructs.endpoint import AUTH_MODULE_VOLUME
from k8s_constructs.serve_config import INGRESS_MODULE_DIR, PdApplication, pd_application
from settings import versions
from tests.conftest import Synth, settings_for
from tests.iam_documents import Resolver
from tests.validators import crd_errors, pd_serving_args_fields, ray_serve_errors


def deployed_manifest(synth: Synth) -> list[dict[str, Any]]:
    """The objects the serving stack applies, without the prune label CDK adds to find them later."""
    resources = synth.resources("serving", "Custom::AWSCDK-EKS-KubernetesResource").values()
    # A manifest with another stack's value in it (the GCS store's address) is a Fn::Join: resolved as deployed.
    resolver = Resolver(synth.templates, synth.settings.region)
    manifests = [json.loads(resolver.resolve(resource["Properties"]["Manifest"], "serving")) for resource in resources]
    # The Namespace's manifest first, as the chart (and dist/) orders the objects.
    manifest: list[dict[str, Any]] = [
        o for m in sorted(manifests, key=lambda m: m[0]["kind"] != "Namespace") for o in m
    ]
    for obj in manifest:
        labels = obj["metadata"].get("labels", {})
        prune = [k for k in labels if k.startswith("aws.cdk.eks/prune-")]
        assert len(prune) == 1, labels
        del labels[prune[0]]
        if not labels:
            del obj["metadata"]["labels"]
    return manifest


def _ray_service(synth: Synth) -> dict[str, Any]:
    (obj,) = [o for o in deployed_manifest(synth) if o["kind"] == "RayService"]
    return obj


def _workers(synth: Synth) -> dict[str, dict[str, Any]]:
    groups = _ray_service(synth)["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    return {group["groupName"]: group for group in groups}


def _worker(synth: Synth, phase: str = "prefill") -> dict[str, Any]:
    return _workers(synth)[phase]


# --- the reference's values ---------------------------------------------------------------------


def test_rayservice_identity_and_versions(default_synth: Synth) -> None:
    rs = _ray_service(default_synth)
    assert rs["apiVersion"] == "ray.io/v1"
    assert rs["metadata"] == {"name": "ray-llm", "namespace": "inference"}
    assert rs["spec"]["rayClusterConfig"]["rayVersion"] == "2.58.0"
    assert isinstance(rs["spec"]["serveConfigV2"], str)


def test_upgrade_strategy_does_not_wait_for_gpus_it_cannot_get(default_synth: Synth) -> None:
    assert _ray_service(default_synth)["spec"]["upgradeStrategy"] == {"type": "None"}
    # The deprecated thresholds of the reference are ignored since KubeRay 1.1: not set.
    assert "serviceUnhealthySecondThreshold" not in _ray_service(default_synth)["spec"]


def test_head_is_cpu_only_on_system_nodes(default_synth: Synth) -> None:
    head = _ray_service(default_synth)["spec"]["rayClusterConfig"]["headGroupSpec"]
    assert head["rayStartParams"] == {"dashboard-host": "0.0.0.0", "num-cpus": "0", "num-gpus": "0"}
    pod = head["template"]["spec"]
    assert pod["nodeSelector"] == {"role": "system"}
    (container,) = pod["containers"]
    assert container["name"] == "ray-head"
    assert container["image"] == "763104351884.dkr.ecr.sa-east-1.amazonaws.com/ray:serve-llm-cuda-v1.0"
    assert {p["containerPort"] for p in container["ports"]} == {6379, 8265, 8000}
    assert container["resources"] == {
        "requests": {"cpu": "2", "memory": "8Gi"},
        "limits": {"cpu": "3", "memory": "12Gi"},
    }
    assert container["lifecycle"]["preStop"]["exec"]["command"][-1] == "ray stop"


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_workers_one_gpu_one_efa_privileged(default_synth: Synth, phase: str) -> None:
    assert list(_workers(default_synth)) == ["prefill", "decode"]
    group = _worker(default_synth, phase)
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 1
    # The phase's own Ray resource, one per GPU; GPUs in `resources`, so nothing in rayStartParams (KubeRay rejects
    # both).
    assert group["resources"] == {"GPU": "1", f"pd_{phase}": "1"}
    assert "rayStartParams" not in group
    pod = group["template"]["spec"]
    assert pod["nodeSelector"] == {"role": "gpu-worker"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    (container,) = pod["containers"]
    assert container["name"] == "ray-worker"
    resources = container["resources"]
    for kind in ("requests", "limits"):
        assert resources[kind]["nvidia.com/gpu"] == "1"
        assert resources[kind]["vpc.amazonaws.com/efa"] == "1"
    assert container["securityContext"] == {"privileged": True}
    env = {e["name"]: e for e in container["env"]}
    assert env["FI_PROVIDER"]["value"] == "efa"
    assert env["VLLM_HOST_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["HF_HOME"]["value"] == "/model-cache"
    assert env["VLLM_SSM_CONV_STATE_LAYOUT"]["value"] == "DS"
    assert "FI_EFA_USE_DEVICE_RDMA" not in env  # g6 has no RDMA read
    assert container["lifecycle"]["preStop"]["exec"]["command"][-1] == "ray stop"


def test_worker_memory_limit_keeps_the_weights_in_page_cache_and_fits_the_node(default_synth: Synth) -> None:
    container = _worker(default_synth)["template"]["spec"]["containers"][0]
    memory_gi = int(container["resources"]["limits"]["memory"].removesuffix("Gi"))
    cpu = int(container["resources"]["limits"]["cpu"])
    # Far above the ~18 GiB checkpoint; below what kubelet can offer on a g6.8xlarge: 128 GiB less the
    # kernel's share (~7.5%), kube-reserved (255 MiB + 11 MiB x 250 pods), eviction and DaemonSets.
    assert 48 <= memory_gi <= int((128 * 1024 * 0.925 - 255 - 11 * 250 - 100 - 1024) / 1024)
    assert memory_gi == 114
    assert cpu == 31
    assert container["resources"]["requests"] == container["resources"]["limits"]  # Guaranteed QoS


def test_shared_memory_and_model_cache_on_local_nvme(default_synth: Synth) -> None:
    pod = _worker(default_synth)["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory"}
    assert volumes["model-cache"]["hostPath"] == {"path": "/mnt/k8s-disks/0/model-cache", "type": "DirectoryOrCreate"}
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    # And the ingress modules (the PD guard), on every Ray pod of every configuration.
    assert mounts == {"dshm": "/dev/shm", "model-cache": "/model-cache", AUTH_MODULE_VOLUME: INGRESS_MODULE_DIR}


def test_serve_config_has_every_setting_of_the_reference(default_synth: Synth) -> None:
    config = yaml.safe_load(_ray_service(default_synth)["spec"]["serveConfigV2"])
    (app,) = config["applications"]
    assert app["name"] == "llm"
    assert app["import_path"] == "ray.serve.llm:build_pd_openai_app"
    assert app["route_prefix"] == "/"
    for phase in ("prefill", "decode"):
        llm = app["args"][f"{phase}_config"]
        assert llm["model_loading_config"] == {"model_id": "qwen3.5-9b", "model_source": "Qwen/Qwen3.5-9B"}
        assert llm["engine_kwargs"] == {
            "max_model_len": 4096,
            "dtype": "bfloat16",
            "gpu_memory_utilization": 0.9,
            "enforce_eager": True,
            "tensor_parallel_size": 1,
            # Qwen3.5-9B is vision-language; the endpoint is text only (MODEL_IMAGES=off): no vision tower.
            "language_model_only": True,
            # Qwen3.5's own parsers (TOOL_CALL_PARSER, REASONING_PARSER auto), the same in both phases.
            "enable_auto_tool_choice": True,
            "tool_call_parser": "qwen3_coder",
            "reasoning_parser": "qwen3",
            "kv_transfer_config": {
                "kv_connector": "NixlConnector",
                # vLLM 0.26 deprecates kv_both for the NixlConnector: each phase its own role (run on a GPU: same
                # output).
                "kv_role": {"prefill": "kv_producer", "decode": "kv_consumer"}[phase],
                "engine_id": phase,
                "kv_connector_extra_config": {"backends": ["LIBFABRIC"]},
            },
        }
        # Decode drains its streams for up to 4096 tokens at 80 ms (issue 28.1); prefill keeps Serve's default.
        assert llm["deployment_config"] == {
            "num_replicas": 1,
            **({"graceful_shutdown_timeout_s": 328} if phase == "decode" else {}),
        }
        # Pinned to its phase's nodes, on the L4 of g6.8xlarge.
        assert llm["placement_group_config"] == {
            "bundle_per_worker": {"GPU": 1, "CPU": 1, f"pd_{phase}": 1},
            "strategy": "STRICT_PACK",
        }
        assert llm["accelerator_type"] == "L4"


def test_namespace_admits_the_privileged_workers(default_synth: Synth) -> None:
    (namespace,) = [o for o in deployed_manifest(default_synth) if o["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == "inference"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert deployed_manifest(default_synth)[0]["kind"] == "Namespace"  # applied before the RayService


def test_kuberay_release(default_synth: Synth) -> None:
    (release,) = [v for v in default_synth.resources("system", "Custom::AWSCDK-EKS-HelmChart").values()]
    props = release["Properties"]
    assert props["Chart"] == "kuberay-operator" and props["Release"] == "kuberay-operator"
    assert props["Namespace"] == "kuberay-operator" and props["CreateNamespace"] is True
    assert props["Repository"] == versions.KUBERAY_OPERATOR.repository and props["Version"] == "1.7.0"
    assert props["Atomic"] is True and props["Wait"] is True
    values = json.loads(props["Values"])
    assert values["nodeSelector"] == {"role": "system"}
    assert set(values["resources"]) == {"requests", "limits"}


# --- dependencies that make `cdk destroy` safe ------------------------------------------------------


def _depends_on(synth: Synth, stack: str, resource_type: str) -> list[str]:
    (resource,) = synth.resources(stack, resource_type).values()
    return list(resource.get("DependsOn", []))


def test_rayservice_depends_on_its_namespace_in_its_stack(default_synth: Synth) -> None:
    manifests = default_synth.resources("serving", "Custom::AWSCDK-EKS-KubernetesResource")
    (namespace_id,) = [k for k, v in manifests.items() if '"kind":"Namespace"' in v["Properties"]["Manifest"]]
    (ray_service_id,) = [k for k, v in manifests.items() if '"kind":"RayService"' in v["Properties"]["Manifest"]]
    assert namespace_id in manifests[ray_service_id]["DependsOn"]


def test_serving_stack_follows_the_operator_and_both_nodegroups(default_synth: Synth) -> None:
    d = default_synth.deployment
    serving_deps = {s.stack_name for s in d.serving.dependencies}
    assert {d.system.stack_name, d.gpu.stack_name} <= serving_deps
    # Within the app the manifest's dependencies reach both nodegroups and the operator (created after
    # them, so deleted before them: the pods drain while their nodes and the operator still run).
    manifest_deps = {c.node.path for c in d.serving.ray_service.node.dependencies}
    assert {
        d.system.system_nodegroup.node.path,
        d.gpu.gpu_nodes.nodegroup.node.path,
        d.system.kuberay.node.path,
    } <= manifest_deps
    assert d.system.system_nodegroup.node.path in {c.node.path for c in d.system.kuberay.node.dependencies}


def test_the_gpu_nodes_do_not_wait_for_the_system_nodes_coredns_or_kuberay(default_synth: Synth) -> None:
    """The graph with no needless waits: system and GPU stacks depend on the cluster stack only, so
    `cdk deploy --concurrency` runs them side by side; the RayService waits for both."""
    d = default_synth.deployment
    assert {s.stack_name for s in d.gpu.dependencies} == {d.network.stack_name, d.cluster.stack_name}
    assert {s.stack_name for s in d.system.dependencies} == {d.network.stack_name, d.cluster.stack_name}
    assert not default_synth.resources("gpu", "AWS::EKS::Addon") and not default_synth.resources(
        "cluster", "AWS::EKS::Nodegroup"
    )


def test_cluster_fingerprint_output_changes_only_with_the_cluster(default_synth: Synth, p5_synth: Synth) -> None:
    from k8s_constructs.ray_service import build_rayservice_chart

    fingerprint = default_synth.templates["serving"]["Outputs"]["RayClusterConfigFingerprint"]["Value"]
    assert len(fingerprint) == 16
    assert p5_synth.templates["serving"]["Outputs"]["RayClusterConfigFingerprint"]["Value"] != fingerprint
    # A serve-config-only change (context length) leaves the cluster, and the fingerprint, alone.
    assert build_rayservice_chart(settings_for({"MAX_MODEL_LEN": "2048"})).ray_cluster_fingerprint == fingerprint
    assert (
        build_rayservice_chart(settings_for({"DLC_IMAGE": "example.com/ray:2"})).ray_cluster_fingerprint != fingerprint
    )
    # KubeRay 1.7 does not apply worker counts to a RayService's running cluster (they are out of its hash):
    # a second prefill replica's node is a re-create, so the fingerprint moves.
    more = build_rayservice_chart(settings_for({"PREFILL_REPLICAS": "2", "GPU_NODE_COUNT": "3"}))
    assert more.ray_cluster_fingerprint != fingerprint
    assert [g["replicas"] for g in more.ray_service.to_json()["spec"]["rayClusterConfig"]["workerGroupSpecs"]] == [2, 1]
    # Parking moves the nodegroup only, not the RayCluster.
    assert build_rayservice_chart(settings_for({"GPU_NODE_COUNT": "0"})).ray_cluster_fingerprint == fingerprint


def test_port_forward_output(default_synth: Synth) -> None:
    outputs = default_synth.templates["serving"]["Outputs"]
    assert outputs["PortForwardCommand"]["Value"] == "kubectl port-forward -n inference svc/ray-llm-serve-svc 8000:8000"


# --- validation with the real schemas ---------------------------------------------------------------


def test_rayservice_is_valid_against_the_kuberay_1_7_crd_with_no_unknown_field(default_synth: Synth) -> None:
    assert crd_errors(_ray_service(default_synth)) == []


def test_crd_check_rejects_an_unknown_field(default_synth: Synth) -> None:
    rs = json.loads(json.dumps(_ray_service(default_synth)))
    rs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["gpuCount"] = 1
    rs["spec"]["serveConfigV2"] = {"not": "a string"}
    errors = crd_errors(rs)
    assert any("gpuCount" in e for e in errors) and any("serveConfigV2" in e for e in errors)


def test_serve_config_passes_rays_own_schema(default_synth: Synth) -> None:
    import ray

    assert ray.__version__ == versions.RAY_VERSION  # the image's Ray, not the newest
    config = yaml.safe_load(_ray_service(default_synth)["spec"]["serveConfigV2"])
    assert ray_serve_errors(config) == []


def test_rays_schema_rejects_a_broken_llm_config() -> None:
    config = pd_application(settings_for()).to_serve_config()
    args = config["applications"][0]["args"]
    args["prefill_config"]["engine_kwarg"] = {}  # typo of engine_kwargs
    args["proxy_cls_config"] = {}
    args["bogus_config"] = {}
    errors = ray_serve_errors(config)
    assert any("engine_kwarg" in e for e in errors)
    assert any("bogus_config" in e for e in errors)
    assert {
        "prefill_config",
        "decode_config",
        "ingress_cls_config",
        "ingress_deployment_config",
    } <= pd_serving_args_fields()


def test_prefill_and_decode_must_share_the_model() -> None:
    app = pd_application(settings_for())
    with pytest.raises(ValueError, match="same model_id"):
        PdApplication(prefill=app.prefill, decode=dataclasses.replace(app.decode, model_id="other"))


def test_builtin_objects_pass_strict_kubernetes_validation(default_synth: Synth) -> None:
    builtin = [o for o in deployed_manifest(default_synth) if o["apiVersion"] in ("v1", "networking.k8s.io/v1")]
    assert [o["kind"] for o in builtin] == ["Namespace"] + ["NetworkPolicy"] * 5 + ["ConfigMap"]  # the ingress modules
    for obj in builtin:
        kubernetes_validate.validate(obj, default_synth.settings.kubernetes_version, strict=True)


def test_strict_kubernetes_validation_catches_a_bad_namespace(default_synth: Synth) -> None:
    (namespace,) = [o for o in deployed_manifest(default_synth) if o["kind"] == "Namespace"]
    bad = json.loads(json.dumps(namespace))
    bad["metadata"]["label"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, "1.35", strict=True)


def test_p5_with_tensor_parallel_8_gives_each_phase_a_whole_node(p5_synth: Synth) -> None:
    for phase in ("prefill", "decode"):
        group = _worker(p5_synth, phase)
        # One worker per node, holding all 8 GPUs and 32 EFA devices; the engine's 8 bundles fill it.
        assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 1
        assert group["resources"] == {"GPU": "8", f"pd_{phase}": "8"}
        limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert (limits["nvidia.com/gpu"], limits["vpc.amazonaws.com/efa"]) == ("8", "32")
    config = yaml.safe_load(_ray_service(p5_synth)["spec"]["serveConfigV2"])
    args = config["applications"][0]["args"]
    for phase in ("prefill", "decode"):
        llm = args[f"{phase}_config"]
        assert llm["engine_kwargs"]["tensor_parallel_size"] == 8
        assert llm["placement_group_config"] == {
            "bundle_per_worker": {"GPU": 1, "CPU": 1, f"pd_{phase}": 1},
            "strategy": "STRICT_PACK",
        }
        assert llm["accelerator_type"] == "H100"
        assert llm["deployment_config"]["num_replicas"] == 1
    assert crd_errors(_ray_service(p5_synth)) == []
    assert ray_serve_errors(config) == []
