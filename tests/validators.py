"""Validators other people wrote, wrapped for the tests: KubeRay's CRD schema, Ray's Serve schema,
kubernetes-validate for built-in objects."""

from __future__ import annotations

import ast
import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from settings.versions import KUBERAY_CRD_DIR as CRD_DIR


def _strict(schema: Any) -> Any:
    """The CRD's openAPIV3Schema as the API server applies it with strict field validation: an object
    without x-kubernetes-preserve-unknown-fields accepts no field its schema does not declare, and
    x-kubernetes-int-or-string means an integer or a string."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if out.pop("x-kubernetes-int-or-string", False):
            out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
        if out.get("type") == "object" and "properties" in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out.setdefault("additionalProperties", False)
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


NODEADM_CRD = Path(__file__).resolve().parent.parent / "schemas" / "nodeadm" / "node.eks.aws_nodeconfigs.yaml"


@cache
def crd_validator(file_name: str, version: str = "v1", directory: Path = CRD_DIR) -> jsonschema.protocols.Validator:
    crd = yaml.load((directory / file_name).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (entry,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = _strict(copy.deepcopy(entry["schema"]["openAPIV3Schema"]))
    # metadata is checked by the API server's ObjectMeta, not by the CRD schema.
    schema["properties"]["metadata"] = {"type": "object"}
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return validator_class(schema)


def nodeconfig_errors(obj: dict[str, Any]) -> list[str]:
    """A NodeConfig against nodeadm's own CRD, made strict: nodeadm itself drops an unknown field silently."""
    errors = (
        []
        if (obj.get("apiVersion"), obj.get("kind")) == ("node.eks.aws/v1alpha1", "NodeConfig")
        else [f"not a node.eks.aws/v1alpha1 NodeConfig: {obj.get('apiVersion')} {obj.get('kind')}"]
    )
    validator = crd_validator(NODEADM_CRD.name, "v1alpha1", NODEADM_CRD.parent)
    return errors + [f"{'/'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in validator.iter_errors(obj)]


def crd_errors(obj: dict[str, Any], file_name: str = "ray.io_rayservices.yaml") -> list[str]:
    return [
        f"{'/'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in crd_validator(file_name).iter_errors(obj)
    ]


def ray_serve_errors(serve_config: dict[str, Any]) -> list[str]:
    """serveConfigV2 against Ray's own schemas, at the Ray version installed (the image's: 2.58.0)."""
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig  # no vLLM needed
    from ray.serve.schema import ServeDeploySchema

    errors: list[str] = []
    try:
        ServeDeploySchema.model_validate(serve_config)
    except Exception as error:  # pydantic.ValidationError
        errors.append(f"ServeDeploySchema: {error}")
    for app in serve_config.get("applications", []):
        args = app.get("args", {})
        unknown = set(args) - pd_serving_args_fields()
        if unknown:
            errors.append(f"PDServingArgs has no field(s) {sorted(unknown)}")
        for key in ("prefill_config", "decode_config"):
            try:
                LLMConfig.model_validate(args[key])
            except Exception as error:
                errors.append(f"{key}: {error}")
    return errors


@cache
def pd_serving_args_fields() -> frozenset[str]:
    """Field names of Ray's PDServingArgs, read from the installed Ray's source: importing the module
    needs vLLM, which cannot be installed here."""
    import ray

    source = Path(ray.__file__).parent / "llm/_internal/serve/serving_patterns/prefill_decode/builder.py"
    tree = ast.parse(source.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "PDServingArgs"]
    return frozenset(n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name))


# KubeRay v1.7.0's own RayCluster rules that the CRD schema does not express, as written in
# ray-operator/controllers/ray/utils/validation.go at tag v1.7.0 (ValidateRayClusterSpec and the helpers
# it calls; the RayService path runs them on spec.rayClusterConfig). Only the rules that concern fields
# this project sets are repeated here, each with the function it comes from.
_RAY_START_RESOURCE_KEYS = ("num-cpus", "num-gpus", "memory", "resources")


def kuberay_cluster_errors(cluster: dict[str, Any]) -> list[str]:
    errors: list[str] = []
    head = cluster.get("headGroupSpec", {})
    groups = [("Head", head), *((g.get("groupName", "?"), g) for g in cluster.get("workerGroupSpecs", []))]
    if not head.get("template", {}).get("spec", {}).get("containers"):
        errors.append("headGroupSpec should have at least one container")  # ValidateRayClusterSpec
    autoscaling = bool(cluster.get("enableInTreeAutoscaling"))
    for name, group in groups:
        params = group.get("rayStartParams", {}) or {}
        # validateRayGroupResources
        if any(params.get(key) for key in _RAY_START_RESOURCE_KEYS) and group.get("resources"):
            errors.append(f"resource fields should not be set in both rayStartParams and Resources for {name} group")
        # validateRayGroupLabels
        if "labels" in params:
            errors.append(f"rayStartParams['labels'] is not supported for {name} group")
        if name == "Head":
            continue
        # ValidateRayClusterSpec, per worker group
        if not group.get("template", {}).get("spec", {}).get("containers"):
            errors.append("workerGroupSpec should have at least one container")
        low, high = group.get("minReplicas"), group.get("maxReplicas")
        if not autoscaling and (low is None or high is None):
            errors.append(f"worker group {name} must set both minReplicas and maxReplicas when autoscaling is disabled")
        if low is not None and high is not None and low > high:
            errors.append(f"worker group {name} has minReplicas {low} greater than maxReplicas {high}")
    # ValidateRayClusterSpec: token authentication needs Ray >= 2.52.0
    if (cluster.get("authOptions") or {}).get("mode") == "token":
        version = cluster.get("rayVersion")
        if not version:
            errors.append("authOptions.mode is 'token' but RayVersion was not specified")
        elif tuple(int(p) for p in version.split(".")[:3]) < (2, 52, 0):
            errors.append(f"authOptions.mode is 'token' but minimum Ray version is 2.52.0, got {version}")
    return errors


def ray_serve_llm_placement(llm_config: dict[str, Any]) -> tuple[list[dict[str, float]], str]:
    """The placement group bundles and strategy Ray Serve LLM builds for one LLMConfig, computed by Ray's
    own code at the installed version: VLLMEngineConfig.placement_bundles / placement_strategy and
    LLMServer's merge of the replica actor into the first bundle, read from Ray's source (the modules
    import vLLM, which cannot be installed here) and run on the config."""
    import copy as copy_module

    import ray
    from ray.llm._internal.serve.core.configs.accelerators import format_ray_accelerator_resource

    root = Path(ray.__file__).parent / "llm/_internal/serve"
    namespace: dict[str, Any] = {
        "List": list,
        "Dict": dict,
        "Any": Any,
        "copy": copy_module,
        "format_ray_accelerator_resource": format_ray_accelerator_resource,
    }
    models = ast.parse((root / "engines/vllm/vllm_models.py").read_text())
    (engine_cls,) = [n for n in models.body if isinstance(n, ast.ClassDef) and n.name == "VLLMEngineConfig"]
    wanted = {
        "tensor_parallel_degree",
        "pipeline_parallel_degree",
        "num_devices",
        "placement_strategy",
        "placement_bundles",
    }
    methods = [n for n in engine_cls.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert {m.name for m in methods} == wanted, "Ray's VLLMEngineConfig changed: update this reader"
    engine_module = ast.Module(
        body=[
            ast.ClassDef(name="EngineConfig", bases=[], keywords=[], body=methods, decorator_list=[], type_params=[])
        ],
        type_ignores=[],
    )
    exec(
        compile(ast.fix_missing_locations(engine_module), str(root / "engines/vllm/vllm_models.py"), "exec"), namespace
    )
    server = ast.parse((root / "core/server/llm_server.py").read_text())
    (merge,) = [
        n
        for n in server.body
        if isinstance(n, ast.FunctionDef) and n.name == "_merge_replica_actor_and_child_actor_bundles"
    ]
    exec(compile(ast.Module(body=[merge], type_ignores=[]), str(root / "core/server/llm_server.py"), "exec"), namespace)

    engine = namespace["EngineConfig"]()
    engine.placement_group_config = llm_config.get("placement_group_config")
    engine.accelerator_type = llm_config.get("accelerator_type")
    engine.engine_kwargs = llm_config.get("engine_kwargs", {})
    replica_actor = {"CPU": 1, "GPU": 0}  # LLMServer's default ray_actor_options (num_cpus 1, num_gpus 0)
    bundles = namespace["_merge_replica_actor_and_child_actor_bundles"](engine.placement_bundles, replica_actor)
    return bundles, engine.placement_strategy
