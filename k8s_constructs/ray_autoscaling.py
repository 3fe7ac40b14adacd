"""The RayCluster's side of elastic capacity (PREFILL/DECODE_MAX_REPLICAS): KubeRay's in-tree Ray autoscaler,
a sidecar of the head that turns Serve's pending replicas into worker pods (and removes idle ones), and what the
worker pods say to the node autoscaler.

The chain: Serve's autoscaler raises a phase's replicas → the replica's placement group is pending → the Ray
autoscaler adds a worker pod of that phase's group (its node type comes from the group spec) → the pod is
Pending for want of a GPU node → the Cluster Autoscaler grows the GPU nodegroup. Down: Serve removes a replica
after its downscale delay, the Ray autoscaler deletes the idle worker pod after IDLE_TIMEOUT_S, the Cluster
Autoscaler removes the empty node after its own unneeded time.
"""

from __future__ import annotations

from imports.io.ray import (
    RayServiceSpecRayClusterConfigAutoscalerOptions,
    RayServiceSpecRayClusterConfigAutoscalerOptionsResources,
    RayServiceSpecRayClusterConfigAutoscalerOptionsResourcesLimits,
    RayServiceSpecRayClusterConfigAutoscalerOptionsResourcesRequests,
    RayServiceSpecRayClusterConfigAutoscalerOptionsSecurityContext,
    RayServiceSpecRayClusterConfigAutoscalerOptionsSecurityContextCapabilities,
    RayServiceSpecRayClusterConfigAutoscalerOptionsSecurityContextSeccompProfile,
    RayServiceSpecRayClusterConfigAutoscalerOptionsUpscalingMode,
)
from settings.sizing import AUTOSCALER_CPU_MILLI, AUTOSCALER_MEMORY_MIB, WorkerResources

# A worker with no replica left is removed after this long (KubeRay's default is 60 s): long enough for Serve to
# place a replica it has just decided on, short enough that an idle GPU node is released soon after.
IDLE_TIMEOUT_S = 120
# The Cluster Autoscaler never evicts a Ray worker to consolidate nodes: only the Ray autoscaler removes one,
# and only when it is idle; the node is then empty and the Cluster Autoscaler removes it.
WORKER_ANNOTATIONS = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}


def autoscaler_options() -> RayServiceSpecRayClusterConfigAutoscalerOptions:
    quantities = WorkerResources(cpu_milli=AUTOSCALER_CPU_MILLI, memory_mib=AUTOSCALER_MEMORY_MIB)
    amounts = {"cpu": quantities.cpu, "memory": quantities.memory}
    return RayServiceSpecRayClusterConfigAutoscalerOptions(
        idle_timeout_seconds=IDLE_TIMEOUT_S,
        # Default: one step at a time up to what is pending (Aggressive would not wait for the step's nodes).
        upscaling_mode=RayServiceSpecRayClusterConfigAutoscalerOptionsUpscalingMode.DEFAULT,
        resources=RayServiceSpecRayClusterConfigAutoscalerOptionsResources(
            requests={k: RayServiceSpecRayClusterConfigAutoscalerOptionsResourcesRequests.from_string(v) for k, v in amounts.items()},
            limits={k: RayServiceSpecRayClusterConfigAutoscalerOptionsResourcesLimits.from_string(v) for k, v in amounts.items()},
        ),
        # It reads the RayCluster and patches worker counts through the API: no capability, no escalation.
        security_context=RayServiceSpecRayClusterConfigAutoscalerOptionsSecurityContext(
            allow_privilege_escalation=False,
            capabilities=RayServiceSpecRayClusterConfigAutoscalerOptionsSecurityContextCapabilities(drop=["ALL"]),
            seccomp_profile=RayServiceSpecRayClusterConfigAutoscalerOptionsSecurityContextSeccompProfile(type="RuntimeDefault"),
        ),
    )
