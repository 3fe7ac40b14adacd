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


@cache
def crd_validator(file_name: str, version: str = "v1") -> jsonschema.protocols.Validator:
    crd = yaml.safe_load((CRD_DIR / file_name).read_text())
    (entry,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = _strict(copy.deepcopy(entry["schema"]["openAPIV3Schema"]))
    # metadata is checked by the API server's ObjectMeta, not by the CRD schema.
    schema["properties"]["metadata"] = {"type": "object"}
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return validator_class(schema)


def crd_errors(obj: dict[str, Any], file_name: str = "ray.io_rayservices.yaml") -> list[str]:
    return [f"{'/'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in crd_validator(file_name).iter_errors(obj)]


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
