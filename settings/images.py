"""The Ray LLM image by digest: every node runs the same build.

AWS re-pushes a Deep Learning Container tag when it patches the image: a head pulled on Monday and a
worker pulled on Friday could run different builds of Ray and vLLM. `make lookup` resolves DLC_IMAGE's
tag to its digest (ECR BatchGetImage, which pull permission allows) and caches it in cdk.context.json;
the synth then uses `repository@sha256:…`, so a moved tag shows up as a digest change in `cdk diff`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_ECR = re.compile(
    r"^(?P<registry>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com/(?P<repository>[a-z0-9._/-]+):(?P<tag>[\w][\w.-]{0,127})$"
)
DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")


@dataclass(frozen=True)
class EcrImage:
    registry_id: str
    region: str
    repository: str
    tag: str
    host: str

    def by_digest(self, digest: str) -> str:
        return f"{self.host}/{self.repository}@{digest}"


def ecr_image(image: str) -> EcrImage | None:
    """The parts of a private ECR image reference with a tag; None for a digest or another registry."""
    match = _ECR.fullmatch(image)
    if not match:
        return None
    host = image.split("/", 1)[0]
    return EcrImage(match["registry"], match["region"], match["repository"], match["tag"], host)


def image_digest_context_key(image: str) -> str:
    return f"ray-llm:image-digest:{image}"


def pinned_image(image: str, context: Mapping[str, Any]) -> tuple[str, str]:
    """(the reference the pods use, where it came from: "digest given", "cached look-up" or "tag only")."""
    if "@sha256:" in image:
        return image, "digest given"
    parts = ecr_image(image)
    cached = context.get(image_digest_context_key(image))
    if parts is not None and isinstance(cached, str) and DIGEST.fullmatch(cached):
        return parts.by_digest(cached), "cached look-up"
    return image, "tag only"
