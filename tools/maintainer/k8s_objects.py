"""Every Kubernetes object the project ships, one file each, for the validators that read manifests
(checkov's kubernetes framework): dist/, the manifests embedded in the synthesized templates, the benchmark
Job of `make bench-serving`, the chart of an exposed endpoint with API keys, and the Pods KubeRay makes from each
RayService's head and worker templates (checkov does not look inside the CRD).

`python -m tools.maintainer.k8s_objects OUTDIR ASSEMBLY...` (make checkov: cdk.out and the other configurations'
assemblies).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from k8s_constructs.ray_facts import HEAD_CONTAINER
from settings.context_files import REPO

DIST = REPO / "dist"
MANIFEST_TYPE = "Custom::AWSCDK-EKS-KubernetesResource"


def embedded_manifests(assembly: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(source, object) of every manifest a template of the assembly applies."""
    for template_file in sorted(assembly.glob("*.template.json")):
        template = json.loads(template_file.read_text())
        for logical_id, resource in template.get("Resources", {}).items():
            if resource["Type"] != MANIFEST_TYPE:
                continue
            manifest = resource["Properties"]["Manifest"]
            if not isinstance(manifest, str):
                raise ValueError(
                    f"{template_file.name}/{logical_id}: the manifest is not a literal, so it cannot be checked offline"
                )
            for obj in json.loads(manifest):
                yield f"{assembly.name}/{template_file.stem}/{logical_id}", obj


def dist_objects() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(DIST.glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if obj:
                yield f"dist/{path.name}", obj


def bench_job() -> Iterator[tuple[str, dict[str, Any]]]:
    import cdk8s

    from k8s_constructs.bench_job import BenchJobChart
    from tools.bench_serving import bench_props
    from tools.entry import project_settings

    chart = BenchJobChart(cdk8s.App(), "bench", props=bench_props(project_settings()))
    for obj in chart.to_json():
        yield "make bench-serving", obj


# KubeRay 1.7's autoscaler sidecar (ray-operator/controllers/ray/common/pod.go: AutoscalerContainerName, the log volume
# it shares with the Ray container).
AUTOSCALER_CONTAINER = "autoscaler"
RAY_LOGS_VOLUME, RAY_LOGS_MOUNT = "ray-logs", "/tmp/ray"


def _with_autoscaler(cluster: dict[str, Any], spec: dict[str, Any], cluster_name: str) -> dict[str, Any]:
    """The head pod's spec as KubeRay 1.7 completes it with in-tree autoscaling (pod.go, DefaultHeadPodTemplate and
    BuildAutoscalerContainer): the head group's service account (or one named after the cluster, which KubeRay
    creates), the autoscaler container with the head's image and autoscalerOptions merged in (mergeAutoscalerOverrides),
    and the log volume both containers mount."""
    options = cluster.get("autoscalerOptions", {})
    spec = json.loads(json.dumps(spec))
    spec.setdefault("serviceAccountName", cluster_name)
    logs = {"name": RAY_LOGS_VOLUME, "mountPath": RAY_LOGS_MOUNT}
    spec["containers"][0].setdefault("volumeMounts", []).append(logs)
    autoscaler: dict[str, Any] = {
        "name": AUTOSCALER_CONTAINER,
        "image": options.get("image", spec["containers"][0]["image"]),
        "imagePullPolicy": options.get("imagePullPolicy", "IfNotPresent"),
        "command": ["/bin/bash", "-c", "--"],
        "args": [
            "ray kuberay-autoscaler --cluster-name $(RAY_CLUSTER_NAME) --cluster-namespace $(RAY_CLUSTER_NAMESPACE)"
        ],
        "env": [
            {"name": "RAY_CLUSTER_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['ray.io/cluster']"}}},
            {"name": "RAY_CLUSTER_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            *options.get("env", []),
        ],
        "resources": options.get(
            "resources", {"limits": {"cpu": "500m", "memory": "512Mi"}, "requests": {"cpu": "500m", "memory": "512Mi"}}
        ),
        "volumeMounts": [*options.get("volumeMounts", []), logs],
        **({"securityContext": options["securityContext"]} if "securityContext" in options else {}),
    }
    spec["containers"].append(autoscaler)
    spec["volumes"] = [*spec.get("volumes", []), {"name": RAY_LOGS_VOLUME, "emptyDir": {}}]
    return spec


def kuberay_pods(ray_service: dict[str, Any]) -> list[dict[str, Any]]:
    """The Pods KubeRay creates from the RayService's head and worker group templates (their spec as written, the head's
    with the autoscaler sidecar when in-tree autoscaling is on; KubeRay adds its own labels, the Ray start command and
    probes).
    """
    cluster = ray_service["spec"]["rayClusterConfig"]
    name, namespace = ray_service["metadata"]["name"], ray_service["metadata"].get("namespace", "default")
    groups = [("head", cluster["headGroupSpec"]["template"])] + [
        (g["groupName"], g["template"]) for g in cluster.get("workerGroupSpecs", [])
    ]
    pods: list[dict[str, Any]] = []
    for group, template in groups:
        labels = {**template.get("metadata", {}).get("labels", {}), "ray.io/cluster": name, "ray.io/group": group}
        spec: dict[str, Any] = (
            _with_autoscaler(cluster, template["spec"], name)
            if group == "head" and cluster.get("enableInTreeAutoscaling")
            else template["spec"]
        )
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{name}-{group}", "namespace": namespace, "labels": labels},
                "spec": spec,
            }
        )
    assert any(c["name"] == HEAD_CONTAINER for c in pods[0]["spec"]["containers"])
    return pods


# A configuration with the endpoint beyond the cluster and API keys (docs/endpoint.md): its chart, with the placeholders
# dist/ uses for the deploy-time names (the templates hold them as tokens, which cannot be read offline).
def example_certificate_arn(region: str) -> str:
    """A well-formed ACM certificate ARN of `region` (the synth checks that it is the deploy Region's)."""
    return f"arn:aws:acm:{region}:123456789012:certificate/0123abcd-0123-4567-89ab-0123456789ab"


def endpoint_example() -> dict[str, str]:
    """The exposed configuration over the code's defaults: its certificate in the default Region, whatever that is
    (declared once, in settings/specs_infra.py)."""
    from settings.loader import SPECS_BY_ENV

    return {
        "SERVE_EXPOSURE": "internal",
        "SERVE_CERTIFICATE_ARN": example_certificate_arn(SPECS_BY_ENV["REGION"].default),
        "SERVE_HOSTNAME": "llm.example.com",
    }


def endpoint_objects() -> Iterator[tuple[str, dict[str, Any]]]:
    from k8s_constructs.ray_service import build_rayservice_chart
    from settings import load_settings

    for obj in build_rayservice_chart(load_settings(endpoint_example(), {})).to_json():
        yield "the SERVE_EXPOSURE=internal chart", obj


def all_objects(assemblies: list[Path]) -> Iterator[tuple[str, dict[str, Any]]]:
    sources = [dist_objects(), bench_job(), endpoint_objects(), *(embedded_manifests(a) for a in assemblies)]
    for source in sources:
        for where, obj in source:
            yield where, obj
            if obj.get("kind") == "RayService":
                for pod in kuberay_pods(obj):
                    yield f"{where} (KubeRay's {pod['metadata']['name']} pod)", pod


def write(outdir: Path, assemblies: list[Path]) -> int:
    shutil.rmtree(outdir, ignore_errors=True)
    outdir.mkdir(parents=True)
    count = 0
    seen: set[str] = set()
    for where, obj in all_objects(assemblies):
        text = yaml.safe_dump(obj, sort_keys=True)
        if text in seen:  # the same object from dist/ and the default templates: scanned once
            continue
        seen.add(text)
        count += 1
        kind, name = obj["kind"], obj["metadata"]["name"]
        (outdir / f"{count:03d}-{kind.lower()}-{name}.yaml").write_text(f"# from {where}\n{text}")
    return count


def main(argv: list[str] | None = None) -> int:
    if (argv if argv is not None else sys.argv[1:]) == ["--example-certificate-arn"]:
        # `make checkov`'s exposed-endpoint synth: a certificate in the Region this checkout deploys to. The REGION
        # setting's text alone (environment, cdk.json, default): the rest of the settings is what the synth it feeds
        # will check, and it is incomplete until this ARN is in it.
        from settings.context_files import read_project_context
        from settings.loader import raw_values

        print(example_certificate_arn(raw_values(os.environ, read_project_context())["REGION"]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("assemblies", type=Path, nargs="+")
    args = parser.parse_args(argv)
    count = write(args.outdir, args.assemblies)
    print(f"wrote {count} Kubernetes objects to {args.outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
