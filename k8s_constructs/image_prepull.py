"""The ~20 GB Ray LLM image is on the node before the Ray pods are.

A DaemonSet on the GPU nodes and the system nodes (where the head runs) whose only container is the
image itself, asleep: kubelet starts pulling the moment a node joins — while CloudFormation is still
creating the device plugins, the KubeRay operator and the RayService — instead of after the Ray pods are
scheduled. Keeping the container running also keeps the image in use, so kubelet's image garbage
collection never drops it between Ray restarts. It asks for no GPU or EFA device and almost no CPU or
memory, tolerates the GPU taint, and runs unprivileged with nothing mounted.

(Why not the SOCI snapshotter's parallel pull: it changes containerd's configuration on the AL2023 NVIDIA
AMI through nodeadm, which docs/deploy.md's "How long a deploy takes" discusses; the DaemonSet works with any
managed nodegroup and needs nothing on the node.)
"""

from __future__ import annotations

from dataclasses import dataclass

import cdk8s
import cdk8s_plus_28 as kplus
from constructs import Construct

from settings import Settings
from settings.scheduling import GPU_NODE_LABELS, GPU_TAINT_KEY, SYSTEM_NODE_LABELS

NAME = "ray-image-prepull"
NAMESPACE = "kube-system"  # exists before anything of ours; its pods are not the serving namespace's
NOBODY = 65534
LABELS = {"app.kubernetes.io/name": NAME}


@dataclass(frozen=True)
class ImagePrepullProps:
    image: str  # the exact reference the Ray pods use (by digest once `make lookup` has resolved it)


class ImagePrepullChart(cdk8s.Chart):
    """Exposes ``daemon_set``."""

    def __init__(self, scope: Construct, construct_id: str, *, props: ImagePrepullProps) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        self.daemon_set = kplus.DaemonSet(
            self,
            "ImagePrepull",
            metadata=cdk8s.ApiObjectMetadata(name=NAME, namespace=NAMESPACE, labels=dict(LABELS)),
            # A selector of our own, not cdk8s's path hash: a DaemonSet's selector can never change.
            select=False,
            pod_metadata=cdk8s.ApiObjectMetadata(labels=dict(LABELS)),
            automount_service_account_token=False,
            termination_grace_period=cdk8s.Duration.seconds(0),
            security_context=kplus.PodSecurityContextProps(ensure_non_root=True, user=NOBODY, group=NOBODY),
            containers=[
                kplus.ContainerProps(
                    name="image",
                    image=props.image,
                    # The image's own shell, asleep: pulling it is the point; running it costs nothing.
                    command=["/bin/sh", "-c", "exec sleep infinity"],
                    image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
                    resources=kplus.ContainerResources(
                        cpu=kplus.CpuResources(request=kplus.Cpu.millis(1), limit=kplus.Cpu.millis(10)),
                        memory=kplus.MemoryResources(request=cdk8s.Size.mebibytes(8), limit=cdk8s.Size.mebibytes(32)),
                    ),
                    security_context=kplus.ContainerSecurityContextProps(
                        ensure_non_root=True,
                        user=NOBODY,
                        group=NOBODY,
                        read_only_root_filesystem=True,
                        allow_privilege_escalation=False,
                        capabilities=kplus.ContainerSecutiryContextCapabilities(drop=[kplus.Capability.ALL]),
                        seccomp_profile=kplus.SeccompProfile(type=kplus.SeccompProfileType.RUNTIME_DEFAULT),
                    ),
                )
            ],
        )
        self.daemon_set.select(kplus.LabelSelector.of(labels=dict(LABELS)))
        placement = self.daemon_set.scheduling
        placement.attract(
            kplus.Node.labeled(kplus.NodeLabelQuery.in_("role", [SYSTEM_NODE_LABELS["role"], GPU_NODE_LABELS["role"]]))
        )
        placement.tolerate(
            kplus.Node.tainted(kplus.NodeTaintQuery.exists(GPU_TAINT_KEY, effect=kplus.TaintEffect.NO_SCHEDULE))
        )


def build_image_prepull_chart(settings: Settings) -> ImagePrepullChart:
    """The pre-pull DaemonSet in a cdk8s app of its own; `make synth` writes it to dist/."""
    return ImagePrepullChart(cdk8s.App(), "image-prepull", props=ImagePrepullProps(image=settings.dlc_image))
