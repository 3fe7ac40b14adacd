"""`make settings-table`: rewrite the README's generated tables from the code: the settings table
(settings/loader.py) and "Changing a deployed stack" (settings/changes.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from settings.changes import change_table_markdown
from settings.loader import settings_table_markdown

README = Path(__file__).resolve().parent.parent / "README.md"
TABLES: tuple[tuple[str, Callable[[], str]], ...] = (
    ("| Environment variable | Context key (`-c`) |", settings_table_markdown),
    ("| Setting | Effect on a deployed stack |", change_table_markdown),
)


def main() -> int:
    text = README.read_text()
    updated = text
    for first_row, render in TABLES:
        start = updated.index(first_row)
        end = updated.index("\n\n", start)
        updated = updated[:start] + render() + updated[end:]
    if updated != text:
        README.write_text(updated)
        print("README.md: generated tables updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
