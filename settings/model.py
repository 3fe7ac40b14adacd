"""The typed, immutable configuration handed to every stack and construct."""

from __future__ import annotations

import math
from dataclasses import dataclass

from settings.instance_types import InstanceFacts


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
    gpu_az: str
    gpu_az_source: str  # where gpu_az came from, printed by the synth
    dlc_image: str
    kuberay_version: str
    kuberay_namespace: str
    ray_version: str
    ray_service_name: str
    model_id: str
    model_source: str
    prefill_replicas: int
    decode_replicas: int
    max_model_len: int
    hf_token_secret_name: str  # "" = no token (public model)

    @property
    def gpu_workers(self) -> int:
        """Ray GPU worker pods: one per prefill or decode replica, each with one GPU and one EFA device."""
        return self.prefill_replicas + self.decode_replicas

    @property
    def gpu_workers_per_node(self) -> int:
        # A worker needs a GPU and an EFA device of its own, so a node hosts as many workers as it has
        # of the scarcer of the two (g6.12xlarge: 4 GPUs but 1 EFA interface -> 1 worker).
        return max(1, min(self.gpu_node.gpus, self.gpu_node.efa_interfaces))

    @property
    def gpu_nodes_needed(self) -> int:
        return math.ceil(self.gpu_workers / self.gpu_workers_per_node)

    @property
    def stack_prefix(self) -> str:
        return self.cluster_name

    @property
    def serve_service_name(self) -> str:
        """The Service KubeRay creates for the Serve endpoint."""
        return f"{self.ray_service_name}-serve-svc"
