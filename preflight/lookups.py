"""AWS look-ups whose answers are cached in cdk.context.json, so that synthesis stays offline.

Run by `make lookup` (and before `make deploy`/`make diff`), never by the synth itself; the settings read the
cached answers by their context keys (settings/zones.py, images.py, instance_types.py, versions.py).
"""

from __future__ import annotations

from typing import Any

from settings.images import ecr_image, image_digest_context_key
from settings.instance_types import BUILT_IN, InstanceFacts, instance_type_context_key
from settings.versions import EKS_ADDON_VERSIONS, addon_versions_context_key
from settings.zones import offerings_context_key, zones_context_key


def availability_zones(session: Any, region: str) -> list[str]:
    ec2 = session.client("ec2", region_name=region)
    response = ec2.describe_availability_zones(
        Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}, {"Name": "state", "Values": ["available"]}]
    )
    return sorted(z["ZoneName"] for z in response["AvailabilityZones"])


def zones_offering(session: Any, region: str, instance_type: str) -> list[str]:
    ec2 = session.client("ec2", region_name=region)
    zones: set[str] = set()
    for page in ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [instance_type]}]
    ):
        zones.update(o["Location"] for o in page["InstanceTypeOfferings"])
    return sorted(zones)


def instance_facts(session: Any, region: str, instance_type: str) -> InstanceFacts:
    ec2 = session.client("ec2", region_name=region)
    (item,) = ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"]
    return InstanceFacts.from_describe_instance_types(item)


def default_addon_versions(session: Any, region: str, kubernetes_version: str) -> dict[str, str]:
    """EKS's default build of each unpinned managed add-on for a Kubernetes version."""
    eks = session.client("eks", region_name=region)
    found: dict[str, str] = {}
    for name in sorted(n for n, pinned in EKS_ADDON_VERSIONS.items() if pinned is None):
        for page in eks.get_paginator("describe_addon_versions").paginate(
            addonName=name, kubernetesVersion=kubernetes_version
        ):
            for addon in page["addons"]:
                for info in addon["addonVersions"]:
                    if any(
                        c.get("defaultVersion") and c.get("clusterVersion") == kubernetes_version
                        for c in info.get("compatibilities", [])
                    ):
                        found[name] = str(info["addonVersion"])
    return found


def image_digest(session: Any, image: str) -> str | None:
    """The digest an ECR image tag points at now (BatchGetImage: what `docker pull` itself asks)."""
    parts = ecr_image(image)
    if parts is None:
        return None
    ecr = session.client("ecr", region_name=parts.region)
    found = ecr.batch_get_image(
        registryId=parts.registry_id, repositoryName=parts.repository, imageIds=[{"imageTag": parts.tag}]
    )
    images = found.get("images", [])
    if not images:
        reasons = "; ".join(f"{f.get('failureCode')}: {f.get('failureReason')}" for f in found.get("failures", []))
        raise LookupError(f"{image}: {reasons or 'not found'}")
    return str(images[0]["imageId"]["imageDigest"])


def look_up(
    session: Any,
    *,
    region: str,
    gpu_node_type: str,
    system_node_type: str,
    kubernetes_version: str,
    image: str | None = None,
) -> dict[str, Any]:
    """Every answer the synth may need for these settings, as cdk.context.json entries."""
    entries: dict[str, Any] = {
        zones_context_key(region): availability_zones(session, region),
        offerings_context_key(region, gpu_node_type): zones_offering(session, region, gpu_node_type),
        addon_versions_context_key(region, kubernetes_version): default_addon_versions(
            session, region, kubernetes_version
        ),
    }
    if image is not None and (digest := image_digest(session, image)) is not None:
        entries[image_digest_context_key(image)] = digest
    for name in sorted({gpu_node_type, system_node_type} - set(BUILT_IN)):
        entries[instance_type_context_key(name)] = instance_facts(session, region, name).to_context()
    return entries
