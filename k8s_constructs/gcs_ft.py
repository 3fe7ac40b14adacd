"""The Ray head's side of GCS fault tolerance (GCS_FAULT_TOLERANCE=redis), as KubeRay 1.7 and Ray 2.58 take it.

KubeRay puts `gcsFaultToleranceOptions.redisAddress` in the head's RAY_REDIS_ADDRESS and the password (from a
Secret) in REDIS_PASSWORD, which `ray start --redis-password` reads (ray-operator/controllers/ray/common/pod.go,
configureRedisFT). Ray 2.58 takes a TLS store as `rediss://HOST:PORT` (ray/_private/services.py get_address:
the scheme sets --redis_enable_ssl) and the CA that signs its certificate from RAY_REDIS_CA_CERT, a RayConfig
the GCS server and the raylet read (the same variable KubeRay's Redis cleanup Job, a copy of the head pod,
then uses). ElastiCache's certificates chain to the Amazon Root CAs: those four, from certifi's bundle, are in
data/amazon-root-cas.pem and reach the head as a ConfigMap.

The AUTH token goes from Secrets Manager to a Kubernetes Secret through the Secrets Store CSI driver, read with
the head's own EKS Pod Identity: no template or manifest holds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

import cdk8s
import cdk8s_plus_28 as kplus
from constructs import Construct

from imports.io.ray import (
    RayServiceSpecRayClusterConfigGcsFaultToleranceOptions,
    RayServiceSpecRayClusterConfigGcsFaultToleranceOptionsRedisPassword,
    RayServiceSpecRayClusterConfigGcsFaultToleranceOptionsRedisPasswordValueFrom,
    RayServiceSpecRayClusterConfigGcsFaultToleranceOptionsRedisPasswordValueFromSecretKeyRef,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersEnv,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersVolumeMounts,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumes,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesConfigMap,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesCsi,
)
from k8s_constructs.synced_secrets import CSI_DRIVER, SyncedSecretProviderClass

CA_BUNDLE: Final = Path(__file__).parent / "data" / "amazon-root-cas.pem"
CA_CONFIG_MAP: Final = "gcs-store-ca"
CA_MOUNT: Final = "/etc/ray/gcs-store-ca"
CA_ENV: Final = "RAY_REDIS_CA_CERT"
PROVIDER_CLASS: Final = "gcs-store"
KUBERNETES_SECRET: Final = "gcs-store"
SECRET_KEY: Final = "password"
SECRET_VOLUME: Final = "gcs-store-secret"
SECRET_MOUNT: Final = "/mnt/gcs-store"
# With gcsFaultToleranceOptions KubeRay 1.7 gives every worker container RAY_gcs_rpc_server_reconnect_timeout_s=600
# (pod.go, configureGCSFaultTolerance; utils/constant.go DefaultWorkerRayGcsReconnectTimeoutS) unless it is set:
# a worker's raylet waits that long for a restarted GCS before it exits (Ray's own default is 60 s).
KUBERAY_WORKER_RECONNECT_ENV: Final = "RAY_gcs_rpc_server_reconnect_timeout_s"
KUBERAY_WORKER_RECONNECT_TIMEOUT_S: Final = 600
# Stand-ins when a chart is built without the deployed store (dist/, the offline validators): the serving stack
# gives the store's real address and secret ARN.
PLACEHOLDER_ADDRESS: Final = "rediss://GCS_STORE_ADDRESS:6379"
PLACEHOLDER_SECRET: Final = "GCS_STORE_SECRET_ARN"


@dataclass(frozen=True)
class GcsStoreRef:
    address: str  # rediss://HOST:PORT
    secret_arn: str  # the AUTH token in Secrets Manager


def head_service_account(ray_service_name: str) -> str:
    """The head's ServiceAccount with GCS_FAULT_TOLERANCE=redis: its Pod Identity reads the store's token."""
    return f"{ray_service_name}-head"


# --- the typed objects of the RayService and the namespace --------------------------------------------------------

CA_VOLUME: Final = "gcs-store-ca"


def fault_tolerance_options(store: GcsStoreRef) -> RayServiceSpecRayClusterConfigGcsFaultToleranceOptions:
    return RayServiceSpecRayClusterConfigGcsFaultToleranceOptions(
        redis_address=store.address,
        redis_password=RayServiceSpecRayClusterConfigGcsFaultToleranceOptionsRedisPassword(
            value_from=RayServiceSpecRayClusterConfigGcsFaultToleranceOptionsRedisPasswordValueFrom(
                secret_key_ref=RayServiceSpecRayClusterConfigGcsFaultToleranceOptionsRedisPasswordValueFromSecretKeyRef(
                    name=KUBERNETES_SECRET, key=SECRET_KEY
                )
            )
        ),
    )


def head_env() -> list[RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersEnv]:
    return [
        RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersEnv(
            name=CA_ENV, value=f"{CA_MOUNT}/{CA_BUNDLE.name}"
        )
    ]


def head_mounts() -> list[RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersVolumeMounts]:
    return [
        RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersVolumeMounts(
            name=CA_VOLUME, mount_path=CA_MOUNT, read_only=True
        ),
        # Mounting it is what makes the CSI driver fetch the token and sync the Secret REDIS_PASSWORD reads.
        RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersVolumeMounts(
            name=SECRET_VOLUME, mount_path=SECRET_MOUNT, read_only=True
        ),
    ]


def head_volumes() -> list[RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumes]:
    return [
        RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumes(
            name=CA_VOLUME,
            config_map=RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesConfigMap(name=CA_CONFIG_MAP),
        ),
        RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumes(
            name=SECRET_VOLUME,
            csi=RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesCsi(
                driver=CSI_DRIVER, read_only=True, volume_attributes={"secretProviderClass": PROVIDER_CLASS}
            ),
        ),
    ]


class GcsStoreObjects(Construct):
    """The head's ServiceAccount, the token's SecretProviderClass and the CA ConfigMap, in the namespace."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        store: GcsStoreRef,
        namespace: str,
        region: str,
        ray_service_name: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.service_account = kplus.ServiceAccount(
            self,
            "HeadServiceAccount",
            metadata=cdk8s.ApiObjectMetadata(name=head_service_account(ray_service_name), namespace=namespace),
        )
        self.provider_class = SyncedSecretProviderClass(
            self,
            "TokenProviderClass",
            name=PROVIDER_CLASS,
            namespace=namespace,
            region=region,
            object_name=store.secret_arn,
            kubernetes_secret=KUBERNETES_SECRET,
            key=SECRET_KEY,
        )
        self.ca = kplus.ConfigMap(self, "Ca", metadata=cdk8s.ApiObjectMetadata(name=CA_CONFIG_MAP, namespace=namespace))
        self.ca.add_data(CA_BUNDLE.name, CA_BUNDLE.read_text())
