"""What every make-target tool does first: the settings, read as the synth reads them, and a bad one as
one line and exit 2 (never a traceback)."""

from __future__ import annotations

import functools
import os
import sys
from typing import Protocol

from settings import SettingError, Settings, load_settings
from settings.context_files import read_project_context


class Main(Protocol):
    def __call__(self, argv: list[str] | None = None) -> int: ...


def project_settings() -> Settings:
    """The settings of this checkout: environment, then cdk.json and the cached look-ups."""
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
