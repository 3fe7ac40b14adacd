"""Secrets synced from AWS Secrets Manager into pods, never through a template or a manifest: the optional
Hugging Face token of the GPU workers (here), and the base class the GCS store's token uses (k8s_constructs/gcs_ft.py).

The Secrets Store CSI driver's AWS provider reads the secret with the workers' EKS Pod Identity role
when a worker pod mounts the volume, and syncs it into a Kubernetes Secret that the HF_TOKEN variable
reads. The manifests carry only the secret's name.
"""

from __future__ import annotations

from dataclasses import dataclass

import cdk8s
import yaml
from constructs import Construct

from k8s_constructs.ray_facts import worker_service_account
from settings import Settings

CSI_DRIVER = "secrets-store.csi.k8s.io"
KUBERNETES_SECRET = "hf-token"
SECRET_KEY = "token"
MOUNT_PATH = "/mnt/secrets-store"
VOLUME_NAME = "hf-token"


@dataclass(frozen=True)
class HfToken:
    """Where the token comes from and the names the pod uses for it."""

    secret_name: str  # in AWS Secrets Manager; its value is the token as plain text
    region: str
    service_account: str  # the worker pods' ServiceAccount, bound to the Pod Identity role
    provider_class: str = KUBERNETES_SECRET


def hf_token_of(settings: Settings) -> HfToken | None:
    if not settings.hf_token_secret_name:
        return None
    return HfToken(
        secret_name=settings.hf_token_secret_name,
        region=settings.region,
        service_account=worker_service_account(settings.ray_service_name),
    )


class SyncedSecretProviderClass(Construct):
    """A SecretProviderClass (secrets-store.csi.x-k8s.io/v1) for one Secrets Manager secret, synced to a Kubernetes
    Secret of one key while a pod mounts it (the Hub token; the GCS store's AUTH token)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name: str,
        namespace: str,
        region: str,
        object_name: str,
        kubernetes_secret: str,
        key: str,
    ) -> None:
        super().__init__(scope, construct_id)
        objects = [{"objectName": object_name, "objectType": "secretsmanager", "objectAlias": key}]
        self.api_object = cdk8s.ApiObject(
            self,
            "Resource",
            api_version="secrets-store.csi.x-k8s.io/v1",
            kind="SecretProviderClass",
            metadata=cdk8s.ApiObjectMetadata(name=name, namespace=namespace),
        )
        self.api_object.add_json_patch(
            cdk8s.JsonPatch.add(
                "/spec",
                {
                    "provider": "aws",
                    "parameters": {
                        "region": region,
                        "usePodIdentity": "true",
                        "objects": yaml.safe_dump(objects, sort_keys=False),
                    },
                    "secretObjects": [
                        {"secretName": kubernetes_secret, "type": "Opaque", "data": [{"objectName": key, "key": key}]}
                    ],
                },
            )
        )


class HfTokenProviderClass(SyncedSecretProviderClass):
    """The token's SecretProviderClass, synced to the Kubernetes Secret HF_TOKEN reads."""

    def __init__(self, scope: Construct, construct_id: str, *, token: HfToken, namespace: str) -> None:
        super().__init__(
            scope,
            construct_id,
            name=token.provider_class,
            namespace=namespace,
            region=token.region,
            object_name=token.secret_name,
            kubernetes_secret=KUBERNETES_SECRET,
            key=SECRET_KEY,
        )
