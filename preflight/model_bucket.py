"""The preflight's look at an S3 MODEL_SOURCE: the bucket in the deploy Region (else the weights cross the NAT
gateway), and the prefix filled by `make mirror-model` (its last write, `hash`, is there) before GPU nodes
start engines that would load from it. MODEL_NEXT_SOURCE is in the same bucket (settings/model_source.py), so
the bucket's checks hold for it; its prefix is only reported (empty is its normal state before the mirror)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from preflight.hub import HubError, facts_from_files
from preflight.results import CheckResult, fail, ok, warn
from settings.model_facts import BUILT_IN_MODELS, ModelFacts
from settings.model_source import COMPLETION_OBJECT, MIRRORED_FROM, S3Prefix

NAME = "model-source"


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def check_s3_model_source(
    s3: Any,
    source: S3Prefix,
    *,
    region: str,
    gpu_nodes: int,
    kms_key: bool = False,
    next_source: S3Prefix | None = None,
) -> CheckResult:
    result = _check_served(s3, source, region=region, gpu_nodes=gpu_nodes, kms_key=kms_key)
    if next_source is None or not result.ok:
        return result
    return replace(result, detail=f"{result.detail}; {_next_state(s3, next_source, source)}")


def _next_state(s3: Any, following: S3Prefix, served: S3Prefix) -> str:
    """What MODEL_NEXT_SOURCE holds: a finished mirror (ready to switch to) or not yet."""
    what = f"MODEL_NEXT_SOURCE {following.uri}"
    try:
        finished = s3.get_object(Bucket=following.bucket, Key=f"{following.key_prefix}{COMPLETION_OBJECT}")
        commit = finished["Body"].read().decode().strip()
    except ClientError as error:
        if _code(error) in ("NoSuchKey", "404"):
            return f"{what}: no finished mirror yet (`make mirror-model` fills it; {served.uri} is not written)"
        return f"{what}: not read ({_code(error)})"
    switch = f"MODEL_SOURCE={following.uri}, then `make lookup`"
    return f"{what}: a finished mirror (commit {commit[:12]}), ready to switch to ({switch})"


def _check_served(s3: Any, source: S3Prefix, *, region: str, gpu_nodes: int, kms_key: bool) -> CheckResult:
    try:
        location = s3.get_bucket_location(Bucket=source.bucket).get("LocationConstraint") or "us-east-1"
        location = {"EU": "eu-west-1"}.get(location, location)  # S3's legacy name of eu-west-1
    except ClientError as error:
        if _code(error) == "NoSuchBucket":
            return fail(
                NAME,
                f"bucket {source.bucket} does not exist",
                "create it in REGION (or fix MODEL_SOURCE), then `make mirror-model`",
            )
        return warn(
            NAME,
            "not checked",
            f"the deployer cannot read bucket {source.bucket} ({_code(error)}); the workers' own role is what reads it",
        )
    notes = []
    if location != region and kms_key:
        # The workers may decrypt only through S3 of this Region (kms:ViaService): Ray would log the refusals and
        # start vLLM without weights.
        return fail(
            NAME,
            f"bucket {source.bucket} is in {location}, not {region}, and MODEL_SOURCE_KMS_KEY_ARN is set",
            "copy the model to a bucket in REGION",
        )
    if location != region:
        notes.append(
            f"the bucket is in {location}, not {region}: the VPC's S3 endpoint does not carry it, so every node's"
            " download crosses the NAT gateway"
        )
    try:
        commit = (
            s3.get_object(Bucket=source.bucket, Key=f"{source.key_prefix}{COMPLETION_OBJECT}")["Body"]
            .read()
            .decode()
            .strip()
        )
    except ClientError as error:
        if _code(error) not in ("NoSuchKey", "404"):
            return warn(
                NAME,
                "not checked",
                f"the deployer cannot read {source.uri} ({_code(error)}); the workers' own role is what reads it",
            )
        listed = s3.list_objects_v2(Bucket=source.bucket, Prefix=source.key_prefix, MaxKeys=1000).get("Contents", [])
        if any(o["Key"] == f"{source.key_prefix}config.json" for o in listed):
            return warn(
                NAME,
                f"{source.uri} holds a model",
                f"no `{COMPLETION_OBJECT}` under it: not made, or not finished, by `make mirror-model` (run it to copy"
                " and verify)",
            )
        what = f"{source.uri} is empty (no config.json, no `{COMPLETION_OBJECT}`)"
        fix = "deploy parked first (`make park`), then `make mirror-model HF_MODEL=ORG/NAME`, then `make deploy`"
        if gpu_nodes == 0:
            return warn(
                NAME,
                f"{what}; parked, no engine loads it yet",
                "fill it before unparking: `make mirror-model HF_MODEL=ORG/NAME`",
            )
        return fail(NAME, f"{what}: the engines would find no weights", fix)
    summary = f"{source.uri}: a finished mirror (commit {commit[:12]})"
    return warn(NAME, summary, notes[0]) if notes else ok(NAME, summary)


def s3_model_facts(s3: Any, source: S3Prefix) -> ModelFacts:
    """`make lookup` for an s3:// MODEL_SOURCE: the same config.json and safetensors index as on the Hub, read from
    the prefix (a single-file checkpoint: its object's size)."""

    def read(name: str) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(
                s3.get_object(Bucket=source.bucket, Key=f"{source.key_prefix}{name}")["Body"].read()
            )
            return data
        except ClientError as error:
            if _code(error) in ("NoSuchKey", "404"):
                return None
            raise

    config = read("config.json")
    if config is None:
        raise HubError(f"{source.uri}: no config.json (fill the prefix with `make mirror-model` first)", status=404)
    index = read("model.safetensors.index.json")
    if index is None:
        try:
            size = int(
                s3.head_object(Bucket=source.bucket, Key=f"{source.key_prefix}model.safetensors")["ContentLength"]
            )
        except ClientError:
            raise HubError(
                f"{source.uri}: neither model.safetensors.index.json nor model.safetensors", status=404
            ) from None
        index = {"metadata": {"total_size": size}}
    facts = facts_from_files(source.uri, config, index)
    where = f"config.json and model.safetensors.index.json under {source.uri} (make lookup)"
    try:
        repo = (
            s3.head_object(Bucket=source.bucket, Key=f"{source.key_prefix}{COMPLETION_OBJECT}")
            .get("Metadata", {})
            .get(MIRRORED_FROM, "")
        )
    except ClientError:
        repo = ""
    if repo in BUILT_IN_MODELS:
        # A mirror of a built-in model: what vLLM skips of it (per-tensor sizes are not in the index) from the table.
        facts = replace(facts, text_only_skipped_bytes=BUILT_IN_MODELS[repo].text_only_skipped_bytes)
        where += f", a mirror of {repo}"
    return replace(facts, where=where)
