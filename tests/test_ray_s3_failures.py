"""What Ray 2.58's own S3 downloader does when the weights cannot be read, run on moto's S3: what the troubleshooting
and weights pages tell users to look for."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from tests.conftest import REPO
from tests.test_model_s3 import BUCKET, PREFIX, SOURCE


def test_what_rays_downloader_logs_when_an_object_or_the_listing_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What docs/troubleshooting.md and docs/weights.md tell users to grep for, from Ray 2.58's own downloader on moto's
    S3: an object it cannot read (here one in Glacier) is logged as `Failed to download KEY: ...` and `Failed to
    download N files: [...]`, and the download returns (the engine then starts from what is there); a listing that fails
    (here no bucket) raises, and the replica fails. `Failed to download files for model` is logged only for a
    RuntimeError."""
    import logging

    from ray.llm._internal.common.utils.cloud_filesystem import s3_filesystem
    from ray.llm._internal.common.utils.cloud_utils import CloudFileSystem

    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Collect(level=logging.ERROR)
    s3_filesystem.logger.addHandler(handler)
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "sa-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    try:
        with mock_aws():
            s3 = boto3.client("s3", region_name="sa-east-1")
            s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "sa-east-1"})
            for name, body in {"config.json": b"{}", "tokenizer.json": b"{}", "hash": b"c2022362"}.items():
                s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{name}", Body=body)
            s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/model.safetensors", Body=b"w" * 100, StorageClass="GLACIER")
            CloudFileSystem.download_model(
                destination_path=str(tmp_path / "models"), bucket_uri=SOURCE, tokenizer_only=False
            )
            with pytest.raises(Exception, match="NoSuchBucket"):
                CloudFileSystem.download_model(
                    destination_path=str(tmp_path / "other"), bucket_uri="s3://no-such-bucket/x", tokenizer_only=False
                )
    finally:
        s3_filesystem.logger.removeHandler(handler)
    snapshot = tmp_path / "models" / "snapshots" / "c2022362"
    assert sorted(p.name for p in snapshot.iterdir()) == [
        "config.json",
        "hash",
        "tokenizer.json",
    ]  # started without the weights
    assert any(line.startswith(f"Failed to download {PREFIX}/model.safetensors: ") for line in lines), lines
    assert f"Failed to download 1 files: ['{PREFIX}/model.safetensors']..." in lines, lines
    assert any(line.startswith("Error downloading files from s3://no-such-bucket/x") for line in lines), lines
    for page in ("troubleshooting.md", "weights.md"):
        text = (REPO / "docs" / page).read_text()
        assert (
            "`Failed to download N files" in text
            and "`Failed to download KEY" in text
            and "Failed to download files for model" not in text
        ), page
