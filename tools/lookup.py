"""`make lookup`: ask AWS what the synth needs (AZs, where GPU_NODE_TYPE is offered, facts of types
outside the built-in table, the image digest, add-on versions) and the Hugging Face Hub for MODEL_SOURCE's
config.json and safetensors index (with the token of HF_TOKEN_SECRET_NAME for a gated model; from the prefix
for an s3:// source), and cache the
answers in cdk.context.json. Needs AWS credentials."""

from __future__ import annotations

import os
import sys

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from preflight.hub import HubError, ShapeNotUnderstood, hub_model_facts
from preflight.lookups import look_up
from preflight.model_bucket import s3_model_facts
from settings import SettingError
from settings.context_files import CDK_CONTEXT_JSON, read_project_context, write_cached_lookups
from settings.loader import raw_values
from settings.model_facts import model_facts_context_key
from settings.model_source import parse_model_source, s3_source
from tools.entry import credentials_problem


def _hub_token(secret_name: str, region: str) -> str:
    """The Hugging Face token of HF_TOKEN_SECRET_NAME, for a gated model ("" without one)."""
    if not secret_name:
        return ""
    secret = boto3.session.Session().client("secretsmanager", region_name=region).get_secret_value(SecretId=secret_name)
    return str(secret.get("SecretString", "")).strip()


def main() -> int:
    raw = raw_values(os.environ, read_project_context())
    region, gpu, system, kubernetes = raw["REGION"], raw["GPU_NODE_TYPE"], raw["SYSTEM_NODE_TYPE"], raw["K8S_VERSION"]
    try:
        image = raw["DLC_IMAGE"].replace("${REGION}", region)
        entries = look_up(
            boto3.session.Session(),
            region=region,
            gpu_node_type=gpu,
            system_node_type=system,
            kubernetes_version=kubernetes,
            image=image,
        )
    except (BotoCoreError, ClientError, LookupError) as error:
        problem = credentials_problem(error)
        print(f"error: {problem or f'the look-up in {region} failed: {error}'}", file=sys.stderr)
        return 2 if problem else 1
    try:
        source = s3_source(parse_model_source(raw["MODEL_SOURCE"]))
        if source is not None:
            facts = s3_model_facts(boto3.session.Session().client("s3", region_name=region), source)
        else:
            facts = hub_model_facts(raw["MODEL_SOURCE"], token=_hub_token(raw["HF_TOKEN_SECRET_NAME"], region))
    except ShapeNotUnderstood as unknown:
        print(f"notice: {unknown}: the model is not fit-checked (no facts cached)", file=sys.stderr)
    except (HubError, BotoCoreError, ClientError) as error:
        write_cached_lookups(entries)
        print(f"error: the model's facts: {error}", file=sys.stderr)
        return 1
    else:
        entries[model_facts_context_key(facts.source)] = facts.to_context()
    write_cached_lookups(entries)
    for key, value in sorted(entries.items()):
        print(f"cached {key} = {value if not isinstance(value, dict) else value.get('name')}")
    print(f"wrote {CDK_CONTEXT_JSON.name}; commit it so every synth (CI included) sees the same answers")
    try:
        from settings import load_settings

        settings = load_settings(os.environ, read_project_context())
        print(f"GPU_AZ resolves to {settings.gpu_az} ({settings.gpu_az_source})")
    except SettingError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
