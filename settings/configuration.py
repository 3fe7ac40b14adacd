"""The typed, immutable configuration handed to every stack and construct."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from settings.addressing import collector_subnet_cidrs
from settings.chat_parsers import ChatParsers, choose_parsers
from settings.endpoint import ServeEndpoint
from settings.instance_types import InstanceFacts
from settings.model_facts import ModelFacts
from settings.model_fit import phase_eager
from settings.model_source import S3Prefix, parse_s3_prefix, s3_source
from settings.registries import eks_addon_registry

# The deployable units, in deploy order, and those only some configurations contain.
ALWAYS_DEPLOYED_PARTS = ("network", "cluster", "system", "gpu", "serving")
OPTIONAL_PARTS = ("observability",)
# The serving stack's output that changes exactly when the RayCluster must be re-created (stacks/serving_stack.py
# writes it, the preflight compares the deployed one with the synthesized one).
RAY_CLUSTER_FINGERPRINT_OUTPUT = "RayClusterConfigFingerprint"


@dataclass(frozen=True)
class Settings:
    """Every deploy-time choice, parsed and validated once (see settings.loader)."""

    cluster_name: str
    region: str
    kubernetes_version: str
    namespace: str
    vpc_cidr: str
    availability_zones: tuple[str, ...]  # the VPC's AZs; always includes gpu_az
    endpoint_access: str  # "public-and-private" | "private" | "public"
    public_access_cidrs: tuple[str, ...]
    admin_principal_arns: tuple[str, ...]
    system_nodegroup_name: str
    system_node: InstanceFacts
    system_node_count: int
    system_root_volume_gib: int
    gpu_nodegroup_name: str
    gpu_node: InstanceFacts
    gpu_node_count: int
    gpu_root_volume_gib: int
    gpu_update_strategy: str  # "minimal" (replace without extra nodes) | "default" (surge first)
    gpu_az: str
    gpu_az_source: str  # where gpu_az came from, printed by the synth
    dlc_image: str  # what the pods pull: repository@sha256:… once `make lookup` has resolved the tag
    kuberay_version: str
    kuberay_namespace: str
    ray_version: str
    ray_service_name: str
    model_id: str
    model_source: str
    prefill_replicas: int
    decode_replicas: int
    tensor_parallel_size: int  # GPUs of one vLLM engine, inside one node; the same for both phases
    max_model_len: int
    hf_token_secret_name: str  # "" = no token (public model)
    serve_client_namespaces: tuple[str, ...]  # may reach the Serve port (NetworkPolicy)
    metrics_namespace: str  # the metrics collector's, may reach the Ray metrics port
    observability: bool  # the optional CloudWatch stack (add-on, dashboard, alarms)
    # Managed add-on -> version: pinned in settings/versions.py, else EKS's default for kubernetes_version
    # as `make lookup` cached it, else None (EKS's default at create time; it does not follow upgrades).
    eks_addon_versions: tuple[tuple[str, str | None], ...] = ()
    dlc_image_source: str = "digest given"  # "digest given", "cached look-up" or "tag only"
    dlc_image_given: str = ""  # DLC_IMAGE as set (${REGION} replaced), before a cached digest replaced its tag
    gpu_placement_group: str = "on"  # "on" (the GPU stack's own cluster group), "off", or an existing group's name
    gpu_capacity_reservation_id: str = ""  # "" = none
    gpu_capacity_reservation_type: str = "on-demand"  # "on-demand" (ODCR) | "capacity-block"
    model_facts: ModelFacts | None = None  # None: an unknown model (no look-up, not built in): not checked
    model_facts_source: str = ""  # "cached look-up" | "built-in table" | "unknown model"
    model_images: bool = False  # MODEL_IMAGES: a multimodal model keeps its vision tower
    enforce_eager: str = "auto"  # ENFORCE_EAGER: "auto" (per phase, from the fit check) | "true" | "false"
    kv_transport: str = "libfabric"  # KV_TRANSPORT: NIXL's backend, "libfabric" (over EFA) | "ucx"
    model_source_kms_key_arn: str = ""  # the S3 model bucket's SSE-KMS key; "" = none (SSE-S3)
    model_next_source: str = ""  # MODEL_NEXT_SOURCE: the prefix `make mirror-model` fills next; "" = none
    gcs_fault_tolerance: str = "off"  # "off" | "redis"
    gcs_store_node_type: str = "cache.t4g.micro"
    prefill_max_replicas: int | None = None  # None: fixed at prefill_replicas; else Serve autoscales up to it
    decode_max_replicas: int | None = None
    tool_call_parser: str = "auto"  # TOOL_CALL_PARSER: "auto" (the model's own), "off" or a vLLM parser name
    reasoning_parser: str = "auto"  # REASONING_PARSER: likewise
    engine_args: str = ""  # ENGINE_ARGS as canonical JSON; "" = none (extra_engine_kwargs reads it)
    park_at: str = "02:00"  # PARK_AT: HH:00 in park_time_zone; "" = no scheduled park (settings/park_schedule.py)
    unpark_at: str = ""  # UNPARK_AT: likewise; "" = no scheduled unpark
    unpark_days: tuple[int, ...] = (0, 1, 2, 3, 4)  # UNPARK_DAYS: Monday 0
    park_time_zone: str = "UTC"
    serve_endpoint: ServeEndpoint = field(
        default_factory=ServeEndpoint
    )  # SERVE_EXPOSURE and its companions (settings/endpoint.py)

    @property
    def nixl_backend(self) -> str:
        """NIXL's backend name as vLLM's kv_connector_extra_config takes it (KV_TRANSPORT)."""
        return self.kv_transport.upper()

    @property
    def kv_over_efa(self) -> bool:
        """The KV cache crosses EFA: the workers request EFA devices and set libfabric's provider."""
        return self.kv_transport == "libfabric"

    def eager(self, phase: str) -> bool:
        """enforce_eager of the prefill or decode engine (ENFORCE_EAGER; settings/model_fit.py decides auto)."""
        return phase_eager(
            self.enforce_eager,
            phase,
            self.model_facts,
            self.gpu_node,
            self.tensor_parallel_size,
            self.max_model_len,
            text_only=self.text_only_multimodal,
        )

    @property
    def model_s3(self) -> S3Prefix | None:
        """The S3 prefix of an s3:// MODEL_SOURCE; None for a Hugging Face repository."""
        return s3_source(self.model_source)

    @property
    def model_next_s3(self) -> S3Prefix | None:
        """MODEL_NEXT_SOURCE's prefix (in MODEL_SOURCE's bucket), None when unset."""
        return parse_s3_prefix("MODEL_NEXT_SOURCE", self.model_next_source) if self.model_next_source else None

    @property
    def mirror_s3(self) -> S3Prefix | None:
        """The prefix the mirror Job writes: MODEL_NEXT_SOURCE when set, else MODEL_SOURCE's; None for a Hub source."""
        return self.model_next_s3 or self.model_s3

    @property
    def text_only_multimodal(self) -> bool:
        """A multimodal model served as a text-only endpoint: vLLM's language_model_only skips its vision tower."""
        return self.model_facts is not None and self.model_facts.multimodal and not self.model_images

    @property
    def language_model_only(self) -> bool:
        """vLLM's language_model_only: with MODEL_IMAGES=off, on unless the model is known to take no images. An unknown
        model (an S3 prefix or a Hub id without `make lookup`) gets it too: vLLM 0.26 applies it only to a model that
        supports images (config/model.py passes it to the multimodal config alone) and ignores it otherwise."""
        return not self.model_images and (self.model_facts is None or self.model_facts.multimodal)

    @property
    def chat_parsers(self) -> ChatParsers:
        """The tool-call and reasoning parsers both engines get, `auto` resolved from the model's facts."""
        return choose_parsers(
            self.tool_call_parser,
            self.reasoning_parser,
            self.model_facts.architectures if self.model_facts else None,
            self.model_source,
        )

    @property
    def extra_engine_kwargs(self) -> dict[str, Any]:
        """ENGINE_ARGS, for both engines alike."""
        extra: dict[str, Any] = json.loads(self.engine_args) if self.engine_args else {}
        return extra

    @property
    def eks_addon_registry(self) -> str:
        """The deploy Region's EKS add-on image registry (the loader refuses a Region without one)."""
        registry = eks_addon_registry(self.region)
        if registry is None:
            raise ValueError(f"no EKS add-on registry known for {self.region}")
        return registry

    @property
    def gpu_capacity_block(self) -> bool:
        return bool(self.gpu_capacity_reservation_id) and self.gpu_capacity_reservation_type == "capacity-block"

    @property
    def unresolved_addons(self) -> tuple[str, ...]:
        return tuple(name for name, version in self.eks_addon_versions if version is None)

    @property
    def engines_per_node(self) -> int:
        """vLLM engines one GPU node holds: a tensor-parallel engine never spans nodes (STRICT_PACK)."""
        return self.gpu_node.gpus // self.tensor_parallel_size

    def nodes_for(self, replicas: int) -> int:
        return math.ceil(replicas / self.engines_per_node) if self.engines_per_node else 0

    @property
    def prefill_nodes(self) -> int:
        """GPU nodes of the prefill worker group: prefill engines only, never a decode one."""
        return self.nodes_for(self.prefill_replicas)

    @property
    def decode_nodes(self) -> int:
        return self.nodes_for(self.decode_replicas)

    @property
    def gcs_redis(self) -> bool:
        """GCS_FAULT_TOLERANCE=redis: the head's GCS in the ElastiCache store."""
        return self.gcs_fault_tolerance == "redis"

    @property
    def autoscaling(self) -> bool:
        """Either phase autoscales: the RayCluster's in-tree autoscaler and the node autoscaler are on."""
        return self.prefill_max_replicas is not None or self.decode_max_replicas is not None

    @property
    def prefill_max_nodes(self) -> int:
        return self.nodes_for(self.prefill_max_replicas or self.prefill_replicas)

    @property
    def decode_max_nodes(self) -> int:
        return self.nodes_for(self.decode_max_replicas or self.decode_replicas)

    @property
    def gpu_node_max(self) -> int:
        """The most GPU nodes this deployment may run: both phases at their maxima (0 when parked)."""
        return self.prefill_max_nodes + self.decode_max_nodes if self.gpu_node_count else 0

    @property
    def gpu_nodes_needed(self) -> int:
        """GPU nodes for both phases. Each node runs one Ray worker pod that holds all of the node's GPUs and
        EFA devices (the worker is privileged for EFA, so it sees every GPU of its node, and only one raylet
        per node keeps two engines off the same GPU); each phase has nodes of its own, so the KV cache
        always crosses EFA from a prefill node to a decode node."""
        return self.prefill_nodes + self.decode_nodes

    @property
    def gpu_update_surge_nodes(self) -> int:
        """Extra GPU nodes a rolling update of the GPU nodegroup launches before it drains the old ones.
        EKS's DEFAULT strategy scales up by up to two nodes per AZ of the group (one AZ here); MINIMAL
        terminates first and launches none, so it fits a quota or a placement group with no spare room."""
        return 2 if self.gpu_update_strategy == "default" else 0

    @property
    def stack_prefix(self) -> str:
        return self.cluster_name

    @property
    def stack_names(self) -> dict[str, str]:
        """The deployable units, in deploy order (destroy is the reverse; system and gpu deploy side by side):
        part -> stack name."""
        parts = ALWAYS_DEPLOYED_PARTS + (("observability",) if self.observability else ())
        return {part: f"{self.stack_prefix}-{part}" for part in parts}

    @property
    def stacks_left_out(self) -> tuple[str, ...]:
        """The optional stacks this configuration does not contain: a deploy or destroy of it never touches them."""
        return tuple(f"{self.stack_prefix}-{part}" for part in OPTIONAL_PARTS if part not in self.stack_names)

    @property
    def system_update_surge_nodes(self) -> int:
        """Extra system nodes a rolling update may launch first: up to two per AZ of the group."""
        return 2 * len(self.availability_zones)

    @property
    def metrics_collector_cidrs(self) -> tuple[str, ...]:
        """The managed metrics collector's subnets, one per AZ (OBSERVABILITY=on)."""
        return collector_subnet_cidrs(self.vpc_cidr, len(self.availability_zones))

    @property
    def metrics_collector_alias(self) -> str:
        """The alias of the observability stack's managed Prometheus collector (the preflight tells it apart)."""
        return f"{self.cluster_name}-ray"

    @property
    def serve_service_name(self) -> str:
        """The Service KubeRay creates for the Serve endpoint."""
        return f"{self.ray_service_name}-serve-svc"
