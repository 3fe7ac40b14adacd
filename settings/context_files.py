"""The context the CDK CLI would hand the app, for tools that run outside it (look-up, preflight, dist)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CDK_JSON = REPO / "cdk.json"
CDK_CONTEXT_JSON = REPO / "cdk.context.json"
LOOKUP_PREFIX = "ray-llm:"  # every key `make lookup` caches starts with it


def read_project_context() -> dict[str, Any]:
    """cdk.json's context, then cdk.context.json (the look-up cache) over it, as the CLI merges them."""
    context: dict[str, Any] = dict(json.loads(CDK_JSON.read_text()).get("context", {}))
    if CDK_CONTEXT_JSON.exists():
        context.update(json.loads(CDK_CONTEXT_JSON.read_text()))
    return context


def write_cached_lookups(entries: dict[str, Any], path: Path = CDK_CONTEXT_JSON) -> None:
    """Merge look-up answers into cdk.context.json, sorted, so the file diffs cleanly in review."""
    current: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    current.update(entries)
    path.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
