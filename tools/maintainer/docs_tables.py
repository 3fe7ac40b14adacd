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
from settings.context_files import REPO
from settings.model_facts import BUILT_IN_MODELS
from settings.model_fit import fit_table_markdown
from settings.specs import SPECS, change_table_markdown, settings_table_markdown
from stacks.addons import chart_table_markdown
from stacks.addons.managed import managed_table_markdown

DOCS = REPO / "docs"
PINS = REPO / "tests" / "pinned_settings.json"


def default_quota_markdown() -> str:
    """What the defaults ask of the account's quotas: written from the settings, never by hand."""
    s = load_settings({}, {})
    _, quota_name = s.gpu_node.on_demand_quota
    gpu = f'{s.gpu_node_count} × {s.gpu_node.name} = {s.gpu_node_count * s.gpu_node.vcpus} vCPU of "{quota_name}"'
    system = (
        f"{s.system_node_count} × {s.system_node.name} = {s.system_node_count * s.system_node.vcpus} vCPU of Standard"
        " instances"
    )
    return f"- GPU nodes: {gpu}\n- system nodes: {system}"


# The pages people read, in reading order: (title, page under docs/, what it holds). The one list of them: the
# site's navigation (mkdocs.yml), the README's table and docs/index.md's are written from it.
PAGES: tuple[tuple[str, str, str], ...] = (
    (
        "Deploying",
        "deploy.md",
        "prerequisites, the preflight checks, the stacks, how long a deploy takes, GPU capacity, teardown",
    ),
    ("Verify and benchmark", "verify.md", "the endpoint, `make verify`, `make bench-serving`, the Ray dashboard, EFA"),
    (
        "An endpoint applications can call",
        "endpoint.md",
        "a load balancer with TLS and API keys (`SERVE_EXPOSURE`), `make endpoint`, `make api-key`",
    ),
    (
        "What the endpoint serves",
        "serving-api.md",
        "the OpenAI API field by field through PD, tool calls and reasoning, and what PD refuses on this image",
    ),
    ("Changing a deployed stack", "day2.md", "what each setting does to a deployed stack, and the procedures"),
    ("Settings", "settings.md", "every setting, its default and what is allowed"),
    ("The model", "models.md", "the fit and serveability checks, and what fits each GPU type"),
    (
        "The serving config on one GPU host",
        "local-check.md",
        "`make local-check`: the synthesized serve config run for real before a deploy, and its results",
    ),
    (
        "Weights from S3",
        "weights.md",
        "`MODEL_SOURCE=s3://…`, `make mirror-model`, least-privilege reads, load times and NAT cost",
    ),
    (
        "Elastic capacity",
        "scaling.md",
        "`PREFILL_MAX_REPLICAS`/`DECODE_MAX_REPLICAS`: how a request becomes a node, the times, what bounds the bill",
    ),
    (
        "Surviving the Ray head",
        "fault-tolerance.md",
        "`GCS_FAULT_TOLERANCE=redis`: the GCS in ElastiCache, two system nodes, what one still risks, cost",
    ),
    ("Observability", "observability.md", "`OBSERVABILITY=on`: metrics, the dashboard, alarms"),
    ("Security", "security.md", "who can reach what, what runs privileged, where secrets live"),
    (
        "Architecture",
        "architecture.md",
        "the parts, the data flow, the topology, design choices, the repository layout",
    ),
    ("CI", "ci.md", "the GitHub workflows, the CI access stack, the scoped execution policies"),
    ("Troubleshooting", "troubleshooting.md", "when a deploy or a destroy fails"),
    (
        "Upgrading",
        "upgrading.md",
        "Kubernetes, KubeRay, a new Ray LLM image, earlier versions of this project, what is pinned",
    ),
    ("Tests", "testing.md", "what `make test` and `make checkov` check"),
    ("Contributing", "contributing.md", "the recipes: a setting, a chart, a preflight check, a KubeRay upgrade"),
    ("Changelog", "changelog.md", "what changed, version by version"),
)


def pages_table_markdown(prefix: str) -> str:
    """The table of pages, each linked as `prefix` + page (README.md links into docs/)."""
    rows = ["| Page | What it holds |", "|---|---|"] + [
        f"| [{title}]({prefix}{page}) | {holds} |" for title, page, holds in PAGES
    ]
    return "\n".join(rows)


def upgrade_notes() -> list[tuple[str, str]]:
    """(version, page under docs/) of each upgrade note (docs/upgrading/X.Y.md), newest first."""
    notes = sorted(DOCS.glob("upgrading/*.md"), key=lambda p: tuple(int(n) for n in p.stem.split(".")), reverse=True)
    return [(p.stem, f"upgrading/{p.name}") for p in notes]


def upgrade_notes_markdown() -> str:
    return "\n".join(f"- [Upgrading to {version}]({page})" for version, page in upgrade_notes())


def nav_yaml() -> str:
    """mkdocs.yml's navigation: Home, then PAGES; Upgrading a section with its notes."""
    lines = ["nav:", "  - Home: index.md"]
    for title, page, _ in PAGES:
        if page == "upgrading.md":
            lines += [
                f"  - {title}:",
                f"      - {page}",
                *(f"      - To {version}: {note}" for version, note in upgrade_notes()),
            ]
        else:
            lines.append(f"  - {title}: {page}")
    return "\n".join(lines)


def ci_variables_python() -> str:
    """The export script's tuple of the settings a repository variable may set (standard library only: it runs
    before the project is installed, so it cannot import the specs)."""
    return "SETTINGS = (\n" + "".join(f'    "{spec.env}",\n' for spec in SPECS if spec.ci_variable) + ")"


def ci_variables_markdown() -> str:
    return ", ".join(f"`{spec.env}`" for spec in SPECS if spec.ci_variable)


# file under the repository -> (marker name -> renderer)
GENERATED: dict[str, dict[str, Callable[[], str]]] = {
    "README.md": {"pages": lambda: pages_table_markdown("docs/")},
    "mkdocs.yml": {"nav": nav_yaml},
    "docs/index.md": {"pages": lambda: pages_table_markdown("")},
    "docs/settings.md": {"settings": settings_table_markdown},
    "docs/day2.md": {"changes": change_table_markdown},
    "docs/deploy.md": {"preflight": preflight_table_markdown, "default-quota": default_quota_markdown},
    "docs/upgrading.md": {
        "upgrade-notes": upgrade_notes_markdown,
        "charts": lambda: chart_table_markdown(load_settings({}, {})),
        "managed-addons": lambda: managed_table_markdown(load_settings({}, {})),
    },
    "docs/ci.md": {"ci-settings": ci_settings_table_markdown, "ci-variables": ci_variables_markdown},
    ".github/actions/settings-from-variables/export_settings.py": {"ci-variables": ci_variables_python},
    "docs/models.md": {"model-fit": lambda: fit_table_markdown(BUILT_IN_MODELS.values())},
}


def render(text: str, name: str, body: str) -> str:
    """Replace what lies between the markers `<!-- generated:NAME … -->` and `<!-- /generated:NAME -->` (in YAML and
    Python: the comment lines `# generated:NAME …` and `# /generated:NAME`), indented as the opening marker."""
    n = re.escape(name)
    pattern = re.compile(
        rf"^([ \t]*)((?:<!-- generated:{n}\b[^>]*-->|# generated:{n}\b[^\n]*)\n)(.*?)^[ \t]*(<!-- /generated:{n} -->|#"
        rf" /generated:{n}$)",
        re.DOTALL | re.MULTILINE,
    )
    if not pattern.search(text):
        raise ValueError(f"no generated:{name} markers")

    def replace(m: re.Match[str]) -> str:
        indent = m[1]
        lines = "".join(f"{indent}{line}\n" if line else "\n" for line in body.split("\n"))
        return indent + m[2] + lines + indent + m[4]

    return pattern.sub(replace, text, count=1)


def stale_pages(root: Path = REPO, *, write: bool) -> list[str]:
    stale = []
    for page, parts in GENERATED.items():
        path = root / page
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
    stale = stale_pages(write=not args.check)
    stale += ["tests/pinned_settings.json"] if stale_pins(write=not args.check) else []
    for page in stale:
        print(
            f"{page}: {'stale: run `make docs-tables`' if args.check else 'generated parts updated'}",
            file=sys.stderr if args.check else sys.stdout,
        )
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
