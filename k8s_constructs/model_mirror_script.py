"""The mirror Job's program (`make mirror-model`): copy one revision of a Hugging Face model repository to an
S3 prefix (MODEL_NEXT_SOURCE's when set, else MODEL_SOURCE's: the tool passes it as DEST_URI), and prove the copy.

Runs inside the Ray LLM image on a system node (python3 and boto3, nothing else: this file imports only the
standard library and boto3), with the Job's EKS Pod Identity. Each file streams from the Hub to S3 (no local
disk), hashed on the way; then every object is read back from S3 and its size and hash compared with what the
Hub publishes for that file (the SHA-256 of a file stored in LFS, the git blob SHA-1 of any other). Only when
all match does it write `hash` (the commit): Ray Serve LLM names the local snapshot after it, and the preflight
takes it as the sign of a finished copy. Progress goes to stdout; the last line is `MIRROR_RESULT <json>`.

A finished mirror (its `hash` there) is never rewritten: with elastic capacity an engine may start and download it
at any time, and Ray 2.58 loads whatever it finds under the prefix (a missing `hash` only names the snapshot
000…0). A run of the same commit reads it back and changes nothing; another revision is refused (it goes to a
prefix of its own). Nor is anything written into a prefix the deployed RayService reads while its GPU workers run
(MIRROR_SERVED=1, which the tool finds out): park first. So an empty object (what a copy that did not match leaves,
for the next run to copy again) only ever lands in a prefix no engine reads.

Environment: HF_REPO, HF_REVISION (default main), DEST_URI (s3://BUCKET/PREFIX), HF_ENDPOINT (default the
Hub), HF_TOKEN_FILE (optional: a file holding the token), AWS_REGION, MIRROR_SERVED (1: the deployed engines read
DEST_URI now).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, BinaryIO

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import BotoCoreError, ClientError

RESULT_MARKER = "MIRROR_RESULT "
COMPLETION_OBJECT = "hash"  # what Ray reads as the snapshot name; written last
MIRRORED_FROM = "hf-repo"  # the completion object's metadata key: the Hub repository
# Weights vLLM does not load when safetensors are there (its default load format), and the original checkpoints
# some repositories carry beside the converted one (meta-llama's original/: 16 GB more for an 8B model).
OTHER_WEIGHT_FORMATS = (".pth", ".pt", ".gguf", ".onnx", ".h5", ".msgpack", ".ckpt")
OTHER_CHECKPOINT_DIRS = ("original/",)
ATTEMPTS = 3
CHUNK = 8 * 1024 * 1024
PROGRESS_EVERY = 1024**3  # a line per GiB
TRANSFER = TransferConfig(multipart_chunksize=64 * 1024 * 1024, max_concurrency=8)


class MirrorError(Exception):
    """One line for the Job's log: what does not match, and where."""


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int
    sha256: str  # LFS files
    git_sha1: str  # other files: the git blob id

    def expected(self) -> tuple[str, str]:
        return ("sha256", self.sha256) if self.sha256 else ("git-sha1", self.git_sha1)


class _Hashing:
    """A file-like reader that counts and hashes what passes through it, with the hash the Hub publishes for the file
    (SHA-256 for LFS, the git blob SHA-1 otherwise)."""

    def __init__(self, raw: BinaryIO, file: HubFile, label: str) -> None:
        self.raw, self.file, self.label = raw, file, label
        self.count = 0
        kind, _ = file.expected()
        self.digest = hashlib.sha256() if kind == "sha256" else hashlib.sha1(f"blob {file.size}\0".encode())
        self.started, self.next_report = time.monotonic(), PROGRESS_EVERY

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n) if n is not None and n >= 0 else self.raw.read()
        self.count += len(data)
        self.digest.update(data)
        if self.count >= self.next_report:
            rate = self.count / max(time.monotonic() - self.started, 1e-6) / 1e6
            print(
                f"  {self.label}: {self.count / 1024**3:.1f} / {self.file.size / 1024**3:.1f} GiB ({rate:.0f} MB/s)",
                flush=True,
            )
            self.next_report += PROGRESS_EVERY
        return data

    def matches(self) -> bool:
        return self.count == self.file.size and self.digest.hexdigest() == self.file.expected()[1]


def _hub(endpoint: str, path: str, token: str) -> Any:
    request = urllib.request.Request(f"{endpoint}{path}")
    if token:
        # Not to the host a file redirects to (the Hub's CDN takes a presigned URL), as the Hub's own client does.
        request.add_unredirected_header("Authorization", f"Bearer {token}")
    return urllib.request.urlopen(request, timeout=60)


def hub_files(endpoint: str, repo: str, revision: str, token: str) -> tuple[str, list[HubFile]]:
    """The commit of `revision` and every file of the repository at it, with sizes and hashes."""
    quoted = urllib.parse.quote(revision, safe="")
    try:
        with _hub(endpoint, f"/api/models/{repo}/revision/{quoted}?blobs=true", token) as answer:
            info = json.load(answer)
    except urllib.error.HTTPError as error:
        raise MirrorError(
            f"the Hub answered {error.code} for {repo}@{revision} (gated: set HF_TOKEN_SECRET_NAME; misspelt: check"
            " HF_MODEL)"
        ) from None
    except (urllib.error.URLError, OSError) as error:
        raise MirrorError(f"cannot reach the Hub at {endpoint}: {error}") from None
    files = []
    for sibling in info.get("siblings", []):
        lfs = sibling.get("lfs") or {}
        if "size" not in sibling or not (lfs.get("sha256") or sibling.get("blobId")):
            raise MirrorError(f"the Hub gave no size or hash for {sibling.get('rfilename')}")
        files.append(
            HubFile(
                sibling["rfilename"], int(sibling["size"]), str(lfs.get("sha256", "")), str(sibling.get("blobId", ""))
            )
        )
    if not any(f.path == "config.json" for f in files):
        raise MirrorError(f"{repo}@{revision} has no config.json: not a model repository")
    return str(info["sha"]), sorted(files, key=lambda f: f.path)


def served_files(files: list[HubFile]) -> tuple[list[HubFile], list[HubFile]]:
    """(copied, left out): every GPU node downloads the whole prefix, so only what vLLM loads is copied: the
    safetensors (not the same weights again as .bin, .pth or another framework's format), config and tokenizer."""
    has_safetensors = any(f.path.endswith(".safetensors") for f in files)

    def left_out(f: HubFile) -> bool:
        other_format = f.path.endswith(OTHER_WEIGHT_FORMATS) or (has_safetensors and f.path.endswith(".bin"))
        return f.path.startswith(OTHER_CHECKPOINT_DIRS) or other_format

    return [f for f in files if not left_out(f)], [f for f in files if left_out(f)]


def split_uri(uri: str) -> tuple[str, str]:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    return bucket, prefix.strip("/") + "/"


def _copy(s3: Any, endpoint: str, repo: str, commit: str, token: str, file: HubFile, bucket: str, key: str) -> None:
    """One file from the Hub to S3, hashed on the way, with the Hub's digest in its metadata (a later run skips it, and
    still reads it back); bytes that do not match are replaced by an empty object, so nothing unchecked keeps it."""
    kind, digest = file.expected()
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with _hub(endpoint, f"/{repo}/resolve/{commit}/{urllib.parse.quote(file.path)}", token) as answer:
                reader = _Hashing(answer, file, file.path)
                s3.upload_fileobj(reader, bucket, key, ExtraArgs={"Metadata": {kind: digest}}, Config=TRANSFER)
        except (OSError, urllib.error.URLError, BotoCoreError, ClientError) as error:
            if attempt == ATTEMPTS or (isinstance(error, ClientError) and "AccessDenied" in str(error)):
                raise MirrorError(f"{file.path}: {error}") from None
            print(f"  {file.path}: {error}; again ({attempt + 1}/{ATTEMPTS})", flush=True)
            continue
        if not reader.matches():
            s3.put_object(Bucket=bucket, Key=key, Body=b"")
            raise MirrorError(
                f"{file.path}: the Hub sent {reader.count} bytes that do not match its published size {file.size} and"
                f" {kind} {digest}"
            )
        return


def _verify(s3: Any, bucket: str, prefix: str, files: list[HubFile]) -> None:
    """Read every object back and compare its size and hash with the Hub's."""
    for file in files:
        body = s3.get_object(Bucket=bucket, Key=prefix + file.path)["Body"]
        reader = _Hashing(body, file, f"verify {file.path}")
        while reader.read(CHUNK):
            pass
        if not reader.matches():
            raise MirrorError(
                f"s3://{bucket}/{prefix}{file.path}: {reader.count} bytes whose hash is not the Hub's"
                f" {file.expected()[0]} {file.expected()[1]}"
            )


def mirror(
    *, repo: str, revision: str, dest: str, endpoint: str, token: str, s3: Any, served: bool = False
) -> dict[str, Any]:
    started = time.monotonic()
    commit, listed = hub_files(endpoint, repo, revision, token)
    files, left_out = served_files(listed)
    bucket, prefix = split_uri(dest)
    total = sum(f.size for f in files)

    def summary(copy_seconds: float, verify_seconds: float) -> dict[str, Any]:
        return {
            "repo": repo,
            "commit": commit,
            "destination": f"s3://{bucket}/{prefix}",
            "files": len(files),
            "bytes": total,
            "left_out": [f.path for f in left_out],
            "copy_seconds": copy_seconds,
            "verify_seconds": verify_seconds,
        }

    print(f"{repo}@{commit}: {len(files)} files, {total / 1024**3:.2f} GiB -> s3://{bucket}/{prefix}", flush=True)
    if left_out:
        print(f"left out (vLLM loads the safetensors): {', '.join(f.path for f in left_out)}", flush=True)
    try:
        existing = {
            o["Key"][len(prefix) :]: o
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for o in page.get("Contents", [])
            if not o["Key"].endswith("/")  # a console folder marker, which Ray skips too
        }
        # Ray downloads everything under the prefix: a file of another model or revision would be served too.
        strangers = sorted(set(existing) - {f.path for f in files} - {COMPLETION_OBJECT})
        if strangers:
            raise MirrorError(
                f"s3://{bucket}/{prefix} holds files that are not in {repo}@{commit} ({', '.join(strangers[:5])}):"
                " empty it or choose another prefix"
            )
        if COMPLETION_OBJECT in existing:
            finished = s3.get_object(Bucket=bucket, Key=prefix + COMPLETION_OBJECT)
            was = (
                f"{finished.get('Metadata', {}).get(MIRRORED_FROM, 'a model')}"
                f"@{finished['Body'].read().decode().strip()}"
            )
            if was != f"{repo}@{commit}":
                raise MirrorError(
                    f"s3://{bucket}/{prefix} is the finished mirror of {was}, which engines may load at any time: a"
                    f" finished mirror is never rewritten; mirror {repo}@{commit[:12]} into a prefix of its own and"
                    " switch MODEL_SOURCE to it (MODEL_NEXT_SOURCE, docs/weights.md)"
                )
            # The same revision: read it back, write nothing.
            started_verify = time.monotonic()
            print(
                f"s3://{bucket}/{prefix} is the finished mirror of {was}: reading every object back, writing nothing",
                flush=True,
            )
            try:
                _verify(s3, bucket, prefix, files)
            except MirrorError as error:
                raise MirrorError(
                    f"{error} (the finished mirror is left as it is: mirror into a prefix of its own)"
                ) from None
            print(f"verified {len(files)} files; {COMPLETION_OBJECT} = {commit} unchanged", flush=True)
            return summary(0.0, round(time.monotonic() - started_verify, 1))
        if served:
            raise MirrorError(
                f"s3://{bucket}/{prefix} is read by the deployed RayService while its GPU workers run (an engine may"
                " start at any time and load what is there): fill MODEL_NEXT_SOURCE and switch to it, or park first"
                " (`make park`)"
            )
        for number, file in enumerate(files, 1):
            kind, digest = file.expected()
            old = existing.get(file.path)
            if (
                old
                and old["Size"] == file.size
                and s3.head_object(Bucket=bucket, Key=prefix + file.path).get("Metadata", {}).get(kind) == digest
            ):
                print(f"[{number}/{len(files)}] {file.path}: already there", flush=True)
                continue
            print(f"[{number}/{len(files)}] {file.path} ({file.size / 1024**2:.1f} MiB)", flush=True)
            _copy(s3, endpoint, repo, commit, token, file, bucket, prefix + file.path)
        copied = time.monotonic()
        print(f"copied in {copied - started:.0f} s; reading every object back from S3", flush=True)
        _verify(s3, bucket, prefix, files)
        # The repository it came from, for `make lookup` (what vLLM skips of a known model is not in the files' index).
        s3.put_object(
            Bucket=bucket, Key=prefix + COMPLETION_OBJECT, Body=commit.encode(), Metadata={MIRRORED_FROM: repo}
        )
    except (BotoCoreError, ClientError) as error:
        raise MirrorError(f"s3://{bucket}/{prefix}: {error}") from None
    result = summary(round(copied - started, 1), round(time.monotonic() - copied, 1))
    print(f"verified {len(files)} files; wrote {COMPLETION_OBJECT} = {commit}", flush=True)
    return result


def main() -> int:
    token_file = os.environ.get("HF_TOKEN_FILE", "")
    token = ""
    if token_file and os.path.exists(token_file):
        with open(token_file) as handle:
            token = handle.read().strip()
    try:
        result = mirror(
            repo=os.environ["HF_REPO"],
            revision=os.environ.get("HF_REVISION", "main"),
            dest=os.environ["DEST_URI"],
            endpoint=os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/"),
            token=token,
            s3=boto3.client("s3"),
            served=os.environ.get("MIRROR_SERVED", "") == "1",
        )
    except MirrorError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1
    print(RESULT_MARKER + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
