"""Every setting, declared once: its name (the environment variable; in lower case the context key), default,
meaning, what is allowed, and what changing it does to a deployed stack. The docs' settings and change tables
are rendered from here; settings/loader.py parses and checks the values (tests/test_settings_bad_values.py fails
for a setting without a bad-value test).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from settings import versions
from settings.parsers import Choice, DnsLabel, Flag, Integer, OptionalInteger, Pattern, Semver
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

__all__ = ["IN_PLACE", "NEW", "PREFLIGHT_ONLY", "RECREATE", "REFUSED", "REPLACEMENT", "ROLLING", "SPECS", "SettingSpec"]

SPECS: tuple[SettingSpec, ...] = (
    *INFRA_SPECS,
    SettingSpec(
        "DLC_IMAGE",
        versions.DLC_IMAGE_TEMPLATE,
        "Ray LLM container image of the head and workers (${REGION} is replaced)",
        "an image reference with a tag or digest",
        change=(RECREATE, _RECREATE_HOW),
        lands=("head", "k8s:DaemonSet", "stack:serving", "workers:decode", "workers:prefill"),
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
        lands=("k8s:NetworkPolicy", "stack:system"),
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
        lands=("k8s:RayService", "stack:serving"),
        flip=flip("llm"),
    ),
    SettingSpec(
        "MODEL_ID",
        "qwen3.5-9b",
        "Model name clients send in requests",
        parser=Pattern(
            r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", "letters, digits, '.', '_' and '-', at most 128 characters"
        ),
        change=(IN_PLACE, "serveConfigV2: Ray Serve redeploys the application"),
        lands=("serve:decode", "serve:prefill"),
        flip=flip("my-model"),
    ),
    SettingSpec(
        "MODEL_SOURCE",
        "Qwen/Qwen3.5-9B",
        "Where the weights come from: a Hugging Face repository, or an S3 prefix holding a copy (`make mirror-model`)"
        " that the GPU workers read with their own EKS Pod Identity",
        "ORG/NAME, or s3://BUCKET/PREFIX (a bucket in REGION; no wildcard); an architecture vLLM 0.26 serves, fitting"
        " the GPUs (checked at synth when its facts are known: built in, or `make lookup`)",
        change=(
            RECREATE,
            (
                "from one Hub id to another, or one S3 prefix to another: in place (serveConfigV2, Ray Serve redeploys"
                " the application and the engines download the new weights; a new prefix also moves the workers' read"
                " permission). Between a Hub id and an S3 prefix the workers gain or lose their service account and"
                f" Region: {_RECREATE_HOW}. Fill the prefix first (`make mirror-model`; a new revision's beside the"
                " served one, through MODEL_NEXT_SOURCE): the preflight refuses an unparked deploy from a prefix"
                " without the mirror's `hash`"
            ),
        ),
        lands=(
            "k8s:ServiceAccount",
            "serve:decode",
            "serve:prefill",
            "stack:serving",
            "workers:decode",
            "workers:prefill",
        ),
        flip=flip("s3://example-models/qwen3.5-9b"),
    ),
    SettingSpec(
        "MODEL_SOURCE_KMS_KEY_ARN",
        "",
        "KMS key of the S3 model bucket when it is encrypted with SSE-KMS: the workers may kms:Decrypt with it through"
        " S3 (empty = SSE-S3)",
        "a KMS key ARN, only with an s3:// MODEL_SOURCE",
        change=(IN_PLACE, "the workers' Pod Identity role"),
        lands=("stack:serving",),
        flip=flip(
            "arn:aws:kms:sa-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
            given={"MODEL_SOURCE": "s3://example-models/qwen3.5-9b"},
        ),
    ),
    SettingSpec(
        "MODEL_NEXT_SOURCE",
        "",
        "The S3 prefix `make mirror-model` fills next, for the revision to switch to: the mirror Job may write it and "
        "no longer MODEL_SOURCE's (empty = it writes MODEL_SOURCE's prefix)",
        "empty, or s3://BUCKET/PREFIX in MODEL_SOURCE's bucket (an s3:// MODEL_SOURCE), other than MODEL_SOURCE's "
        "prefix and neither inside the other; a prefix of letters, digits and !_.'()- segments, as MODEL_SOURCE's",
        change=(
            IN_PLACE,
            (
                "IAM only: the mirror Job's Pod Identity role moves to this prefix; serveConfigV2, the RayCluster and"
                " the workers' role are unchanged. The switch to it without parking: docs/weights.md (A new revision)"
            ),
        ),
        lands=("stack:serving",),
        flip=flip("s3://example-models/qwen3.5-9b-next", given={"MODEL_SOURCE": "s3://example-models/qwen3.5-9b"}),
    ),
    SettingSpec(
        "PREFILL_REPLICAS",
        "1",
        "Prefill replicas (one vLLM engine of TENSOR_PARALLEL_SIZE GPUs each)",
        "",
        parser=Integer(1, 64),
        change=(
            RECREATE,
            (
                "serveConfigV2, the GPU nodegroup (when GPU_NODE_COUNT is empty) and the prefill worker group's size,"
                f" which KubeRay 1.7 does not apply to a running cluster: {_RECREATE_HOW}"
            ),
        ),
        lands=("serve:prefill", "stack:gpu", "stack:serving", "workers:prefill"),
        flip=flip("2"),
    ),
    SettingSpec(
        "DECODE_REPLICAS",
        "1",
        "Decode replicas (one vLLM engine of TENSOR_PARALLEL_SIZE GPUs each)",
        "",
        parser=Integer(1, 64),
        change=(
            RECREATE,
            (
                "serveConfigV2, the GPU nodegroup (when GPU_NODE_COUNT is empty) and the decode worker group's size,"
                f" which KubeRay 1.7 does not apply to a running cluster: {_RECREATE_HOW}"
            ),
        ),
        lands=("serve:decode", "stack:gpu", "stack:serving", "workers:decode"),
        flip=flip("2"),
    ),
    SettingSpec(
        "PREFILL_MAX_REPLICAS",
        "",
        "Most prefill replicas: with a value the prefill phase autoscales on its own load between PREFILL_REPLICAS and"
        " this (empty = fixed)",
        "at least PREFILL_REPLICAS; the nodes of both maxima at most 64",
        parser=OptionalInteger(1, 64),
        change=(
            RECREATE,
            (
                "the RayCluster's in-tree autoscaler (on or off) and the worker group's maxReplicas, which KubeRay 1.7"
                f" does not apply to a running cluster: {_RECREATE_HOW}; serveConfigV2 and the GPU nodegroup's maximum"
                " in place. The preflight refuses a nodegroup scaling change while the node autoscaler holds it above"
                " its minimum (CloudFormation would reset the desired size)"
            ),
        ),
        lands=(
            "head",
            "k8s:RayService",
            "serve:app",
            "serve:prefill",
            "stack:gpu",
            "stack:serving",
            "stack:system",
            "workers:decode",
            "workers:prefill",
        ),
        flip=flip("2"),
    ),
    SettingSpec(
        "DECODE_MAX_REPLICAS",
        "",
        "Most decode replicas: with a value the decode phase autoscales on its own load between DECODE_REPLICAS and"
        " this (empty = fixed)",
        "at least DECODE_REPLICAS; the nodes of both maxima at most 64",
        parser=OptionalInteger(1, 64),
        change=(RECREATE, "as PREFILL_MAX_REPLICAS"),
        lands=(
            "head",
            "k8s:RayService",
            "serve:app",
            "serve:decode",
            "stack:gpu",
            "stack:serving",
            "stack:system",
            "workers:decode",
            "workers:prefill",
        ),
        flip=flip("2"),
    ),
    SettingSpec(
        "TENSOR_PARALLEL_SIZE",
        "1",
        "GPUs of one vLLM engine (tensor parallelism), inside one node; one value for both phases (NIXL cannot mix TP"
        " sizes for Qwen3.5's hybrid layers)",
        "1, 2, 4 or 8, at most the GPUs of GPU_NODE_TYPE",
        change=(
            RECREATE,
            (
                "serveConfigV2 (the engines' bundles) in place; when the node counts change, the worker groups' sizes,"
                f" which KubeRay 1.7 does not apply to a running cluster: {_RECREATE_HOW}"
            ),
        ),
        lands=("serve:decode", "serve:prefill"),
        flip=flip("2", given={"GPU_NODE_TYPE": "g6.48xlarge"}),
    ),
    SettingSpec(
        "MAX_MODEL_LEN",
        "4096",
        "vLLM max_model_len: sized to the KV cache that fits on the GPU",
        "at most the model's native context, and one sequence of it must fit the GPU (checked at synth;"
        " docs/models.md)",
        parser=Integer(256, 1048576),
        change=(IN_PLACE, "serveConfigV2: Ray Serve redeploys the application"),
        lands=("serve:app", "serve:decode", "serve:prefill"),
        flip=flip("2048"),
    ),
    SettingSpec(
        "MODEL_IMAGES",
        "off",
        "off: a multimodal model (Qwen3.5) serves text only and vLLM loads no vision tower (language_model_only), which"
        " leaves more of an L4 to the KV cache; on: it keeps it",
        parser=Flag(),
        change=(IN_PLACE, "serveConfigV2: Ray Serve redeploys the application"),
        lands=("serve:decode", "serve:prefill"),
        flip=flip("on", given={"GPU_NODE_TYPE": "g6e.8xlarge"}),
    ),
    SettingSpec(
        "KV_TRANSPORT",
        "libfabric",
        "NIXL's backend for the KV cache between the phases: libfabric (EFA; on g6/g6e without GPUDirect RDMA"
        " through host bounce buffers, never yet measured there) or ucx (no EFA: TCP between the nodes, slower but"
        " NIXL's default and most used path); docs/verify.md (The KV path on g6)",
        "",
        parser=Choice(("libfabric", "ucx")),
        change=(
            RECREATE,
            "serveConfigV2 (both engines' backends) and the workers' EFA request and libfabric environment, which are"
            " RayCluster changes: the preflight refuses the deploy over a running RayService with `make destroy"
            " STACKS=CLUSTER_NAME-serving && make deploy` (GPU nodes stay)",
        ),
        lands=("serve:decode", "serve:prefill", "stack:serving", "workers:decode", "workers:prefill"),
        flip=flip("ucx"),
    ),
    SettingSpec(
        "ENFORCE_EAGER",
        "auto",
        "auto: each phase's engine compiles and captures CUDA graphs where the fit check leaves room for their memory"
        " and 8 sequences of MAX_MODEL_LEN (eager on the L4 of g6.8xlarge, compiled on L40S, A100, H100); true: eager;"
        " false: compiled with CUDA graphs (docs/models.md)",
        "",
        parser=Choice(("auto", "true", "false")),
        change=(IN_PLACE, "serveConfigV2: Ray Serve redeploys the application (both engines restart)"),
        lands=("serve:decode", "serve:prefill"),
        flip=flip("true", given={"GPU_NODE_TYPE": "g6e.8xlarge"}),
    ),
    *ENDPOINT_SPECS,
    SettingSpec(
        "METRICS_NAMESPACE",
        "monitoring",
        "Namespace of an in-cluster metrics collector (your Prometheus) allowed to scrape the Ray pods' port 8080;"
        " OBSERVABILITY's managed collector is let in by address",
        "",
        parser=DnsLabel(),
        change=(IN_PLACE, "the NetworkPolicy of the metrics port"),
        lands=("k8s:NetworkPolicy",),
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
            "k8s:NetworkPolicy",
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
            "k8s:ConfigMap",
            "k8s:RayService",
            "k8s:SecretProviderClass",
            "k8s:ServiceAccount",
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
        ),
        ci_variable=True,
        change=(
            RECREATE,
            (
                "the CSI driver and Pod Identity are added in place; the workers' token volume is a RayCluster change:"
                f" {_RECREATE_HOW}"
            ),
        ),
        lands=("k8s:SecretProviderClass", "k8s:ServiceAccount", "stack:serving", "workers:decode", "workers:prefill"),
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
