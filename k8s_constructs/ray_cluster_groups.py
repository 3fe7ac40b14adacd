"""The head and worker groups of the prefill/decode RayService's RayCluster: their pod templates (images,
resources, volumes, security contexts, identities) as KubeRay's generated types (imports/, `make imports`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from imports.io.ray import (
    RayServiceSpecRayClusterConfigHeadGroupSpec,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplate,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpec,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainers,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersLifecycle,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersLifecyclePreStop,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersLifecyclePreStopExec,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersPorts,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersResources,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersResourcesLimits,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersResourcesRequests,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersSecurityContext,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersSecurityContextCapabilities,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersSecurityContextSeccompProfile,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecSecurityContext,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecSecurityContextSeccompProfile,
    RayServiceSpecRayClusterConfigWorkerGroupSpecs,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplate,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateMetadata,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpec,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainers,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersEnv,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersEnvValueFrom,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersEnvValueFromFieldRef,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersEnvValueFromSecretKeyRef,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersLifecycle,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersLifecyclePreStop,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersLifecyclePreStopExec,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersResources,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersResourcesLimits,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersResourcesRequests,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersSecurityContext,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersVolumeMounts,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecTolerations,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecVolumes,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecVolumesCsi,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecVolumesEmptyDir,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecVolumesHostPath,
)
from k8s_constructs import endpoint, gcs_ft, synced_secrets
from k8s_constructs.kv_path import KV_PATH_LOG_ENV
from k8s_constructs.ray_autoscaling import WORKER_ANNOTATIONS, autoscaler_token_volume
from k8s_constructs.ray_facts import (
    DASHBOARD_PORT,
    GCS_PORT,
    HEAD_CONTAINER,
    SERVE_PORT,
    WORKER_CONTAINER,
    worker_service_account,
)
from k8s_constructs.serve_config import PHASE_RESOURCES, Phase
from k8s_constructs.synced_secrets import hf_token_of
from settings import Settings
from settings.scheduling import GPU_NODE_LABELS, LOCAL_NVME_MOUNT, SYSTEM_NODE_LABELS, gpu_toleration
from settings.sizing import (
    HEAD_LIMIT_CPU_MILLI,
    HEAD_LIMIT_MEMORY_MIB,
    HEAD_REQUEST_CPU_MILLI,
    HEAD_REQUEST_MEMORY_MIB,
    WorkerResources,
    gpu_worker_resources,
)

MODEL_CACHE_MOUNT = "/model-cache"
# On types with instance-store NVMe, nodeadm mounts it (RAID0) at /mnt/k8s-disks/0; the cache lives
# there and, being a hostPath, survives pod restarts. Without NVMe it lives on the root EBS volume.
NVME_MODEL_CACHE = f"{LOCAL_NVME_MOUNT}/model-cache"
EBS_MODEL_CACHE = "/var/lib/model-cache"
RAY_STOP = ["/bin/sh", "-c", "ray stop"]


def worker_identity_needed(settings: Settings) -> bool:
    """The GPU workers get a ServiceAccount with an EKS Pod Identity only when they read from AWS (Hub token, S3
    weights, API keys)."""
    return bool(settings.hf_token_secret_name) or settings.model_s3 is not None or settings.serve_endpoint.api_keys


def head_identity_needed(settings: Settings) -> bool:
    """The head gets its ServiceAccount (and Pod Identity) to read the GCS store's token or the API keys."""
    return settings.gcs_redis or settings.serve_endpoint.api_keys


Q = TypeVar("Q")


def _quantities(make: Callable[[str], Q], cpu_milli: int, memory_mib: int) -> dict[str, Q]:
    """{"cpu": ..., "memory": ...} in the generated quantity type ``make`` builds (requests and limits differ)."""
    res = WorkerResources(cpu_milli=cpu_milli, memory_mib=memory_mib)
    return {"cpu": make(res.cpu), "memory": make(res.memory)}


def head_group_spec(s: Settings, *, fault_tolerant: bool) -> RayServiceSpecRayClusterConfigHeadGroupSpec:
    """The head group: Ray's GCS, dashboard and Serve controller on a system node, no model and no GPU."""
    ports = [("gcs", GCS_PORT), ("dashboard", DASHBOARD_PORT), ("serve", SERVE_PORT)]
    volumes = [
        *(gcs_ft.head_volumes() if fault_tolerant else []),
        *endpoint.head_key_volumes(s),
        *([autoscaler_token_volume()] if s.autoscaling else []),
    ]
    return RayServiceSpecRayClusterConfigHeadGroupSpec(
        # The head runs no model and no Serve replica (as KubeRay's production samples): with no CPU or
        # GPU to offer, Ray places the engines, the ingress and the router on the GPU workers.
        ray_start_params={"dashboard-host": "0.0.0.0", "num-cpus": "0", "num-gpus": "0"},
        template=RayServiceSpecRayClusterConfigHeadGroupSpecTemplate(
            spec=RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpec(
                node_selector=dict(SYSTEM_NODE_LABELS),
                # Nothing in the Ray container calls the Kubernetes API: no token to steal. With autoscaling, the
                # autoscaler sidecar gets one in its own container only (ray_autoscaling.autoscaler_token_volume).
                automount_service_account_token=False,
                # With the GCS store: its own identity, whose Pod Identity reads the store's token (KubeRay's
                # autoscaler Role, if any, is then bound to it).
                service_account_name=(
                    gcs_ft.head_service_account(s.ray_service_name) if head_identity_needed(s) else None
                ),
                volumes=volumes or None,
                security_context=RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecSecurityContext(
                    seccomp_profile=RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecSecurityContextSeccompProfile(
                        type="RuntimeDefault"
                    )
                ),
                containers=[
                    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainers(
                        name=HEAD_CONTAINER,
                        image=s.dlc_image,
                        env=gcs_ft.head_env() if fault_tolerant else None,
                        volume_mounts=(gcs_ft.head_mounts() if fault_tolerant else []) + endpoint.head_key_mounts(s)
                        or None,
                        ports=[
                            RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersPorts(
                                name=name, container_port=port
                            )
                            for name, port in ports
                        ],
                        resources=RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersResources(
                            requests=_quantities(
                                RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersResourcesRequests.from_string,
                                HEAD_REQUEST_CPU_MILLI,
                                HEAD_REQUEST_MEMORY_MIB,
                            ),
                            limits=_quantities(
                                RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersResourcesLimits.from_string,
                                HEAD_LIMIT_CPU_MILLI,
                                HEAD_LIMIT_MEMORY_MIB,
                            ),
                        ),
                        # Ray on the head (GCS, dashboard, Serve controller, `ray stop`) needs no Linux
                        # capability and no privilege escalation: a local head started with every
                        # capability dropped and no_new_privs serves (tests/test_head_security.py). Only
                        # the dashboard's py-spy profiling would need SYS_PTRACE, a debugging aid left off.
                        security_context=RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersSecurityContext(
                            allow_privilege_escalation=False,
                            capabilities=RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersSecurityContextCapabilities(
                                drop=["ALL"]
                            ),
                            seccomp_profile=RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersSecurityContextSeccompProfile(
                                type="RuntimeDefault"
                            ),
                        ),
                        lifecycle=RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersLifecycle(
                            pre_stop=RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersLifecyclePreStop(
                                exec=RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersLifecyclePreStopExec(
                                    command=RAY_STOP
                                )
                            )
                        ),
                    )
                ],
            )
        ),
    )


def worker_group_spec(
    s: Settings, phase: Phase, nodes: int, max_nodes: int
) -> RayServiceSpecRayClusterConfigWorkerGroupSpecs:
    """The prefill or the decode worker group: one pod per GPU node of its own, advertising the phase's
    Ray resource (one unit per GPU) that only that phase's placement bundles ask for."""
    sized = gpu_worker_resources(s.gpu_node, observability=s.observability)
    limit = RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersResourcesLimits.from_string
    request = RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersResourcesRequests.from_string
    # One worker per GPU node, with all its GPUs and EFA devices (g6.8xlarge: 1 and 1). Without the EFA
    # request the pod gets no EFA device and NIXL falls back to TCP.
    # KV_TRANSPORT=ucx: no EFA device and no libfabric provider (UCX cannot drive EFA).
    gpus, efa = str(s.gpu_node.gpus), str(s.gpu_node.efa_interfaces)
    amounts = {"cpu": sized.cpu, "memory": sized.memory, "nvidia.com/gpu": gpus}
    if s.kv_over_efa:
        amounts["vpc.amazonaws.com/efa"] = efa
    env = [
        # libfabric's provider, and the start-up lines that say whether the KV cache moves from GPU memory or through
        # host bounce buffers, and a transfer's failures, for `make verify` (k8s_constructs/kv_path.py): libfabric
        # logs nothing without FI_LOG_LEVEL.
        *((("FI_PROVIDER", "efa"), *KV_PATH_LOG_ENV) if s.kv_over_efa else ()),
        ("HF_HOME", MODEL_CACHE_MOUNT),
        # The kernels Triton and torch.compile build at an engine's first start (Qwen3.5's Gated DeltaNet kernels:
        # 233 s of a 250 s engine start on a cold cache, 17 s warm, measured by `make local-check`) kept on the
        # node's cache beside the weights: a restarted or re-created worker on the same node starts warm.
        ("TRITON_CACHE_DIR", f"{MODEL_CACHE_MOUNT}/triton"),
        ("VLLM_CACHE_ROOT", f"{MODEL_CACHE_MOUNT}/vllm"),
        # NIXL needs this layout to transfer Qwen3.5's hybrid Mamba/DeltaNet state.
        ("VLLM_SSM_CONV_STATE_LAYOUT", "DS"),
    ]
    if s.model_s3 is not None:
        # Ray's S3 downloader is a plain boto3 client: without a Region it would ask us-east-1's endpoint,
        # which the VPC's S3 gateway endpoint (this Region's) does not carry.
        env += [("AWS_REGION", s.region), ("AWS_DEFAULT_REGION", s.region)]
    Env = RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersEnv
    token = hf_token_of(s)
    token_env, token_mounts, token_volumes = [], [], []
    if token is not None:
        token_env.append(
            Env(
                name="HF_TOKEN",
                value_from=RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersEnvValueFrom(
                    secret_key_ref=RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersEnvValueFromSecretKeyRef(
                        name=synced_secrets.KUBERNETES_SECRET, key=synced_secrets.SECRET_KEY
                    )
                ),
            )
        )
        # Mounting the CSI volume is what makes the driver fetch the secret and sync the Kubernetes Secret.
        token_mounts.append(
            RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersVolumeMounts(
                name=synced_secrets.VOLUME_NAME, mount_path=synced_secrets.MOUNT_PATH, read_only=True
            )
        )
        token_volumes.append(
            RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecVolumes(
                name=synced_secrets.VOLUME_NAME,
                csi=RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecVolumesCsi(
                    driver=synced_secrets.CSI_DRIVER,
                    read_only=True,
                    volume_attributes={"secretProviderClass": token.provider_class},
                ),
            )
        )
    return RayServiceSpecRayClusterConfigWorkerGroupSpecs(
        group_name=phase,
        replicas=nodes,
        min_replicas=nodes,
        max_replicas=max_nodes,
        # KubeRay 1.7 turns this into `ray start --num-gpus N --resources '{"pd_prefill": N}'`; it rejects
        # it together with num-gpus/num-cpus/memory/resources in rayStartParams (validation.go). The CPU
        # count comes from the container's limit.
        resources={"GPU": gpus, PHASE_RESOURCES[phase]: gpus},
        template=RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplate(
            metadata=(
                RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateMetadata(annotations=dict(WORKER_ANNOTATIONS))
                if s.autoscaling
                else None
            ),
            spec=RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpec(
                node_selector={"role": GPU_NODE_LABELS["role"]},
                # As the head's. With HF_TOKEN_SECRET_NAME the CSI driver asks its own token for the
                # service account (tokenRequests); Pod Identity needs no mounted one.
                automount_service_account_token=False,
                service_account_name=(
                    worker_service_account(s.ray_service_name) if worker_identity_needed(s) else None
                ),
                tolerations=[RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecTolerations(**gpu_toleration())],
                containers=[
                    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainers(
                        name=WORKER_CONTAINER,
                        image=s.dlc_image,
                        env=[Env(name=name, value=value) for name, value in env]
                        + token_env
                        + [
                            # vLLM and NIXL advertise this address to the other node.
                            Env(
                                name="VLLM_HOST_IP",
                                value_from=RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersEnvValueFrom(
                                    field_ref=RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersEnvValueFromFieldRef(
                                        field_path="status.podIP"
                                    )
                                ),
                            )
                        ],
                        resources=RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersResources(
                            requests={k: request(v) for k, v in amounts.items()},
                            limits={k: limit(v) for k, v in amounts.items()},
                        ),
                        # CUDA VRAM is registered with the EFA NIC for the KV transfers; IPC_LOCK
                        # alone is not enough. The only privileged pod of the deployment.
                        security_context=RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersSecurityContext(
                            privileged=True
                        ),
                        volume_mounts=[
                            RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersVolumeMounts(
                                name="dshm", mount_path="/dev/shm"
                            ),
                            RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersVolumeMounts(
                                name="model-cache", mount_path=MODEL_CACHE_MOUNT
                            ),
                            *token_mounts,
                            *endpoint.worker_key_mounts(s),
                        ],
                        lifecycle=RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersLifecycle(
                            pre_stop=RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersLifecyclePreStop(
                                exec=RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersLifecyclePreStopExec(
                                    command=RAY_STOP
                                )
                            )
                        ),
                    )
                ],
                volumes=[
                    # Ray's object store and NCCL/NIXL use shared memory; the container default is 64 MiB.
                    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecVolumes(
                        name="dshm",
                        empty_dir=RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecVolumesEmptyDir(
                            medium="Memory"
                        ),
                    ),
                    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecVolumes(
                        name="model-cache",
                        host_path=RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecVolumesHostPath(
                            path=NVME_MODEL_CACHE if s.gpu_node.local_nvme_gb else EBS_MODEL_CACHE,
                            type="DirectoryOrCreate",
                        ),
                    ),
                    *token_volumes,
                    *endpoint.worker_key_volumes(s),
                ],
            ),
        ),
    )
