"""DLC_IMAGE exists in the Region: the pull every Ray pod makes, asked before the GPUs are paid for."""

from __future__ import annotations

import re
from typing import Any

from botocore.exceptions import ClientError

from preflight.results import CheckResult, fail, ok, warn

NAME = "dlc-image"
_ECR = re.compile(
    r"(?P<registry>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com/(?P<repository>[^:@]+)(?::(?P<tag>[\w.-]+)|@(?P<digest>sha256:[a-f0-9]{64}))"
)


def check_image(ecr: Any, image: str, region: str) -> CheckResult:
    """ECR BatchGetImage (what a pull asks) for the tag or digest, in the image's registry."""
    match = _ECR.fullmatch(image)
    if not match:
        return warn(
            NAME,
            f"{image} is not in a private ECR registry",
            "not checked: make sure the nodes can pull it from their private subnets",
        )
    if match["region"] != region:
        return fail(
            NAME,
            f"{image} is in {match['region']}, not REGION {region}",
            "use the image of the deploy Region (DLC_IMAGE's ${REGION})",
        )
    image_id = {"imageTag": match["tag"]} if match["tag"] else {"imageDigest": match["digest"]}
    try:
        found = ecr.batch_get_image(
            registryId=match["registry"], repositoryName=match["repository"], imageIds=[image_id]
        )
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code", ""))
        if code in ("RepositoryNotFoundException", "RegistryPolicyNotFoundException"):
            return fail(NAME, f"{image}: {code}", f"set DLC_IMAGE to an image that exists in {region}")
        raise
    if found.get("images"):
        return ok(NAME, f"{image} exists in {region}")
    reasons = (
        "; ".join(f"{f.get('failureCode')}: {f.get('failureReason')}" for f in found.get("failures", [])) or "not found"
    )
    return fail(NAME, f"{image}: {reasons}", f"set DLC_IMAGE to an image (tag or digest) that exists in {region}")
