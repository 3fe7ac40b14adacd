"""Who reads an S3 mirror, against moto's S3: Ray 2.58's own downloader with the container credentials EKS Pod
Identity gives a pod (served by a stand-in agent on 127.0.0.1), the preflight's model-source check, and
`make lookup`'s model facts read from the prefix. The policies and the synth: tests/test_model_s3.py."""

from __future__ import annotations

import http.server
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
import pytest
from moto import mock_aws

from k8s_constructs.serve_config import pd_application
from settings import SettingError
from settings.model_source import S3Prefix
from tests.conftest import settings_for
from tests.loopback import answer_json, serving
from tests.test_model_s3 import BUCKET, PREFIX, SOURCE

# --- Ray's own downloader, with Pod Identity's container credentials ---------------------------------------------


@pytest.fixture
def pod_identity_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A stand-in for the EKS Pod Identity agent (169.254.170.23 in a pod; 127.0.0.1 here, which botocore's
    container provider also accepts), with the two variables EKS's webhook injects into the pod."""
    token = tmp_path / "eks-pod-identity-token"
    token.write_text("projected-service-account-token")
    seen: list[str] = []

    class Agent(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization", ""))
            answer_json(
                self,
                {
                    "AccessKeyId": "ASIAPODIDENTITY",
                    "SecretAccessKey": "secret",
                    "Token": "session",
                    "Expiration": "2099-01-01T00:00:00Z",
                },
            )

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Agent) as base:
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f"{base}/v1/credentials")
        monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(token))
        yield seen


def test_ray_downloads_the_prefix_with_pod_identity_credentials(
    pod_identity_agent: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray.llm._internal.common.utils.cloud_utils import CloudFileSystem

    with mock_aws():
        setup = boto3.client("s3", region_name="sa-east-1", aws_access_key_id="setup", aws_secret_access_key="setup")
        setup.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "sa-east-1"})
        files = {"config.json": b"{}", "tokenizer.json": b"{}", "model.safetensors": b"w" * 1000, "hash": b"0123abcd"}
        for name, body in files.items():
            setup.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{name}", Body=body)
        setup.put_object(Bucket=BUCKET, Key=f"{PREFIX}-old/model.safetensors", Body=b"old")
        # The worker's environment: no keys (moto's fake ones set aside), no config files, the Region set.
        with mock.patch.dict(os.environ):
            for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
                os.environ.pop(name, None)
            os.environ.update(
                {
                    "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
                    "AWS_CONFIG_FILE": str(tmp_path / "none"),
                    "AWS_REGION": "sa-east-1",
                }
            )
            monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
            CloudFileSystem.download_model(
                destination_path=str(tmp_path / "models--qwen"), bucket_uri=SOURCE, tokenizer_only=False
            )
    snapshot = tmp_path / "models--qwen" / "snapshots" / "0123abcd"
    assert (tmp_path / "models--qwen" / "refs" / "main").read_text() == "0123abcd"
    assert sorted(p.name for p in snapshot.iterdir()) == sorted(files)
    assert (snapshot / "model.safetensors").read_bytes() == files["model.safetensors"]
    assert pod_identity_agent and set(pod_identity_agent) == {"projected-service-account-token"}


# --- the preflight, on moto's S3 ----------------------------------------------------------------------------------


def test_the_preflight_wants_a_finished_mirror_in_the_region_before_gpu_nodes_start() -> None:
    from preflight.model_bucket import check_s3_model_source

    source = S3Prefix(BUCKET, PREFIX)
    with mock_aws():
        s3 = boto3.client("s3", region_name="sa-east-1")
        missing = check_s3_model_source(s3, source, region="sa-east-1", gpu_nodes=2)
        assert not missing.ok and "does not exist" in missing.detail
        s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "sa-east-1"})
        empty = check_s3_model_source(s3, source, region="sa-east-1", gpu_nodes=2)
        assert not empty.ok and "make park" in empty.fix and "make mirror-model" in empty.fix
        parked = check_s3_model_source(s3, source, region="sa-east-1", gpu_nodes=0)
        assert parked.ok and "before unparking" in parked.warning
        s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}-old/hash", Body=b"neighbour")  # not ours
        s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/config.json", Body=b"{}")
        unfinished = check_s3_model_source(s3, source, region="sa-east-1", gpu_nodes=2)
        assert unfinished.ok and "not finished" in unfinished.warning
        s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/hash", Body=b"c0ffee1234567890")
        finished = check_s3_model_source(s3, source, region="sa-east-1", gpu_nodes=2)
        assert finished.ok and not finished.warning and "commit c0ffee123456" in finished.detail
        elsewhere = check_s3_model_source(s3, source, region="us-east-2", gpu_nodes=2)
        assert elsewhere.ok and "crosses the NAT gateway" in elsewhere.warning
        # With SSE-KMS the workers may decrypt only through this Region's S3: refused.
        encrypted_elsewhere = check_s3_model_source(s3, source, region="us-east-2", gpu_nodes=2, kms_key=True)
        assert not encrypted_elsewhere.ok and "MODEL_SOURCE_KMS_KEY_ARN" in encrypted_elsewhere.detail


# --- make lookup's facts of a mirrored model ----------------------------------------------------------------------


def test_the_facts_of_a_mirrored_model_come_from_the_prefix_and_drive_the_synth() -> None:
    from preflight.hub import HubError
    from preflight.model_bucket import s3_model_facts
    from settings.model_facts import BUILT_IN_MODELS, model_facts_context_key
    from tests.test_hub_lookup import FILES as HUB_FILES

    source = S3Prefix(BUCKET, PREFIX)
    with mock_aws():
        s3 = boto3.client("s3", region_name="sa-east-1")
        s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "sa-east-1"})
        with pytest.raises(HubError, match=r"no config\.json"):
            s3_model_facts(s3, source)
        for name, body in HUB_FILES["Qwen/Qwen3.5-9B"].items():
            s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{name}", Body=json.dumps(body).encode())
        unknown_origin = s3_model_facts(s3, source)
        # As the mirror Job leaves it: `hash` last, naming the repository it copied.
        s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/hash", Body=b"c2022362", Metadata={"hf-repo": "Qwen/Qwen3.5-9B"})
        facts = s3_model_facts(s3, source)
    assert unknown_origin.text_only_skipped_bytes == 0 and "a mirror of Qwen/Qwen3.5-9B" in facts.where
    built_in = BUILT_IN_MODELS["Qwen/Qwen3.5-9B"]
    same = (
        "architectures",
        "weight_bytes",
        "layers",
        "attention_layers",
        "kv_heads",
        "head_dim",
        "native_context",
        "multimodal",
    )
    assert {k: getattr(facts, k) for k in same} == {k: getattr(built_in, k) for k in same}
    assert facts.source == SOURCE
    # Cached as `make lookup` writes it, the synth knows the model: fit-checked, served text-only as the Hub id is.
    context = {model_facts_context_key(SOURCE): facts.to_context()}
    settings = settings_for({"MODEL_SOURCE": SOURCE + "/"}, context)
    assert settings.model_facts_source == "cached look-up" and settings.text_only_multimodal
    engine = pd_application(settings).to_serve_config()["applications"][0]["args"]["decode_config"]["engine_kwargs"]
    assert engine["language_model_only"] is True
    with pytest.raises(SettingError, match="MAX_MODEL_LEN"):
        settings_for({"MODEL_SOURCE": SOURCE, "MAX_MODEL_LEN": "10000000"}, context)
