"""Every setting, declared once: its name (the environment variable; in lower case the context key), default,
meaning, what is allowed, and what changing it does to a deployed stack. The docs' settings and change tables
are rendered from here; settings/loader.py parses and checks the values (tests/test_settings_bad_values.py fails
for a setting without a bad-value test).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from settings import versions
from settings.parsers import Choice, DnsLabel, Flag, Pattern, Semver
from settings.spec_base import (
    _RECREATE_HOW,
    IN_PLACE,
    NEW,
    PREFLIGHT_ONLY,
    RECREATE,
    REFUSED,
    REPLACEMENT,
    ROLLING,
    SettingSpec,
    flip,
)
from settings.specs_endpoint import ENDPOINT_SPECS
from settings.specs_infra import INFRA_SPECS
from settings.specs_model import MODEL_SPECS

__all__ = ["IN_PLACE", "NEW", "PREFLIGHT_ONLY", "RECREATE", "REFUSED", "REPLACEMENT", "ROLLING", "SPECS", "SettingSpec"]

SPECS: tuple[SettingSpec, ...] = (
    *INFRA_SPECS,
    SettingSpec(
        "DLC_IMAGE",
        versions.DLC_IMAGE_TEMPLATE,
        "Ray LLM container image of the head and workers (${REGION} is replaced)",
        "an image reference with a tag or digest",
        change=(RECREATE, _RECREATE_HOW),
        lands=("head", "k8s:DaemonSet/ray-image-prepull", "stack:serving", "workers:decode", "workers:prefill"),
        flip=flip("123456789012.dkr.ecr.sa-east-1.amazonaws.com/ray:custom"),
    ),
    SettingSpec(
        "KUBERAY_VERSION",
        versions.KUBERAY_OPERATOR.version,
        "KubeRay operator chart version",
        f"{versions.KUBERAY_OPERATOR.version} (the version of the CRDs in schemas/kuberay/, which the RayService is"
        " validated against)",
        change=(
            IN_PLACE,
            (
                "pinned to the CRDs in schemas/kuberay/; when a commit moves it, preflight refuses the deploy until"
                " `make kuberay-crds` has applied the new CRDs (Helm never upgrades them)"
            ),
        ),
        lands=("stack:system",),
        flip=None,
    ),
    SettingSpec(
        "KUBERAY_NAMESPACE",
        "kuberay-operator",
        "Namespace of the KubeRay operator release",
        "",
        parser=DnsLabel(),
        change=(
            REFUSED,
            (
                "the chart's cluster-scoped objects have fixed names, so two releases cannot coexist: `make destroy"
                " STACKS=CLUSTER_NAME-system` (takes the serving stack, and with OBSERVABILITY=on the observability"
                " stack, with it; the GPU nodes stay), then deploy"
            ),
        ),
        lands=("k8s:NetworkPolicy/kuberay-operator-to-head", "stack:system"),
        flip=flip("kuberay"),
    ),
    SettingSpec(
        "RAY_VERSION",
        versions.RAY_VERSION,
        "Ray version inside DLC_IMAGE",
        parser=Semver((2, 52, 0), "Ray's token authentication, which the RayCluster turns on"),
        change=(RECREATE, _RECREATE_HOW),
        lands=("k8s:RayService", "stack:serving"),
        flip=flip("2.59.0"),
    ),
    SettingSpec(
        "RAY_SERVICE_NAME",
        "ray-llm",
        "RayService name; the endpoint Service is NAME-serve-svc",
        "",
        parser=DnsLabel(53),
        change=(
            REPLACEMENT,
            (
                "new RayService applied, then the old one deleted (it would otherwise keep the GPU nodes). With"
                " HF_TOKEN_SECRET_NAME set the token's SecretProviderClass keeps its name, so the preflight refuses it:"
                " `make destroy STACKS=CLUSTER_NAME-serving` first"
            ),
        ),
        lands=(
            "head",
            "k8s:ConfigMap/{RAY_SERVICE_NAME}-serve-ingress",
            "k8s:RayService",
            "stack:serving",
            "workers:decode",
            "workers:prefill",
        ),
        flip=flip("llm"),
    ),
    *MODEL_SPECS,
    *ENDPOINT_SPECS,
    SettingSpec(
        "METRICS_NAMESPACE",
        "monitoring",
        "Namespace of an in-cluster metrics collector (your Prometheus) allowed to scrape the Ray pods' port 8080;"
        " OBSERVABILITY's managed collector is let in by address",
        "",
        parser=DnsLabel(),
        change=(IN_PLACE, "the NetworkPolicy of the metrics port"),
        lands=("k8s:NetworkPolicy/metrics-collector",),
        flip=flip("metrics"),
    ),
    SettingSpec(
        "OBSERVABILITY",
        "off",
        "CloudWatch metrics (Container Insights with GPU and EFA; the Ray pods' Prometheus metrics through a managed"
        " collector, queried with PromQL), a dashboard and alarms; costs money while idle",
        parser=Flag(),
        ci_variable=True,
        change=(
            RECREATE,
            (
                "`on` adds the CLUSTER_NAME-observability stack and lets the managed collector's subnets reach the Ray"
                " pods' metrics port (NetworkPolicy); the Ray workers give up a core and a GiB to the add-on's pods"
                f" (and take them back with `off`): {_RECREATE_HOW}. Back to `off`: first `OBSERVABILITY=on make"
                " destroy STACKS=CLUSTER_NAME-observability` (a stack left out of the app is neither deleted by a"
                " deploy nor found by `cdk destroy`)"
            ),
        ),
        lands=(
            "k8s:NetworkPolicy/metrics-collector",
            "stack:network",
            "stack:observability",
            "stack:serving",
            "workers:decode",
            "workers:prefill",
        ),
        flip=flip("on"),
    ),
    SettingSpec(
        "GCS_FAULT_TOLERANCE",
        "off",
        "`redis`: the Ray head's control state (GCS) in an ElastiCache (Valkey) store, so the workers keep their"
        " engines and Serve keeps answering while the head restarts; costs money while idle",
        "",
        parser=Choice(("off", "redis")),
        change=(
            RECREATE,
            (
                "the store and its secret come (or go) with the system stack in place; the RayCluster's"
                f" gcsFaultToleranceOptions and the head's secret volume are a RayCluster change: {_RECREATE_HOW}. Back"
                " to `off`: the same, then the store is deleted with its data"
            ),
        ),
        lands=(
            "head",
            "k8s:ConfigMap/gcs-store-ca",
            "k8s:RayService",
            "k8s:SecretProviderClass/gcs-store",
            "k8s:ServiceAccount/{RAY_SERVICE_NAME}-head",
            "stack:serving",
            "stack:system",
        ),
        flip=flip("redis"),
    ),
    SettingSpec(
        "GCS_STORE_NODE_TYPE",
        "cache.t4g.micro",
        "ElastiCache node type of the GCS store (GCS_FAULT_TOLERANCE=redis): a primary and a replica in another AZ",
        "the preflight checks that the Region offers it",
        parser=Pattern(
            r"cache\.[a-z][a-z0-9]*\.[a-z0-9]+",
            "an ElastiCache node type, cache.FAMILY.SIZE (e.g. cache.t4g.micro, cache.m7g.large)",
            strip=True,
        ),
        change=(IN_PLACE, "ElastiCache modifies the nodes (the replica first, then a failover)"),
        lands=("stack:system",),
        flip=flip("cache.m7g.large", given={"GCS_FAULT_TOLERANCE": "redis"}),
    ),
    SettingSpec(
        "HF_TOKEN_SECRET_NAME",
        "",
        "Secrets Manager secret holding a Hugging Face token (empty = none)",
        parser=Pattern(
            r"[A-Za-z0-9/_+=.@-]{1,512}",
            "empty, or a Secrets Manager secret name (letters, digits and /_+=.@-)",
            empty_ok=True,
            hints=(
                (
                    r"^arn:aws[a-z-]*:secretsmanager:",
                    "an ARN: give the name, what follows ':secret:' without the 6-character suffix AWS appends",
                ),
            ),
        ),
        ci_variable=True,
        change=(
            RECREATE,
            (
                "the CSI driver and Pod Identity are added in place; the workers' token volume is a RayCluster change:"
                f" {_RECREATE_HOW}"
            ),
        ),
        lands=(
            "k8s:SecretProviderClass/hf-token",
            "k8s:ServiceAccount/{RAY_SERVICE_NAME}-worker",
            "stack:serving",
            "workers:decode",
            "workers:prefill",
        ),
        flip=flip("prod/hf-token"),
    ),
)

SPECS_BY_CONTEXT_KEY: Mapping[str, SettingSpec] = {spec.context_key: spec for spec in SPECS}
CHANGE_EFFECTS: Final[dict[str, tuple[str, str]]] = {spec.env: spec.change for spec in SPECS if spec.change}


def settings_table_markdown() -> str:
    """The docs' settings table (docs/settings.md), generated from SPECS so the two cannot drift apart."""
    rows = ["| Environment variable | Context key (`-c`) | Default | Meaning | Allowed |", "|---|---|---|---|---|"]
    for spec in SPECS:
        default = f"`{spec.default}`" if spec.default else "(empty)"
        rows.append(f"| `{spec.env}` | `{spec.context_key}` | {default} | {spec.meaning} | {spec.allowed_text} |")
    return "\n".join(rows)


def change_table_markdown() -> str:
    """The docs' "Changing a deployed stack" table (docs/day2.md)."""
    rows = ["| Setting | Effect on a deployed stack | What happens, or how to apply it |", "|---|---|---|"]
    rows += [f"| `{name}` | {effect} | {how} |" for name, (effect, how) in CHANGE_EFFECTS.items()]
    return "\n".join(rows)
