"""Every external artifact this project deploys, pinned in one place.

Changing a version here is the whole upgrade: the stacks, the cdk8s charts, the docs' tables and the
tests read these constants.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Final


@dataclass(frozen=True)
class HelmChartPin:
    repository: str
    chart: str
    version: str


# KubeRay operator (Helm). The CRDs in schemas/kuberay/ (copied from the chart's crds/ at this tag; the
# typed classes in imports/ are generated from them) are of this version: the RayService is validated
# against exactly what runs, and `make kuberay-crds` applies them when an upgrade needs it (Helm never
# upgrades a chart's CRDs).
KUBERAY_OPERATOR: Final = HelmChartPin("https://ray-project.github.io/kuberay-helm/", "kuberay-operator", "1.7.0")
KUBERAY_CRD_DIR: Final = Path(__file__).resolve().parent.parent / "schemas" / "kuberay"
KUBERAY_CRD_FILES: Final = ("ray.io_rayclusters.yaml", "ray.io_rayservices.yaml")


# The other Helm charts' pins live in their add-on modules (stacks/addons/), with their release and values.

# Ray LLM Deep Learning Container. ${REGION} is replaced with REGION. It bundles Ray 2.58.0 and vLLM
# 0.26.0; RAY_VERSION must match the Ray inside the image.
DLC_IMAGE_TEMPLATE: Final = "763104351884.dkr.ecr.${REGION}.amazonaws.com/ray:serve-llm-cuda-v1.0"
DLC_PUBLIC_IMAGE: Final = "public.ecr.aws/deep-learning-containers/ray:serve-llm-cuda-v1.0"
RAY_VERSION: Final = "2.58.0"
# The vLLM inside the image: settings/data/ holds what the synth checks against it (`make vendor-vllm`).
VLLM_VERSION: Final = "0.26.0"
VLLM_MINOR: Final = ".".join(VLLM_VERSION.split(".")[:2])


def vllm_data_file(name: str) -> Path:
    """settings/data/vllm_MAJOR_MINOR_<name>: what `make vendor-vllm` writes from the wheel of VLLM_VERSION."""
    return Path(__file__).resolve().parent / "data" / f"vllm_{VLLM_MINOR.replace('.', '_')}_{name}"


# The kubectl Lambda layer (kubectl 1.35 and Helm) of the CDK kubectl provider. kubectl supports one
# minor version of skew either way, so this layer serves clusters at 1.34, 1.35 and 1.36; the
# package version is pinned in requirements.txt (aws-cdk.lambda-layer-kubectl-v35).
KUBECTL_LAYER_KUBERNETES_MINOR: Final = 35
SUPPORTED_KUBERNETES_VERSIONS: Final = ("1.34", "1.35", "1.36")

# EKS managed add-ons. None = EKS's default build for the cluster's Kubernetes version, resolved by
# `make lookup` (DescribeAddonVersions) per K8S_VERSION and cached in cdk.context.json, so that a
# K8S_VERSION change moves the add-ons too (an add-on without a version stays where EKS created it).
# Without a cached answer the template leaves the version to EKS at create time, and the synth says so.
# Set a string here to pin an exact build for every Kubernetes version.
EKS_ADDON_VERSIONS: Final[dict[str, str | None]] = {
    "vpc-cni": None,
    "kube-proxy": None,
    "coredns": None,
    "eks-pod-identity-agent": None,
}


def addon_versions_context_key(region: str, kubernetes_version: str) -> str:
    """Where `make lookup` caches EKS's default add-on builds for a Kubernetes version (cdk.context.json)."""
    return f"ray-llm:eks-addon-versions:region={region}:kubernetes={kubernetes_version}"


# The GCS store (GCS_FAULT_TOLERANCE=redis): ElastiCache for Valkey, the newest major it offers (December 2026: 7.2,
# 8.0, 8.1); the preflight asks the Region for it.
GCS_ENGINE: Final = "valkey"
GCS_ENGINE_VERSION: Final = "8.1"
