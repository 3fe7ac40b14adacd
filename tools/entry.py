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


def one_line_errors(main: Main) -> Main:
    @functools.wraps(main)
    def run(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except SettingError as error:
            print(f"error: {error}", file=sys.stderr)
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
