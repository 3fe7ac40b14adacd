"""Where a setting lands: the synthesized output cut into places, and the places two synths differ in.

The places: each stack's template ("stack:PART", the Kubernetes objects it applies left out); each Kubernetes object
it applies ("k8s:KIND/NAME": "k8s:NetworkPolicy/{RAY_SERVICE_NAME}-serve-clients"), the RayService cut further into
its serve config's phases ("serve:prefill", "serve:decode"), the rest of its serve application ("serve:app"), its
worker groups ("workers:prefill", "workers:decode"), its head group ("head") and the rest of it ("k8s:RayService").
In a NAME, the values of the naming settings (CLUSTER_NAME, RAY_SERVICE_NAME) are replaced by their names, so that an
object a setting renames is the same place."""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml

from settings import Settings
from tests.iam_documents import Resolver

KUBERNETES_RESOURCE = "Custom::AWSCDK-EKS-KubernetesResource"


def _ray_service_places(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    spec = obj["spec"]
    found: dict[str, Any] = {}
    serve = yaml.safe_load(spec.pop("serveConfigV2"))
    for application in serve["applications"]:
        args = application["args"]
        found["serve:prefill"] = args.pop("prefill_config")
        found["serve:decode"] = args.pop("decode_config")
    found["serve:app"] = serve
    cluster = spec["rayClusterConfig"]
    for group in cluster.pop("workerGroupSpecs"):
        found[f"workers:{group['groupName']}"] = group
    found["head"] = cluster.pop("headGroupSpec")
    found["k8s:RayService"] = obj
    return found


def _setting_free(settings: Settings, name: str) -> str:
    # The cluster's name first: the default RayService name is a prefix of it.
    for value, setting in ((settings.cluster_name, "CLUSTER_NAME"), (settings.ray_service_name, "RAY_SERVICE_NAME")):
        name = name.replace(value, "{" + setting + "}")
    return name


def places(settings: Settings, templates: dict[str, dict[str, Any]]) -> dict[str, Any]:
    resolver = Resolver({settings.stack_names[p]: t for p, t in templates.items()}, settings.region)
    found: dict[str, Any] = {}
    for part, template in templates.items():
        template = copy.deepcopy(template)
        for resource in template.get("Resources", {}).values():
            if resource["Type"] != KUBERNETES_RESOURCE:
                continue
            manifest = json.loads(resolver.resolve(resource["Properties"].pop("Manifest"), settings.stack_names[part]))
            for obj in manifest:
                if obj["kind"] == "RayService":
                    found |= _ray_service_places(obj)
                else:
                    found[f"k8s:{obj['kind']}/{_setting_free(settings, obj['metadata']['name'])}"] = obj
        found[f"stack:{part}"] = template
    return found


def landed(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    """The places whose content differs (a place in one synth only counts as differing)."""
    return {place for place in before.keys() | after.keys() if before.get(place) != after.get(place)}
