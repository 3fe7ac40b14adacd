"""What changing each setting does to a deployed stack: declared with each setting (settings/specs.py);
this module keeps the names the preflight, `make review` and the tests read."""

from __future__ import annotations

from settings.specs import CHANGE_EFFECTS, IN_PLACE, NEW, RECREATE, REFUSED, REPLACEMENT, ROLLING, change_table_markdown

__all__ = ["CHANGE_EFFECTS", "IN_PLACE", "NEW", "RECREATE", "REFUSED", "REPLACEMENT", "ROLLING", "change_table_markdown"]
