"""`make docs-tables`: rewrite the generated parts of the docs from the code, between their markers
(`<!-- generated:NAME … -->` … `<!-- /generated:NAME -->`): the settings table (settings/loader.py), the
change table (settings/specs.py), the preflight checks (preflight/registry.py), the Helm charts
(stacks/addons/) and the quota the defaults need; and adds a new setting, with its default, to the configuration the
tests pin (tests/pinned_settings.json: a pinned value is never changed here). `--check` changes nothing and exits 1
when a page or the pins are stale (the tests run it)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

from preflight.registry import table_markdown as preflight_table_markdown
from settings import load_settings
from settings.ci_access import ci_settings_table_markdown
from settings.model_facts import BUILT_IN_MODELS
from settings.model_fit import fit_table_markdown
from settings.specs import SPECS, change_table_markdown, settings_table_markdown
from stacks.addons import chart_table_markdown
from stacks.addons.managed import managed_table_markdown

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PINS = REPO / "tests" / "pinned_settings.json"


def default_quota_markdown() -> str:
    """What the defaults ask of the account's quotas: written from the settings, never by hand."""
    s = load_settings({}, {})
    _, quota_name = s.gpu_node.on_demand_quota
    gpu = f'{s.gpu_node_count} × {s.gpu_node.name} = {s.gpu_node_count * s.gpu_node.vcpus} vCPU of "{quota_name}"'
    system = f"{s.system_node_count} × {s.system_node.name} = {s.system_node_count * s.system_node.vcpus} vCPU of Standard instances"
    return f"- GPU nodes: {gpu}\n- system nodes: {system}"


# page -> (marker name -> renderer)
GENERATED: dict[str, dict[str, Callable[[], str]]] = {
    "settings.md": {"settings": settings_table_markdown},
    "day2.md": {"changes": change_table_markdown},
    "deploy.md": {"preflight": preflight_table_markdown, "default-quota": default_quota_markdown},
    "upgrading.md": {"charts": lambda: chart_table_markdown(load_settings({}, {})), "managed-addons": lambda: managed_table_markdown(load_settings({}, {}))},
    "ci.md": {"ci-settings": ci_settings_table_markdown},
    "models.md": {"model-fit": lambda: fit_table_markdown(BUILT_IN_MODELS.values())},
}


def render(text: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- generated:{re.escape(name)}\b[^>]*-->\n)(.*?)(<!-- /generated:{re.escape(name)} -->)", re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"no generated:{name} markers")
    return pattern.sub(lambda m: m[1] + body + "\n" + m[3], text, count=1)


def stale_pages(docs: Path = DOCS, *, write: bool) -> list[str]:
    stale = []
    for page, parts in GENERATED.items():
        path = docs / page
        text = path.read_text()
        updated = text
        for name, renderer in parts.items():
            updated = render(updated, name, renderer())
        if updated != text:
            stale.append(page)
            if write:
                path.write_text(updated)
    return stale


def stale_pins(path: Path = PINS, *, write: bool) -> bool:
    """The tests' pinned configuration (tests/pinned.py) holds every setting: a new one is pinned at its default, a
    removed one dropped; a pinned value stays what the tests were written for."""
    pins: dict[str, str | None] = json.loads(path.read_text())
    updated = {spec.env: pins.get(spec.env, spec.default) for spec in SPECS}
    if updated == pins:
        return False
    if write:
        path.write_text(json.dumps(updated, indent=2) + "\n")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is stale, changing nothing")
    args = parser.parse_args(argv)
    stale = [f"docs/{page}" for page in stale_pages(write=not args.check)]
    stale += ["tests/pinned_settings.json"] if stale_pins(write=not args.check) else []
    for page in stale:
        print(f"{page}: {'stale: run `make docs-tables`' if args.check else 'generated parts updated'}", file=sys.stderr if args.check else sys.stdout)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
