"""Where the weights come from: a Hugging Face repository (ORG/NAME) or an S3 prefix (s3://BUCKET/PREFIX).

An S3 source is the mirror Ray Serve LLM 2.58 downloads on each GPU node (`model_loading_config.model_source`,
a CloudMirrorConfig): every object under the prefix, with boto3's default credentials (the workers' EKS Pod
Identity) and, when the prefix holds a `hash` file, that text as the snapshot's name (`make mirror-model`
writes the Hub commit there). The bucket and prefix are checked here so that the IAM policy scoped to them
means exactly what it says: no IAM wildcard (`*`, `?`) or policy variable (`${...}`) can reach an ARN.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from settings.errors import SettingError

S3_SCHEME = "s3://"
# What `make mirror-model` writes last under the prefix (Ray names the snapshot after its text, the commit) and the
# metadata key on it that names the Hub repository (k8s_constructs/model_mirror_script.py keeps copies: it runs
# alone in the Job; a test holds them equal).
COMPLETION_OBJECT = "hash"
MIRRORED_FROM = "hf-repo"
HUB_REPOSITORY = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# S3's general purpose bucket naming rules (docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_BUCKET_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
# S3's "safe" key characters without "*" (IAM's wildcard), one or more per segment; "." and ".." segments refused.
_PREFIX_SEGMENT = re.compile(r"[A-Za-z0-9!_.'()-]+")
BUCKET_ALLOWED = (
    "3-63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit (S3's bucket naming rules)"
)
PREFIX_ALLOWED = (
    "a key prefix of at most 768 bytes, segments of letters, digits and !_.'()- separated by '/' (no '*', '?', '$' or"
    " empty segment)"
)
# A key ID is a UUID, or mrk- and 32 hex digits for a multi-Region key.
KMS_KEY_ARN = re.compile(
    r"arn:aws(-[a-z]+)*:kms:[a-z]{2}(-[a-z]+)+-\d:\d{12}:key/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|mrk-[0-9a-f]{32})"
)
# S3 keys are at most 1024 bytes; the prefix leaves room for the model's file names under it.
MAX_PREFIX_BYTES = 768


@dataclass(frozen=True)
class S3Prefix:
    """An S3 model source: the bucket and the key prefix without a trailing '/'."""

    bucket: str
    prefix: str

    @property
    def uri(self) -> str:
        return f"{S3_SCHEME}{self.bucket}/{self.prefix}"

    @property
    def key_prefix(self) -> str:
        """The prefix as Ray lists it (with the trailing '/'): the objects of the model and nothing beside it."""
        return f"{self.prefix}/"

    def object_arn(self, partition: str) -> str:
        """Every object under the prefix (and no neighbour such as PREFIX-old/)."""
        return f"arn:{partition}:s3:::{self.bucket}/{self.key_prefix}*"

    def bucket_arn(self, partition: str) -> str:
        return f"arn:{partition}:s3:::{self.bucket}"


def _bucket_problem(bucket: str) -> str | None:
    if not _BUCKET.fullmatch(bucket) or ".." in bucket or ".-" in bucket or "-." in bucket:
        return BUCKET_ALLOWED
    try:
        ipaddress.IPv4Address(bucket)
        return "a bucket name that is not an IP address"
    except ValueError:
        pass
    if bucket.startswith(_BUCKET_RESERVED_PREFIXES) or bucket.endswith(_BUCKET_RESERVED_SUFFIXES):
        return (
            f"{BUCKET_ALLOWED}, not starting with {', '.join(_BUCKET_RESERVED_PREFIXES)} nor ending with"
            f" {', '.join(_BUCKET_RESERVED_SUFFIXES)}"
        )
    return None


def parse_s3_prefix(env: str, value: str, grant: str = "the workers may read exactly that prefix") -> S3Prefix:
    """s3://BUCKET/PREFIX (one trailing '/' allowed) as an S3Prefix, or a SettingError naming what is wrong (and
    `grant`, what the prefix is for)."""
    rest = value[len(S3_SCHEME) :]
    bucket, _, prefix = rest.partition("/")
    problem = _bucket_problem(bucket)
    if problem:
        raise SettingError(env, value, f"s3://BUCKET/PREFIX with BUCKET {problem}")
    prefix = prefix.removesuffix("/")
    segments = prefix.split("/") if prefix else []
    if (
        not segments
        or len(prefix.encode()) > MAX_PREFIX_BYTES
        or any(not _PREFIX_SEGMENT.fullmatch(s) or s in (".", "..") for s in segments)
    ):
        raise SettingError(env, value, f"s3://BUCKET/PREFIX with PREFIX {PREFIX_ALLOWED}: {grant}")
    return S3Prefix(bucket=bucket, prefix=prefix)


def s3_source(model_source: str) -> S3Prefix | None:
    """The S3 prefix of an s3:// MODEL_SOURCE (already checked by the loader), None for a Hub repository."""
    if not model_source.startswith(S3_SCHEME):
        return None
    return parse_s3_prefix("MODEL_SOURCE", model_source)


def parse_model_source(value: str) -> str:
    """MODEL_SOURCE as the loader keeps it: a Hub repository as given, an S3 prefix normalised (no trailing '/')."""
    if value.startswith(S3_SCHEME):
        return parse_s3_prefix("MODEL_SOURCE", value).uri
    if not HUB_REPOSITORY.fullmatch(value):
        raise SettingError(
            "MODEL_SOURCE",
            value,
            "a Hugging Face repository ORG/NAME, or s3://BUCKET/PREFIX (a copy made by `make mirror-model`)",
        )
    return value


def parse_next_source(env: str, value: str, model_source: str) -> str:
    """MODEL_NEXT_SOURCE: the prefix `make mirror-model` fills next, beside the served MODEL_SOURCE; "" = none.

    In MODEL_SOURCE's bucket: MODEL_SOURCE_KMS_KEY_ARN is that bucket's key and the preflight checks that bucket, so
    switching to the new prefix changes MODEL_SOURCE alone. Neither prefix may hold the other: Ray downloads everything
    under MODEL_SOURCE, and a grant on one prefix would reach into the other."""
    if not value:
        return ""
    served = s3_source(model_source)
    if served is None:
        raise SettingError(env, value, "empty unless MODEL_SOURCE is s3://BUCKET/PREFIX (the next prefix beside it)")
    if not value.startswith(S3_SCHEME):
        raise SettingError(env, value, f"s3://{served.bucket}/PREFIX, a prefix of its own for the next revision")
    following = parse_s3_prefix(env, value, "the mirror Job may write exactly that prefix")
    problem = ""
    if following.bucket != served.bucket:
        problem = f"a prefix in MODEL_SOURCE's bucket, s3://{served.bucket}/PREFIX (one bucket, one KMS key)"
    elif following == served:
        problem = f"a prefix other than MODEL_SOURCE's ({served.uri}): the served prefix is never rewritten"
    elif following.key_prefix.startswith(served.key_prefix) or served.key_prefix.startswith(following.key_prefix):
        problem = f"a prefix beside MODEL_SOURCE's ({served.uri}), neither inside the other: Ray downloads all under it"
    if problem:
        raise SettingError(env, value, problem)
    return following.uri


def parse_kms_key_arn(env: str, value: str, model_source: str) -> str:
    """The KMS key of the model bucket (SSE-KMS): a key ARN, only with an s3:// source; empty = SSE-S3 or none."""
    if not value:
        return ""
    if not model_source.startswith(S3_SCHEME):
        raise SettingError(env, value, "empty unless MODEL_SOURCE is s3://BUCKET/PREFIX (the key of that bucket)")
    if not KMS_KEY_ARN.fullmatch(value):
        raise SettingError(
            env, value, "a KMS key ARN, arn:aws:kms:REGION:ACCOUNT:key/KEY-ID (not an alias: IAM matches the key's ARN)"
        )
    return value


MODEL_ID_PATTERN = re.compile(r"(?=.{1,128}$)[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")
MODEL_ID_ALLOWED = (
    "empty (MODEL_SOURCE's last path segment, lower-cased), or letters, digits, '.', '_', '-' and '/' between"
    " them (ORG/NAME as vLLM users send it), at most 128 characters"
)


def parse_model_id(value: str, model_source: str) -> str:
    """MODEL_ID, the name clients send: as given, or MODEL_SOURCE's last path segment lower-cased (Qwen/Qwen3.5-9B and
    s3://bucket/models/Qwen3.5-9B both serve `qwen3.5-9b`)."""
    value = value.strip()
    if not value:
        derived = model_source.rstrip("/").rsplit("/", 1)[-1].lower()
        if not MODEL_ID_PATTERN.fullmatch(derived):
            raise SettingError(
                "MODEL_ID", "", f"set, since MODEL_SOURCE's last segment {derived!r} is not a name: {MODEL_ID_ALLOWED}"
            )
        return derived
    if not MODEL_ID_PATTERN.fullmatch(value):
        raise SettingError("MODEL_ID", value, MODEL_ID_ALLOWED)
    return value
