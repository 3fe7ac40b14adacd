"""`make settings-table`: rewrite the settings table in README.md from the code (settings/loader.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from settings.loader import settings_table_markdown

README = Path(__file__).resolve().parent.parent / "README.md"
TABLE_START = "| Environment variable | Context key (`-c`) |"


def main() -> int:
    text = README.read_text()
    start = text.index(TABLE_START)
    end = text.index("\n\n", start)
    updated = text[:start] + settings_table_markdown() + text[end:]
    if updated != text:
        README.write_text(updated)
        print("README.md: settings table updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
