"""The preflight's model checks: MODEL_SOURCE on the Hub (a server on 127.0.0.1 stands in: HF_ENDPOINT) and
DLC_IMAGE in the Region's registry (Stubber: moto's ECR cannot hold AWS's DLC account's repository)."""

from __future__ import annotations

import boto3  # type: ignore[import-untyped]
import pytest
from botocore.stub import Stubber  # type: ignore[import-untyped]

from preflight.hub import check_model_source
from preflight.image_checks import check_image
from tests.test_hub_lookup import TOKEN, hub  # noqa: F401 (the fixture: recorded Hub answers)

IMAGE = "763104351884.dkr.ecr.sa-east-1.amazonaws.com/ray:serve-llm-cuda-v1.0"
DIGEST = "763104351884.dkr.ecr.sa-east-1.amazonaws.com/ray@sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("source", "token", "verdict", "fragment"),
    [
        ("Qwen/Qwen3.5-9B", None, "PASS", "readable on the Hub"),
        ("meta-llama/Llama-3.1-8B-Instruct", None, "FAIL", "set HF_TOKEN_SECRET_NAME"),
        ("meta-llama/Llama-3.1-8B-Instruct", TOKEN, "PASS", "gated: readable with the token"),
        ("meta-llama/Llama-3.1-8B-Instruct", "hf_wrong", "FAIL", "accepted the model's licence"),
        ("Qwen/Qwen3.5-9b-typo", None, "FAIL", "misspelt MODEL_SOURCE"),
    ],
)
def test_the_model_source_on_the_hub(
    hub: str,  # noqa: F811 (the fixture imported above)
    monkeypatch: pytest.MonkeyPatch,
    source: str,
    token: str | None,
    verdict: str,
    fragment: str,
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub)
    read: list[str] = []

    def secret() -> str:
        read.append("read")
        return str(token)

    result = check_model_source(source, token=secret if token else None)
    assert result.verdict == verdict and fragment in result.detail + result.fix + result.warning, result
    # The secret is read only for a gated model.
    assert read == (["read"] if token and "Llama" in source else [])


def test_a_hub_that_does_not_answer_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens
    result = check_model_source("Qwen/Qwen3.5-9B", token=None)
    assert result.verdict == "WARN" and "run the preflight again" in result.warning


def _ecr() -> tuple[object, Stubber]:
    ecr = boto3.client("ecr", region_name="sa-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    return ecr, Stubber(ecr)


@pytest.mark.parametrize(
    ("image", "image_id"),
    [(IMAGE, {"imageTag": "serve-llm-cuda-v1.0"}), (DIGEST, {"imageDigest": "sha256:" + "a" * 64})],
)
def test_the_image_exists(image: str, image_id: dict[str, str]) -> None:
    ecr, stub = _ecr()
    stub.add_response(
        "batch_get_image",
        {"images": [{"imageId": image_id}], "failures": []},
        {"registryId": "763104351884", "repositoryName": "ray", "imageIds": [image_id]},
    )
    with stub:
        assert check_image(ecr, image, "sa-east-1").verdict == "PASS"


def test_a_missing_tag_or_another_regions_image_is_refused() -> None:
    ecr, stub = _ecr()
    stub.add_response(
        "batch_get_image",
        {"images": [], "failures": [{"failureCode": "ImageNotFound", "failureReason": "Requested image not found"}]},
    )
    with stub:
        result = check_image(ecr, IMAGE, "sa-east-1")
    assert result.verdict == "FAIL" and "ImageNotFound" in result.detail
    other = check_image(None, IMAGE.replace("sa-east-1", "us-east-2"), "sa-east-1")
    assert other.verdict == "FAIL" and "not REGION sa-east-1" in other.detail
    public = check_image(None, "public.ecr.aws/deep-learning-containers/ray:serve-llm-cuda-v1.0", "sa-east-1")
    assert public.verdict == "WARN"
