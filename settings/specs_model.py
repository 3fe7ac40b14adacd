"""The model's and the engines' settings: what is served, how many engines of each phase, how each engine runs.
Part of settings/specs.py's SPECS, in this order."""

from __future__ import annotations

from settings import versions
from settings.chat_parsers import REASONING_PARSER, TOOL_CALL_PARSER, EngineArgsJson, ParserName
from settings.model_source import MODEL_ID_ALLOWED
from settings.parsers import Choice, Flag, Integer, OptionalInteger
from settings.spec_base import _RECREATE_HOW, IN_PLACE, RECREATE, SettingSpec, flip


def _replicas(phase: str) -> SettingSpec:
    """PREFILL_REPLICAS or DECODE_REPLICAS: the phase's serve config, its worker group and the GPU nodegroup."""
    return SettingSpec(
        f"{phase.upper()}_REPLICAS",
        "1",
        f"{phase.capitalize()} replicas (one vLLM engine of TENSOR_PARALLEL_SIZE GPUs each)",
        "",
        parser=Integer(1, 64),
        change=(
            RECREATE,
            (
                f"serveConfigV2, the GPU nodegroup (when GPU_NODE_COUNT is empty) and the {phase} worker group's size,"
                f" which KubeRay 1.7 does not apply to a running cluster: {_RECREATE_HOW}"
            ),
        ),
        lands=(f"serve:{phase}", "stack:gpu", "stack:serving", f"workers:{phase}"),
        flip=flip("2"),
    )


# What turning autoscaling on changes whichever phase's maximum does it: the autoscaler in the head, both worker
# groups' bounds, the ingress's replicas, the Cluster Autoscaler (system) and the nodegroup's maximum.
_AUTOSCALING_LANDS = (
    "head",
    "k8s:RayService",
    "serve:app",
    "stack:gpu",
    "stack:serving",
    "stack:system",
    "workers:decode",
    "workers:prefill",
)


def _max_replicas(phase: str, change: str) -> SettingSpec:
    """PREFILL_MAX_REPLICAS or DECODE_MAX_REPLICAS: the phase's autoscaling bound."""
    upper = phase.upper()
    return SettingSpec(
        f"{upper}_MAX_REPLICAS",
        "",
        f"Most {phase} replicas: with a value the {phase} phase autoscales on its own load between {upper}_REPLICAS and"
        " this (empty = fixed)",
        f"at least {upper}_REPLICAS; the nodes of both maxima at most 64",
        parser=OptionalInteger(1, 64),
        change=(RECREATE, change),
        lands=(*_AUTOSCALING_LANDS, f"serve:{phase}"),
        flip=flip("2"),
    )


_ENGINES_RESTART = (IN_PLACE, "serveConfigV2: Ray Serve redeploys the application (both engines restart)")


def _chat_parser(parser: ParserName, meaning: str, other: str) -> SettingSpec:
    """TOOL_CALL_PARSER or REASONING_PARSER: both phases' engine_kwargs alike."""
    return SettingSpec(
        parser.env,
        "auto",
        meaning,
        parser=parser,
        change=_ENGINES_RESTART,
        lands=("serve:decode", "serve:prefill"),
        flip=flip(other),
    )


MODEL_SPECS: tuple[SettingSpec, ...] = (
    SettingSpec(
        "MODEL_ID",
        "",
        "Model name clients send in requests",
        MODEL_ID_ALLOWED,
        change=(IN_PLACE, "serveConfigV2: Ray Serve redeploys the application"),
        lands=("serve:decode", "serve:prefill"),
        flip=flip("my-model"),
    ),
    SettingSpec(
        "MODEL_SOURCE",
        "Qwen/Qwen3.5-9B",
        "Where the weights come from: a Hugging Face repository, or an S3 prefix holding a copy (`make mirror-model`)"
        " that the GPU workers read with their own EKS Pod Identity",
        "ORG/NAME, or s3://BUCKET/PREFIX (a bucket in REGION; no wildcard); an architecture vLLM"
        f" {versions.VLLM_MINOR} serves, fitting"
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
            "k8s:ServiceAccount/{RAY_SERVICE_NAME}-worker",
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
    _replicas("prefill"),
    _replicas("decode"),
    _max_replicas(
        "prefill",
        (
            "the RayCluster's in-tree autoscaler (on or off) and the worker group's maxReplicas, which KubeRay 1.7"
            f" does not apply to a running cluster: {_RECREATE_HOW}; serveConfigV2 and the GPU nodegroup's maximum"
            " in place. The preflight refuses a nodegroup scaling change while the node autoscaler holds it above"
            " its minimum (CloudFormation would reset the desired size)"
        ),
    ),
    _max_replicas("decode", "as PREFILL_MAX_REPLICAS"),
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
    _chat_parser(
        TOOL_CALL_PARSER,
        "How both engines read tool calls out of the model's text (OpenAI `tools`, every `tool_choice`): auto = the"
        " model's own (Qwen3.5: qwen3_coder, Qwen3: hermes, Llama 3.x: llama3_json; none known: off, said at synth),"
        " with auto tool choice on; off = tool requests answer 400",
        "hermes",
    ),
    _chat_parser(
        REASONING_PARSER,
        "How both engines split a thinking model's reasoning from its answer (the message's `reasoning` field): auto"
        " = the model's own (Qwen3.5 and Qwen3: qwen3; none known: off, said at synth); off = the thinking stays in"
        " `content`",
        "off",
    ),
    SettingSpec(
        "ENGINE_ARGS",
        "",
        'More vLLM arguments for both engines alike, as a JSON object (e.g. {"max_num_seqs": 64}): each a field of'
        f" vLLM {versions.VLLM_MINOR}'s EngineArgs or FrontendArgs, checked at synth",
        "a key another setting owns (max_model_len, tensor_parallel_size, kv_transfer_config, the parsers, ...) is"
        " refused with that setting's name",
        parser=EngineArgsJson(),
        change=_ENGINES_RESTART,
        lands=("serve:decode", "serve:prefill"),
        flip=flip('{"max_num_seqs": 64}'),
    ),
)
