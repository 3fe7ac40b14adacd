"""What every make-target tool does first: the settings, read as the synth reads them, and a bad one as
one line and exit 2 (never a traceback)."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Protocol, TypeVar

from preflight.cluster_access import ClusterUnreachable, Kubectl, cluster_kubectl
from settings import SettingError, Settings, load_settings
from settings.context_files import read_project_context
from settings.loader import misspelt_settings


class Main(Protocol):
    def __call__(self, argv: list[str] | None = None) -> int: ...


def project_settings() -> Settings:
    """The settings of this checkout: environment, then cdk.json and the cached look-ups."""
    for warning in misspelt_settings(os.environ):
        print(warning, file=sys.stderr)
    return load_settings(os.environ, read_project_context())


# What AWS answers when the caller has no credentials, or ones it no longer takes.
CREDENTIAL_ERROR_CODES = frozenset(
    {"ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "UnrecognizedClientException",
     "InvalidAccessKeyId", "SignatureDoesNotMatch", "AuthFailure"}
)  # fmt: skip
CREDENTIALS_HOWTO = "set AWS_PROFILE, run `aws sso login` or `aws configure`, then `aws sts get-caller-identity`"


def credentials_problem(error: BaseException) -> str:
    """One line for an AWS error that means "no usable credentials", else "" (botocore, imported only if loaded)."""
    exceptions = sys.modules.get("botocore.exceptions")
    if exceptions is None:
        return ""
    if isinstance(error, exceptions.NoCredentialsError | exceptions.PartialCredentialsError):
        return f"no AWS credentials ({error}): {CREDENTIALS_HOWTO}"
    if isinstance(error, exceptions.NoRegionError):
        return "no AWS Region: set REGION (or AWS_REGION)"
    if isinstance(error, exceptions.TokenRetrievalError | exceptions.SSOError):
        return f"the AWS SSO session has ended ({error}): run `aws sso login`"
    if isinstance(error, exceptions.ProfileNotFound):
        return f"{error}: set AWS_PROFILE to a profile of ~/.aws/config (`aws configure list-profiles`)"
    if not isinstance(error, exceptions.ClientError):
        return ""
    code = (error.response or {}).get("Error", {}).get("Code", "")
    if code in CREDENTIAL_ERROR_CODES:
        return f"AWS refused the credentials ({code}): {CREDENTIALS_HOWTO}"
    return ""


def one_line_errors(main: Main) -> Main:
    """A bad setting, or AWS credentials missing or refused, as one line (exit 2) instead of a traceback."""

    @functools.wraps(main)
    def run(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except SettingError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        except Exception as error:
            problem = credentials_problem(error)
            if not problem:
                raise
            print(f"error: {problem}", file=sys.stderr)
            return 2

    return run


T = TypeVar("T")


def on_cluster(settings: Settings, work: Callable[[Kubectl], T], *, timeout: int = 900) -> tuple[T | None, int]:
    """`work` with kubectl bound to this cluster: (its result, 0), or a cluster that cannot be reached (exit 2) or a
    RuntimeError of `work` (exit 1) as one line on stderr and (None, the exit code)."""
    try:
        with cluster_kubectl(settings.region, settings.cluster_name, timeout=timeout) as kubectl:
            return work(kubectl), 0
    except ClusterUnreachable as error:
        print(f"error: cannot reach cluster {settings.cluster_name} in {settings.region}: {error}", file=sys.stderr)
        return None, 2
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return None, 1
