#!/usr/bin/env python3
"""CDK entry point: read the settings once, stop on a bad one with one line, then build the stacks."""

from __future__ import annotations

import os
import sys

from settings import SettingError, load_settings
from settings.loader import misspelt_settings
from settings.notices import synth_notices
from stacks.application import build_stacks, new_app, synthesize_or_say_why


def main() -> int:
    app = new_app()
    try:
        for warning in misspelt_settings(os.environ):
            print(warning, file=sys.stderr)
        settings = load_settings(os.environ, app.node.get_all_context())
    except SettingError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    lookups = [
        what
        for what, unresolved in (
            (f"GPU_AZ={settings.gpu_az} is the built-in default", settings.gpu_az_source == "built-in default"),
            ("DLC_IMAGE is a tag, not a digest (AWS moves tags)", settings.dlc_image_source == "tag only"),
            (
                f"no add-on versions for K8S_VERSION={settings.kubernetes_version} (EKS's default at create time)",
                bool(settings.unresolved_addons),
            ),
        )
        if unresolved
    ]
    if lookups:
        print(f"notice: {'; '.join(lookups)}: run `make lookup` with AWS credentials to pin them", file=sys.stderr)
    if settings.model_images and settings.model_facts is not None and settings.model_facts.multimodal:
        print(
            "notice: MODEL_IMAGES=on: the fit check counts the vision tower's weights, not the peak of vLLM's profile"
            " run through the vision encoder (a maximum-size image batch), which can take several GiB more: leave room"
            " below MAX_MODEL_LEN's limit",
            file=sys.stderr,
        )
    if not settings.kv_over_efa and settings.gpu_node.efa_interfaces:
        print(
            f"notice: KV_TRANSPORT=ucx: {settings.gpu_node.name}'s EFA carries no KV cache (NIXL's UCX backend cannot"
            " drive it): the cache crosses the nodes over TCP, so a long prompt's hand-over takes seconds, not"
            " fractions of one; docs/verify.md (The KV path on g6)",
            file=sys.stderr,
        )
    if settings.serve_endpoint.exposed and not settings.serve_endpoint.https:
        print(
            "warning: SERVE_CERTIFICATE_ARN=none: the internal load balancer listens on plain HTTP, so API keys,"
            " prompts and completions cross the VPC in clear text; give it an ACM certificate to serve HTTPS",
            file=sys.stderr,
        )
    if settings.model_facts is None:
        print(
            f"notice: MODEL_SOURCE={settings.model_source} is neither built in nor looked up: whether vLLM 0.26 serves"
            " it and whether it fits the GPUs is not checked; run `make lookup` (the Hub's config.json and safetensors"
            " index)",
            file=sys.stderr,
        )
    for notice in [*settings.chat_parsers.notices, *synth_notices(settings)]:
        print(notice, file=sys.stderr)
    return synthesize_or_say_why(app, lambda app: build_stacks(app, settings))


if __name__ == "__main__":
    sys.exit(main())
