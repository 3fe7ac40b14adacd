"""The mirror Job of `make mirror-model`: a Hugging Face model copied to an S3 prefix (MODEL_NEXT_SOURCE's when
set, else MODEL_SOURCE's) by a pod on a system node, under a ServiceAccount of its own whose EKS Pod Identity role
(the serving stack's ModelMirrorRole) may write only that prefix. The program is k8s_constructs/model_mirror_script.py,
mounted from a ConfigMap."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cdk8s
import cdk8s_plus_28 as kplus
from constructs import Construct

from k8s_constructs import synced_secrets
from k8s_constructs.bench_job import client_security_context
from settings.scheduling import SYSTEM_NODE_LABELS

SCRIPT = Path(__file__).with_name("model_mirror_script.py")
SCRIPT_DIR = "/opt/mirror"


@dataclass(frozen=True)
class MirrorJobProps:
    name: str
    namespace: str
    service_account: str  # bound to the writer role by the serving stack's Pod Identity association
    image: str  # the Ray LLM image: python3 and boto3, and already on the system node of the Ray head
    repo: str  # the Hub repository, ORG/NAME
    revision: str
    destination: str  # s3://BUCKET/PREFIX
    region: str
    token_provider_class: str | None = None  # the SecretProviderClass of HF_TOKEN_SECRET_NAME, if any
    hf_endpoint: str = "https://huggingface.co"
    served: bool = (
        False  # the deployed RayService reads the destination while its GPU workers run: the Job writes nothing
    )


class MirrorJobChart(cdk8s.Chart):
    """Exposes ``service_account``, ``script`` (ConfigMap) and ``job``."""

    def __init__(self, scope: Construct, construct_id: str, *, props: MirrorJobProps) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        labels = {"app.kubernetes.io/name": props.name}
        self.service_account = kplus.ServiceAccount(
            self,
            "ServiceAccount",
            metadata=cdk8s.ApiObjectMetadata(name=props.service_account, namespace=props.namespace, labels=labels),
        )
        self.script = kplus.ConfigMap(
            self, "Script", metadata=cdk8s.ApiObjectMetadata(name=props.name, namespace=props.namespace, labels=labels)
        )
        # The label selects all three for the tool's clean-up (tools/mirror_model.py).
        self.script.add_data(SCRIPT.name, SCRIPT.read_text())
        env = {
            "HF_REPO": props.repo,
            "HF_REVISION": props.revision,
            "DEST_URI": props.destination,
            "HF_ENDPOINT": props.hf_endpoint,
            # boto3 without a Region would use us-east-1's endpoint, not carried by this VPC's S3 gateway endpoint.
            "AWS_REGION": props.region,
            "AWS_DEFAULT_REGION": props.region,
            "PYTHONUNBUFFERED": "1",
            "MIRROR_SERVED": "1" if props.served else "0",
        }
        volumes = [kplus.Volume.from_config_map(self, "ScriptVolume", self.script, name="script")]
        if props.token_provider_class:
            env["HF_TOKEN_FILE"] = f"{synced_secrets.MOUNT_PATH}/{synced_secrets.SECRET_KEY}"
            volumes.append(
                kplus.Volume.from_csi(
                    self,
                    "TokenVolume",
                    synced_secrets.CSI_DRIVER,
                    name=synced_secrets.VOLUME_NAME,
                    read_only=True,
                    attributes={"secretProviderClass": props.token_provider_class},
                )
            )
        container = kplus.ContainerProps(
            name="mirror",
            image=props.image,
            # The head's image, already on a system node: no second pull of ~20 GB.
            image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
            command=["python3", f"{SCRIPT_DIR}/{SCRIPT.name}"],
            # Streams from the Hub to S3 without a local copy: a core for hashing, memory for the upload parts.
            resources=kplus.ContainerResources(
                cpu=kplus.CpuResources(request=kplus.Cpu.units(1), limit=kplus.Cpu.units(2)),
                memory=kplus.MemoryResources(request=cdk8s.Size.gibibytes(2), limit=cdk8s.Size.gibibytes(3)),
            ),
            security_context=client_security_context(read_only_root_filesystem=True),
            env_variables={k: kplus.EnvValue.from_value(v) for k, v in env.items()},
            volume_mounts=[kplus.VolumeMount(path=SCRIPT_DIR, volume=volumes[0], read_only=True)]
            + (
                [kplus.VolumeMount(path=synced_secrets.MOUNT_PATH, volume=volumes[1], read_only=True)]
                if props.token_provider_class
                else []
            ),
        )
        self.job = kplus.Job(
            self,
            "Mirror",
            metadata=cdk8s.ApiObjectMetadata(name=props.name, namespace=props.namespace, labels=labels),
            backoff_limit=0,
            active_deadline=cdk8s.Duration.hours(3),
            ttl_after_finished=cdk8s.Duration.hours(12),
            service_account=self.service_account,
            # Pod Identity mounts a token of its own; the Kubernetes API token is not needed.
            automount_service_account_token=False,
            security_context=kplus.PodSecurityContextProps(ensure_non_root=False),
            containers=[container],
            volumes=volumes,
        )
        self.job.scheduling.attract(kplus.Node.labeled(kplus.NodeLabelQuery.is_("role", SYSTEM_NODE_LABELS["role"])))
