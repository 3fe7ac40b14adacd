"""`make mirror-model`: the Job's program against a stand-in Hub on 127.0.0.1 and moto's S3 (in-process); the Job's
manifest and the tool's handling of its log: tests/test_model_mirror_job.py.

The stand-in answers what the Hub's API does for /api/models/REPO/revision/REV?blobs=true (each file's size,
git blob id and, for LFS files, SHA-256) and /REPO/resolve/COMMIT/FILE; it can be told to send other bytes
than it advertises, which the program must refuse.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.session
import pytest
from moto import mock_aws

from k8s_constructs import model_mirror_script as script
from tests.conftest import REPO as REPO_ROOT
from tests.loopback import serving
from tests.preflight_fakes import _shared_loader

REPO, COMMIT, BUCKET = "Qwen/Qwen3.5-9B", "c0ffee" * 6 + "beef", "example-models"
FILES = {
    "config.json": b'{"architectures": ["Qwen3_5ForConditionalGeneration"]}',
    "tokenizer.json": b'{"model": {}}',
    "model-00001-of-00002.safetensors": b"\x01" * 300_000,
    "model-00002-of-00002.safetensors": b"\x02" * 200_000,
}
LFS = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}


def _git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeHub:
    def __init__(self) -> None:
        self.corrupt: set[str] = set()
        self.token_seen: list[str] = []
        self.files = dict(FILES)
        self.redirect_to = ""  # a CDN base URL: LFS files are answered with a 302 to it, as the Hub does

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hub.token_seen.append(self.headers.get("Authorization", ""))
                if self.path == f"/api/models/{REPO}/revision/main?blobs=true":
                    siblings = [
                        {
                            "rfilename": n,
                            "size": len(d),
                            "blobId": _git_blob(d),
                            **({"lfs": {"sha256": hashlib.sha256(d).hexdigest(), "size": len(d)}} if n in LFS else {}),
                        }
                        for n, d in hub.files.items()
                    ]
                    return self._send(json.dumps({"id": REPO, "sha": COMMIT, "siblings": siblings}).encode())
                prefix = f"/{REPO}/resolve/{COMMIT}/"
                if self.path.startswith(prefix) and self.path[len(prefix) :] in hub.files:
                    name = self.path[len(prefix) :]
                    if hub.redirect_to and name in LFS:
                        self.send_response(302)
                        self.send_header("Location", f"{hub.redirect_to}/{name}")
                        self.end_headers()
                        return
                    data = hub.files[name]
                    return self._send(data[:-1] + b"\x00" if name in hub.corrupt else data)
                self.send_response(404)
                self.end_headers()

            def _send(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


@pytest.fixture
def hub() -> Iterator[tuple[FakeHub, str]]:
    fake = FakeHub()
    with serving(fake.handler()) as base:
        yield fake, base


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    # One botocore loader for every session (moto starts each test on a new default session, which re-parsed the
    # service models), as tests/preflight_fakes.py.
    monkeypatch.setattr(botocore.session, "create_loader", _shared_loader)
    with mock_aws():
        client = boto3.client("s3", region_name="sa-east-1")
        client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "sa-east-1"})
        yield client


def _keys(s3: Any, prefix: str) -> dict[str, bytes]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return {o["Key"][len(prefix) :]: s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listed}


def test_a_model_is_copied_verified_and_marked_finished(
    hub: tuple[FakeHub, str], s3: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fake, base = hub
    result = script.mirror(
        repo=REPO, revision="main", dest=f"s3://{BUCKET}/qwen3.5-9b", endpoint=base, token="hf_secret", s3=s3
    )
    assert _keys(s3, "qwen3.5-9b/") == {**FILES, "hash": COMMIT.encode()}
    assert s3.head_object(Bucket=BUCKET, Key="qwen3.5-9b/hash")["Metadata"] == {"hf-repo": REPO}
    assert (
        result["files"] == 4 and result["bytes"] == sum(len(d) for d in FILES.values()) and result["commit"] == COMMIT
    )
    assert set(fake.token_seen) == {"Bearer hf_secret"}
    out = capsys.readouterr().out
    assert (
        "[4/4] tokenizer.json" in out and "reading every object back from S3" in out and f"wrote hash = {COMMIT}" in out
    )
    # Run again: a finished mirror of the same commit is read back and nothing is written or sent twice.
    fake.token_seen.clear()
    before = {o["Key"]: o["LastModified"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="qwen3.5-9b/")["Contents"]}
    again = script.mirror(
        repo=REPO, revision="main", dest=f"s3://{BUCKET}/qwen3.5-9b", endpoint=base, token="", s3=s3, served=True
    )
    assert "reading every object back, writing nothing" in capsys.readouterr().out and again["commit"] == COMMIT
    assert {
        o["Key"]: o["LastModified"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="qwen3.5-9b/")["Contents"]
    } == before
    assert len(fake.token_seen) == 1  # the file list only


@pytest.mark.parametrize("corrupt", ["config.json", "model-00002-of-00002.safetensors"])
def test_bytes_that_do_not_match_the_hubs_hash_fail_and_leave_no_mark(
    hub: tuple[FakeHub, str], s3: Any, corrupt: str
) -> None:
    fake, base = hub
    fake.corrupt.add(corrupt)
    with pytest.raises(script.MirrorError, match=f"{corrupt}: the Hub sent .* that do not match its published size"):
        script.mirror(repo=REPO, revision="main", dest=f"s3://{BUCKET}/qwen", endpoint=base, token="", s3=s3)
    assert "hash" not in _keys(s3, "qwen/")


def test_an_object_changed_in_s3_after_the_copy_fails_the_read_back(
    hub: tuple[FakeHub, str], s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, base = hub
    real = s3.upload_fileobj

    def upload_then_tamper(reader: Any, bucket: str, key: str, **kwargs: Any) -> None:
        real(reader, bucket, key, **kwargs)
        if key.endswith("tokenizer.json"):
            s3.put_object(Bucket=bucket, Key=key, Body=b"tampered")

    monkeypatch.setattr(s3, "upload_fileobj", upload_then_tamper)
    with pytest.raises(script.MirrorError, match=r"tokenizer\.json: 8 bytes whose hash is not the Hub's git-sha1"):
        script.mirror(repo=REPO, revision="main", dest=f"s3://{BUCKET}/qwen", endpoint=base, token="", s3=s3)
    assert "hash" not in _keys(s3, "qwen/")


def test_a_prefix_holding_another_models_files_is_refused(hub: tuple[FakeHub, str], s3: Any) -> None:
    _, base = hub
    s3.put_object(Bucket=BUCKET, Key="qwen/model-00001-of-00008.safetensors", Body=b"other")
    with pytest.raises(
        script.MirrorError,
        match=r"holds files that are not in Qwen/Qwen3.5-9B@c0ffee.*model-00001-of-00008.safetensors\): empty it",
    ):
        script.mirror(repo=REPO, revision="main", dest=f"s3://{BUCKET}/qwen", endpoint=base, token="", s3=s3)


def test_a_missing_repository_is_one_line(hub: tuple[FakeHub, str], s3: Any) -> None:
    _, base = hub
    with pytest.raises(script.MirrorError, match="the Hub answered 404 for Qwen/Nope@main"):
        script.mirror(repo="Qwen/Nope", revision="main", dest=f"s3://{BUCKET}/qwen", endpoint=base, token="", s3=s3)


def test_a_finished_mirror_is_never_rewritten(hub: tuple[FakeHub, str], s3: Any) -> None:
    """Engines may download a finished mirror at any time (elastic capacity) and Ray 2.58 loads whatever is under the
    prefix: a re-run never deletes `hash`, overwrites a file or empties one there (issue 28.2)."""
    fake, base = hub
    script.mirror(repo=REPO, revision="main", dest=f"s3://{BUCKET}/qwen", endpoint=base, token="", s3=s3)
    s3.put_object(Bucket=BUCKET, Key="qwen/tokenizer.json", Body=b"changed", Metadata={})
    fake.corrupt.add("tokenizer.json")
    before = _keys(s3, "qwen/")
    with pytest.raises(
        script.MirrorError,
        match=r"tokenizer\.json: 7 bytes .* \(the finished mirror is left as it is: mirror into a prefix of its own\)",
    ):
        script.mirror(repo=REPO, revision="main", dest=f"s3://{BUCKET}/qwen", endpoint=base, token="", s3=s3)
    assert _keys(s3, "qwen/") == before and before["hash"] == COMMIT.encode()
    # Another revision into it: refused, untouched.
    s3.put_object(Bucket=BUCKET, Key="qwen/hash", Body=b"0123456789abcdef", Metadata={"hf-repo": REPO})
    before = _keys(s3, "qwen/")
    with pytest.raises(
        script.MirrorError,
        match=rf"is the finished mirror of {REPO}@0123456789abcdef.*into a prefix of its own and switch MODEL_SOURCE",
    ):
        script.mirror(repo=REPO, revision="main", dest=f"s3://{BUCKET}/qwen", endpoint=base, token="", s3=s3)
    assert _keys(s3, "qwen/") == before


def test_nothing_is_written_into_a_prefix_the_running_engines_read(hub: tuple[FakeHub, str], s3: Any) -> None:
    """Not even a first copy: the engines would load the half-written prefix (a missing `hash` is Ray's 000…0
    snapshot)."""
    _, base = hub
    with pytest.raises(
        script.MirrorError, match=r"read by the deployed RayService while its GPU workers run.*park first"
    ):
        script.mirror(
            repo=REPO, revision="main", dest=f"s3://{BUCKET}/qwen", endpoint=base, token="", s3=s3, served=True
        )
    assert _keys(s3, "qwen/") == {}


def test_a_copy_that_does_not_match_is_emptied_only_in_a_prefix_no_engine_reads(
    hub: tuple[FakeHub, str], s3: Any
) -> None:
    fake, base = hub
    fake.corrupt.add("tokenizer.json")
    with pytest.raises(script.MirrorError):
        script.mirror(repo=REPO, revision="main", dest=f"s3://{BUCKET}/qwen", endpoint=base, token="", s3=s3)
    keys = _keys(s3, "qwen/")
    # No finished mark, and the bad file emptied: the next run copies it again instead of skipping it.
    assert "hash" not in keys and keys["tokenizer.json"] == b""
    fake.corrupt.clear()
    script.mirror(repo=REPO, revision="main", dest=f"s3://{BUCKET}/qwen", endpoint=base, token="", s3=s3)
    assert _keys(s3, "qwen/") == {**FILES, "hash": COMMIT.encode()}


def test_only_what_vllm_loads_is_copied(hub: tuple[FakeHub, str], s3: Any) -> None:
    fake, base = hub
    fake.files.update(
        {
            "original/consolidated.00.pth": b"\x03" * 1000,
            "pytorch_model.bin": b"\x04" * 1000,
            "generation_config.json": b"{}",
        }
    )
    result = script.mirror(repo=REPO, revision="main", dest=f"s3://{BUCKET}/llama", endpoint=base, token="", s3=s3)
    assert sorted(_keys(s3, "llama/")) == sorted([*FILES, "generation_config.json", "hash"])
    assert result["left_out"] == ["original/consolidated.00.pth", "pytorch_model.bin"]


def test_the_token_is_not_sent_to_the_cdn_a_file_redirects_to(hub: tuple[FakeHub, str], s3: Any) -> None:
    fake, base = hub
    cdn_seen: list[str] = []

    class Cdn(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            cdn_seen.append(self.headers.get("Authorization", ""))
            data = FILES[self.path.lstrip("/")]
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Cdn) as cdn:
        fake.redirect_to = cdn
        script.mirror(repo=REPO, revision="main", dest=f"s3://{BUCKET}/qwen", endpoint=base, token="hf_secret", s3=s3)
    assert len(cdn_seen) == len(LFS) and set(cdn_seen) == {""}
    assert set(fake.token_seen) == {"Bearer hf_secret"}


def test_the_program_imports_only_the_standard_library_and_boto3() -> None:
    # The Job runs it with the image's python3: nothing of this repository is there.
    code = (
        "import os, runpy, sys; sys.path = [p for p in sys.path if p and os.path.abspath(p) != sys.argv[2]];"
        " runpy.run_path(sys.argv[1], run_name='probe')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, script.__file__, str(REPO_ROOT)],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
