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
    RayServiceSpecRayClusterConfigAutoscalerOptionsVolumeMounts,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumes,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesProjected,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesProjectedSources,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesProjectedSourcesConfigMap,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesProjectedSourcesConfigMapItems,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesProjectedSourcesDownwardApi,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesProjectedSourcesDownwardApiItems,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesProjectedSourcesDownwardApiItemsFieldRef,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesProjectedSourcesServiceAccountToken,
)
from settings.sizing import AUTOSCALER_CPU_MILLI, AUTOSCALER_MEMORY_MIB, WorkerResources

# A worker with no replica left is removed after this long (KubeRay's default is 60 s): long enough for Serve to
# place a replica it has just decided on, short enough that an idle GPU node is released soon after.
IDLE_TIMEOUT_S = 120
# The Cluster Autoscaler never evicts a Ray worker to consolidate nodes: only the Ray autoscaler removes one,
# and only when it is idle; the node is then empty and the Cluster Autoscaler removes it.
WORKER_ANNOTATIONS = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}


# The autoscaler's Kubernetes credentials, in its container only. KubeRay 1.7 binds its Role (rbac.go: get, list, watch
# and patch every pod of the namespace, patch pods/resize, get and patch RayClusters) to the head pod's service account,
# and automountServiceAccountToken is pod-wide: mounted for the sidecar, the token would reach the head container too
# (the Serve controller, any task on the head), which could then patch the privileged GPU workers. So the pod mounts
# none, and this projected volume, what the kubelet would mount (a bound token, the cluster CA, the namespace), goes
# into the autoscaler container alone, at the standard path where Ray's KubeRay node provider reads the token and the CA
# (ray/autoscaler/_private/kuberay/node_provider.py, load_k8s_secrets; it re-reads them periodically, so the kubelet's
# rotation of the token is picked up).
SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_VOLUME = "autoscaler-kube-api-access"
# The kubelet's own lifetime for an automounted token (the API server treats 3607 s as a legacy token's).
TOKEN_EXPIRATION_S = 3607


def autoscaler_token_volume() -> RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumes:
    """A volume of the head pod, mounted only by the autoscaler container (autoscaler_options)."""
    Sources = RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesProjectedSources
    return RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumes(
        name=TOKEN_VOLUME,
        projected=RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesProjected(
            sources=[
                Sources(
                    service_account_token=RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesProjectedSourcesServiceAccountToken(
                        path="token", expiration_seconds=TOKEN_EXPIRATION_S
                    )
                ),
                Sources(
                    config_map=RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesProjectedSourcesConfigMap(
                        name="kube-root-ca.crt",
                        items=[
                            RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesProjectedSourcesConfigMapItems(
                                key="ca.crt", path="ca.crt"
                            )
                        ],
                    )
                ),
                Sources(
                    downward_api=RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesProjectedSourcesDownwardApi(
                        items=[
                            RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesProjectedSourcesDownwardApiItems(
                                path="namespace",
                                field_ref=RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesProjectedSourcesDownwardApiItemsFieldRef(
                                    api_version="v1", field_path="metadata.namespace"
                                ),
                            )
                        ]
                    )
                ),
            ]
        ),
    )


def autoscaler_options() -> RayServiceSpecRayClusterConfigAutoscalerOptions:
    quantities = WorkerResources(cpu_milli=AUTOSCALER_CPU_MILLI, memory_mib=AUTOSCALER_MEMORY_MIB)
    amounts = {"cpu": quantities.cpu, "memory": quantities.memory}
    return RayServiceSpecRayClusterConfigAutoscalerOptions(
        idle_timeout_seconds=IDLE_TIMEOUT_S,
        # Default: one step at a time up to what is pending (Aggressive would not wait for the step's nodes).
        upscaling_mode=RayServiceSpecRayClusterConfigAutoscalerOptionsUpscalingMode.DEFAULT,
        resources=RayServiceSpecRayClusterConfigAutoscalerOptionsResources(
            requests={
                k: RayServiceSpecRayClusterConfigAutoscalerOptionsResourcesRequests.from_string(v)
                for k, v in amounts.items()
            },
            limits={
                k: RayServiceSpecRayClusterConfigAutoscalerOptionsResourcesLimits.from_string(v)
                for k, v in amounts.items()
            },
        ),
        # KubeRay 1.7 appends these to the container it builds (pod.go, mergeAutoscalerOverrides).
        volume_mounts=[
            RayServiceSpecRayClusterConfigAutoscalerOptionsVolumeMounts(
                name=TOKEN_VOLUME, mount_path=SERVICE_ACCOUNT_MOUNT, read_only=True
            )
        ],
        # It reads the RayCluster and patches worker counts through the API: no capability, no escalation.
        security_context=RayServiceSpecRayClusterConfigAutoscalerOptionsSecurityContext(
            allow_privilege_escalation=False,
            capabilities=RayServiceSpecRayClusterConfigAutoscalerOptionsSecurityContextCapabilities(drop=["ALL"]),
            seccomp_profile=RayServiceSpecRayClusterConfigAutoscalerOptionsSecurityContextSeccompProfile(
                type="RuntimeDefault"
            ),
        ),
    )
