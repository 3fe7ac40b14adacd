"""serveConfigV2: the Ray Serve application, built from typed prefill and decode configurations.

The shape is Ray Serve LLM's (ray.serve.llm:build_pd_openai_app with PDServingArgs); the tests check
the result against Ray's own schema at the Ray version inside the image.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import yaml

from settings import Settings
from settings.decode_rate import longest_response_s
from settings.engine_args import check_engine_kwargs
from settings.model_fit import GPU_MEMORY_UTILIZATION
from settings.model_source import S3_SCHEME
from settings.sizing import CPUS_PER_GPU_BUNDLE

PD_APP_IMPORT_PATH = "ray.serve.llm:build_pd_openai_app"
APP_NAME = "llm"

Phase = Literal["prefill", "decode"]
# The custom Ray resource each worker group advertises, one unit per GPU, and each engine's placement
# bundles ask for: a prefill engine can only be placed on a prefill node and a decode engine on a decode
# node, and an engine too many waits instead of spilling onto the other phase's node.
PHASE_RESOURCES: dict[Phase, str] = {"prefill": "pd_prefill", "decode": "pd_decode"}
# Ray accelerator types (ray.util.accelerators) of the NVIDIA GPUs of the EFA instance families; a GPU
# outside this list gets no accelerator_type (Ray then places by the phase resource alone).
RAY_ACCELERATOR_TYPES = frozenset({"A10G", "L4", "L40S", "A100", "H100", "H200", "B200"})


KV_ROLES: dict[Phase, str] = {"prefill": "kv_producer", "decode": "kv_consumer"}


@dataclass(frozen=True)
class KvTransferConfig:
    """vLLM's KV connector: NIXL, over libfabric by default, so the KV cache crosses nodes on EFA (KV_TRANSPORT).

    Without backends=["LIBFABRIC"], NIXL picks UCX, which cannot drive EFA and runs at TCP speed: there is no
    environment variable that selects the backend, only this field. KV_TRANSPORT=ucx asks for that on purpose.
    """

    engine_id: Phase
    kv_connector: str = "NixlConnector"
    backends: tuple[str, ...] = ("LIBFABRIC",)

    @property
    def kv_role(self) -> str:
        # vLLM 0.26 deprecates kv_both for the NixlConnector (it warns at every start): the prefill engine only
        # produces KV caches, the decode engine only consumes them. Run on a GPU with both: same app, same output.
        return KV_ROLES[self.engine_id]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kv_connector": self.kv_connector,
            "kv_role": self.kv_role,
            "engine_id": self.engine_id,
            "kv_connector_extra_config": {"backends": list(self.backends)},
        }


@dataclass(frozen=True)
class EngineKwargs:
    kv_transfer: KvTransferConfig
    # Sized to the KV cache that fits on a 24 GB L4 beside ~18 GiB of bf16 weights.
    max_model_len: int = 4096
    tensor_parallel_size: int = 1
    dtype: str = "bfloat16"
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION  # what the fit check counts with
    enforce_eager: bool = True  # no torch.compile, no CUDA graphs: less GPU memory and a faster start (Settings.eager)
    # A multimodal model served as a text-only endpoint: vLLM 0.26 loads no vision tower (more room on an L4).
    language_model_only: bool = False
    # The same in both phases: Ray's PD orchestrator sends prefill a copy of each request, which it must accept too.
    chat: Mapping[str, Any] = field(default_factory=dict)  # TOOL_CALL_PARSER, REASONING_PARSER
    extra: Mapping[str, Any] = field(default_factory=dict)  # ENGINE_ARGS

    def to_dict(self) -> dict[str, Any]:
        kwargs = {
            "max_model_len": self.max_model_len,
            "dtype": self.dtype,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "enforce_eager": self.enforce_eager,
            "tensor_parallel_size": self.tensor_parallel_size,
            **({"language_model_only": True} if self.language_model_only else {}),
            **self.chat,
            **self.extra,
            "kv_transfer_config": self.kv_transfer.to_dict(),
        }
        check_engine_kwargs(self.kv_transfer.engine_id, kwargs)
        return kwargs


@dataclass(frozen=True)
class PlacementConfig:
    """LLMConfig.placement_group_config: one bundle per GPU of the engine, each carrying the phase's
    resource; STRICT_PACK keeps a tensor-parallel engine inside one node."""

    phase_resource: str
    cpus_per_gpu: int = CPUS_PER_GPU_BUNDLE
    strategy: str = "STRICT_PACK"

    def to_dict(self) -> dict[str, Any]:
        return {
            "bundle_per_worker": {"GPU": 1, "CPU": self.cpus_per_gpu, self.phase_resource: 1},
            "strategy": self.strategy,
        }


# Ray Serve's request-based autoscaling per phase (PREFILL/DECODE_MAX_REPLICAS). Ray Serve LLM's own default
# target (1e9 ongoing requests) never scales up, so each phase gets one: a decode engine holds its streams for
# the whole generation, and on an L4 with a 4096-token context its inter-token latency climbs past ~16
# concurrent streams; a prefill request lasts one forward pass, and prefills queue behind each other, so a
# few in flight already mean waiting. Up after 30 s of load (Ray's default: a new GPU node takes ~10 minutes,
# reacting later only adds to that), down after 10 minutes idle (Ray's default: a node that leaves and comes
# back costs those 10 minutes again).
TARGET_ONGOING_REQUESTS: dict[Phase, int] = {"prefill": 4, "decode": 16}
UPSCALE_DELAY_S = 30
DOWNSCALE_DELAY_S = 600


# How long a replica Serve removes (a scale-down, or a rolling change of the serve config) may keep serving the
# streams it holds. Ray Serve's default graceful_shutdown_timeout_s is 20 s (serve/_private/constants.py); the
# replica drains (replica.py, perform_graceful_shutdown: it waits, polling every graceful_shutdown_wait_loop_s,
# Ray's 2 s, until no request is ongoing) and is killed when the timeout runs out, cutting what is left. Ray Serve
# LLM does not raise it. It is the longest response (settings/decode_rate.py); only the time a replica actually
# needs is spent: it stops once drained.
def graceful_shutdown_timeout_s(max_model_len: int) -> int:
    """Serve's graceful_shutdown_timeout_s for the deployments a stream passes through (ingress, decode)."""
    return longest_response_s(max_model_len)


@dataclass(frozen=True)
class Autoscaling:
    """DeploymentConfig.autoscaling_config of one phase."""

    min_replicas: int
    max_replicas: int
    target_ongoing_requests: int
    upscale_delay_s: int = UPSCALE_DELAY_S
    downscale_delay_s: int = DOWNSCALE_DELAY_S

    def to_dict(self) -> dict[str, Any]:
        return {
            "min_replicas": self.min_replicas,
            "max_replicas": self.max_replicas,
            "target_ongoing_requests": self.target_ongoing_requests,
            "upscale_delay_s": self.upscale_delay_s,
            "downscale_delay_s": self.downscale_delay_s,
        }


@dataclass(frozen=True)
class PhaseConfig:
    """One LLMConfig: the prefill or the decode deployment."""

    model_id: str
    model_source: str
    engine: EngineKwargs
    num_replicas: int
    placement: PlacementConfig
    accelerator_type: str | None = None
    autoscaling: Autoscaling | None = None  # None: num_replicas fixed
    # None: Ray Serve's default (20 s); a prefill request ends with its one forward pass.
    graceful_shutdown_timeout_s: int | None = None

    def deployment_config(self) -> dict[str, Any]:
        config: dict[str, Any] = (
            {"autoscaling_config": self.autoscaling.to_dict()}
            if self.autoscaling
            else {"num_replicas": self.num_replicas}
        )
        if self.graceful_shutdown_timeout_s is not None:
            config["graceful_shutdown_timeout_s"] = self.graceful_shutdown_timeout_s
        return config

    def to_dict(self) -> dict[str, Any]:
        # An S3 prefix as Ray's CloudMirrorConfig: each GPU node downloads every object under it (weights,
        # config and tokenizer) before the engine starts; a Hub id is downloaded by vLLM itself.
        source: str | dict[str, str] = (
            {"bucket_uri": self.model_source} if self.model_source.startswith(S3_SCHEME) else self.model_source
        )
        config: dict[str, Any] = {"model_loading_config": {"model_id": self.model_id, "model_source": source}}
        if self.accelerator_type:
            config["accelerator_type"] = self.accelerator_type
        config.update(
            {
                "engine_kwargs": self.engine.to_dict(),
                "placement_group_config": self.placement.to_dict(),
                "deployment_config": self.deployment_config(),
            }
        )
        return config


# The ingress modules (k8s_constructs/data/): the PD guard (serve_pd_guard.py, always) and the API-key ingress over it
# (serve_auth_ingress.py, SERVE_API_KEYS), modules of their own that reach the Ray pods as one ConfigMap mounted on
# INGRESS_MODULE_DIR, which the application's runtime_env puts first on PYTHONPATH (Ray expands ${PYTHONPATH} to the
# image's own); the keys are files in API_KEYS_DIR (the Secrets Store CSI driver's mount).
GUARD_MODULE_FILE: Final = Path(__file__).parent / "data" / "serve_pd_guard.py"
AUTH_MODULE_FILE: Final = Path(__file__).parent / "data" / "serve_auth_ingress.py"
INGRESS_MODULE_FILES: Final = (GUARD_MODULE_FILE, AUTH_MODULE_FILE)
GUARD_INGRESS_CLASS: Final = f"{GUARD_MODULE_FILE.stem}:PdGuardIngress"
AUTH_INGRESS_CLASS: Final = f"{AUTH_MODULE_FILE.stem}:ApiKeyIngress"
INGRESS_MODULE_DIR: Final = "/etc/ray/serve-auth"
AUTH_MODULE_DIR: Final = INGRESS_MODULE_DIR  # the name tools/local_check and the tests know it by
API_KEYS_DIR: Final = "/mnt/serve-api-keys"
# Two ingress replicas (one survives a node's loss) reserving no CPU: Ray's default ingress takes 1 CPU, and with the
# head advertising none it lands on a GPU worker, where it keeps an added GPU node from ever being idle.
INGRESS_REPLICAS: Final = 2


@dataclass(frozen=True)
class IngressConfig:
    """PDServingArgs' ingress_cls_config and ingress_deployment_config; own_replicas False: Ray's default replica."""

    api_keys: bool
    replicas: int = INGRESS_REPLICAS
    own_replicas: bool = True

    def to_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {}
        if self.api_keys:
            args["ingress_cls_config"] = {
                "ingress_cls": AUTH_INGRESS_CLASS,
                "ingress_extra_kwargs": {"api_keys_dir": API_KEYS_DIR},
            }
        else:
            args["ingress_cls_config"] = {"ingress_cls": GUARD_INGRESS_CLASS}
        if self.own_replicas:
            args["ingress_deployment_config"] = {"num_replicas": self.replicas, "ray_actor_options": {"num_cpus": 0}}
        return args

    def runtime_env(self) -> dict[str, Any]:
        return {"env_vars": {"PYTHONPATH": f"{INGRESS_MODULE_DIR}:${{PYTHONPATH}}"}}


@dataclass(frozen=True)
class PdApplication:
    prefill: PhaseConfig
    decode: PhaseConfig
    # The ingress (Ray Serve LLM's OpenAI app) relays every stream too: in a rolling change it drains as decode does.
    ingress_graceful_shutdown_timeout_s: int | None = None
    name: str = APP_NAME
    route_prefix: str = "/"
    ingress: IngressConfig | None = None  # None: Ray's default ingress class and replica (one of 1 CPU)

    def __post_init__(self) -> None:
        # Ray rejects a PD app whose halves serve different models; fail at synth, not after a deploy.
        if self.prefill.model_id != self.decode.model_id:
            raise ValueError("prefill and decode must serve the same model_id")

    def to_serve_config(self) -> dict[str, Any]:
        application: dict[str, Any] = {
            "name": self.name,
            "import_path": PD_APP_IMPORT_PATH,
            "route_prefix": self.route_prefix,
        }
        runtime_env = self.ingress.runtime_env() if self.ingress else None
        if runtime_env:
            application["runtime_env"] = runtime_env
        ingress_args = self.ingress.to_args() if self.ingress else {}
        if self.ingress_graceful_shutdown_timeout_s is not None:
            ingress_args["ingress_deployment_config"] = {
                **ingress_args.get("ingress_deployment_config", {}),
                "graceful_shutdown_timeout_s": self.ingress_graceful_shutdown_timeout_s,
            }
        application["args"] = {
            "prefill_config": self.prefill.to_dict(),
            "decode_config": self.decode.to_dict(),
            **ingress_args,
        }
        return {"applications": [application]}

    def to_yaml(self) -> str:
        """The YAML string KubeRay expects in spec.serveConfigV2."""
        text: str = yaml.safe_dump(self.to_serve_config(), sort_keys=False, default_flow_style=False)
        return text


def pd_application(settings: Settings) -> PdApplication:
    gpu_model = settings.gpu_node.gpu_model

    def phase(engine_id: Phase, replicas: int, most: int | None) -> PhaseConfig:
        autoscaling = Autoscaling(replicas, most, TARGET_ONGOING_REQUESTS[engine_id]) if most is not None else None
        return PhaseConfig(
            model_id=settings.model_id,
            model_source=settings.model_source,
            engine=EngineKwargs(
                kv_transfer=KvTransferConfig(engine_id=engine_id, backends=(settings.nixl_backend,)),
                max_model_len=settings.max_model_len,
                tensor_parallel_size=settings.tensor_parallel_size,
                enforce_eager=settings.eager(engine_id),
                language_model_only=settings.language_model_only,
                chat=chat,
                extra=settings.extra_engine_kwargs,
            ),
            num_replicas=replicas,
            placement=PlacementConfig(phase_resource=PHASE_RESOURCES[engine_id]),
            # With accelerator_type, Ray Serve LLM adds `accelerator_type:L4: 0.001` to every bundle. The KubeRay
            # autoscaler models a new node of a group from its spec, which has no such resource (only a running
            # raylet reports it): a replica beyond the running nodes would fit no new node and wait forever. An
            # autoscaling phase goes without it; its phase resource already pins it to its own nodes, all of one type.
            accelerator_type=gpu_model if gpu_model in RAY_ACCELERATOR_TYPES and autoscaling is None else None,
            autoscaling=autoscaling,
            # A decode replica holds each stream to its last token: fixed or autoscaling, it drains that long.
            graceful_shutdown_timeout_s=draining_s if engine_id == "decode" else None,
        )

    chat = settings.chat_parsers.engine_kwargs()
    draining_s = graceful_shutdown_timeout_s(settings.max_model_len)
    endpoint = settings.serve_endpoint
    # The default configuration keeps Ray's default ingress replica (one of 1 CPU); autoscaling and an endpoint
    # beyond the cluster or with keys get the two CPU-free replicas. Every configuration gets the PD guard.
    own_ingress = settings.autoscaling or endpoint.exposed or endpoint.api_keys
    return PdApplication(
        prefill=phase("prefill", settings.prefill_replicas, settings.prefill_max_replicas),
        decode=phase("decode", settings.decode_replicas, settings.decode_max_replicas),
        ingress_graceful_shutdown_timeout_s=draining_s,
        ingress=IngressConfig(api_keys=endpoint.api_keys, own_replicas=own_ingress),
    )
