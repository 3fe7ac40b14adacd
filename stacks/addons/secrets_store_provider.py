"""The AWS Secrets Manager provider (ASCP) for the Secrets Store CSI driver, which it installs as a
dependency: only with HF_TOKEN_SECRET_NAME or GCS_FAULT_TOLERANCE=redis, to hand the Hugging Face token to the
workers and the GCS store's token to the head without writing either into a template or a manifest
(k8s_constructs/synced_secrets.py has the SecretProviderClasses; the stacks the Pod Identities)."""

from __future__ import annotations

from typing import Any, Final

from settings import Settings
from settings.scheduling import gpu_toleration
from settings.versions import HelmChartPin
from stacks.addons.base import HelmAddon

PIN: Final = HelmChartPin(
    "https://aws.github.io/secrets-store-csi-driver-provider-aws", "secrets-store-csi-driver-provider-aws", "3.1.3"
)


# SERVE_API_KEYS: how often the driver re-reads the mounted secrets, so that a rotated key reaches the pods (the
# ingress re-reads the file) without a restart. The driver's rotation is off by default.
ROTATION_POLL_INTERVAL: Final = "60s"


def values(settings: Settings) -> dict[str, Any]:
    """It and the CSI driver it installs run on every node, GPU nodes included."""
    rotation = (
        {"enableSecretRotation": True, "rotationPollInterval": ROTATION_POLL_INTERVAL}
        if settings.serve_endpoint.api_keys
        else {}
    )
    return {
        "tolerations": [gpu_toleration()],
        "secrets-store-csi-driver": {
            "install": True,
            "syncSecret": {"enabled": True},
            **rotation,
            # ASCP 3.x takes the pod's token from the CSI driver: one per audience it may use.
            "tokenRequests": [{"audience": "sts.amazonaws.com"}, {"audience": "pods.eks.amazonaws.com"}],
            "linux": {"tolerations": [gpu_toleration()]},
        },
    }


ADDON = HelmAddon(
    construct_id="SecretsStoreCsiProvider",
    stack="serving",
    pin=lambda s: PIN,
    release="secrets-store-csi-driver-provider-aws",
    namespace=lambda s: "kube-system",
    values=values,
    enabled=lambda s: bool(s.hf_token_secret_name) or s.gcs_redis or s.serve_endpoint.api_keys,
    purpose=(
        "mounts secrets from Secrets Manager: the Hugging Face token (HF_TOKEN_SECRET_NAME), the GCS store's token"
        " (GCS_FAULT_TOLERANCE=redis), the API keys (SERVE_API_KEYS)"
    ),
)
