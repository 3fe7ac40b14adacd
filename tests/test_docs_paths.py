"""Every repository path the README and the docs name exists: a file or folder in backticks (`settings/versions.py`,
`tools/local_check/`, `k8s_constructs/serve_config.py`, in a code block too), a module in backticks
(`python -m tools.maintainer.write_dist`) and the target of a relative link.

Only text that names the repository is checked, so that prose in backticks never fires: a path's first folder must be
one of the repository's own top-level folders (not one that .gitignore names: build output such as cdk.out/ or
local-check/), and a dotted name must start with one of its Python packages. Placeholders (`docs/upgrading/X.Y.md`,
`stacks/addons/<chart>.py`) must match at least one path. The changelog (and docs/upgrading/'s notes, which are not
docs/*.md) are left out: they name modules since renamed or removed (`tools.review`, `settings/model.py`) on purpose.

Reads files inside the repository only."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

from tests.conftest import REPO

# What records the past, on purpose: a renamed module keeps its old name there.
HISTORY = ("docs/changelog.md",)


def documents() -> list[Path]:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return [page for page in pages if page.relative_to(REPO).as_posix() not in HISTORY]


def top_level_folders() -> frozenset[str]:
    """The repository's own top-level folders: on disk, not .git and not ignored (.venv, node_modules, cdk.out*)."""
    ignored = [
        line.strip().strip("/")
        for line in (REPO / ".gitignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return frozenset(
        p.name
        for p in REPO.iterdir()
        if p.is_dir() and p.name != ".git" and not any(fnmatch.fnmatch(p.name, pattern) for pattern in ignored)
    )


TOP = top_level_folders()
PACKAGES = frozenset(name for name in TOP if (REPO / name / "__init__.py").is_file())

FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.DOTALL | re.MULTILINE)
SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# A path: a segment, then at least one /segment (a trailing / names a folder). Placeholders (<name>, *, …) allowed.
PATH = re.compile(r"(?<![\w./:<>*…${}-])\.?[\w<>*…-][\w.<>*…${}-]*(?:/[\w.<>*…${}-]*)+")
DOTTED = re.compile(r"(?<![\w./-])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
# Placeholders: <name>, ${var}, $var, …, and words in capitals (X.Y, CLUSTER_NAME, vllm_X_Y_*).
PLACEHOLDER = re.compile(r"<[^>/]+>|\$\{[^}]*\}|\$\w+|…|\.\.\.|(?<![A-Za-z0-9])[A-Z][A-Z0-9]*(?![A-Za-z0-9])")
# Line breaks in a mermaid label (`settings/<br/>load_settings`) are no part of a path.
LINE_BREAK = re.compile(r"<br\s*/?>")


def split_code(text: str) -> tuple[list[str], str]:
    """The code of a page (fenced blocks, then inline spans) and its prose (what is left)."""
    fenced = [m.group(2) for m in FENCE.finditer(text)]
    prose = FENCE.sub("", text)
    spans = [m.group(2) for m in SPAN.finditer(prose)]
    return fenced + spans, SPAN.sub("", prose)


def named_paths(code: str) -> list[str]:
    """The repository paths a piece of code names: its first folder one of TOP."""
    found = []
    for m in PATH.finditer(LINE_BREAK.sub(" ", code)):
        path = m.group(0).rstrip(".")
        if path.split("/", 1)[0] in TOP:
            found.append(path)
    return found


def named_modules(code: str) -> list[str]:
    """The dotted module names a piece of code names: its first part one of the repository's packages."""
    return [m.group(0) for m in DOTTED.finditer(code) if m.group(0).split(".", 1)[0] in PACKAGES]


def path_exists(path: str) -> bool:
    """A file or folder (a trailing / must be a folder); `module` or `module.attribute` for module.py; a placeholder
    matching at least one path."""
    target = REPO / path
    if path.endswith("/"):
        return target.is_dir()
    if target.exists() or target.with_name(target.name + ".py").is_file():
        return True
    stem, dot, attribute = path.rpartition(".")
    if dot and "." not in stem.rsplit("/", 1)[-1] and has_attribute(REPO / (stem + ".py"), attribute):
        return True  # preflight/context.setting: a function of preflight/context.py
    pattern = PLACEHOLDER.sub("*", path)
    return "*" in pattern and any(REPO.glob(pattern))


def has_attribute(module: Path, name: str) -> bool:
    """`name` is defined in the module file: a def, a class or an assignment."""
    if not (name.isidentifier() and module.is_file()):
        return False
    definition = rf"^\s*(?:async\s+def|def|class)\s+{name}\b|^\s*{name}\s*(?::[^=\n]*)?="
    return re.search(definition, module.read_text(), re.MULTILINE) is not None


def module_exists(name: str) -> bool:
    """A module or package; or a name defined in a module file (tools.maintainer.docs_tables.PAGES), never a missing
    module of a package (tools.maintainer.no_such_tool)."""
    parts = name.split(".")
    base = REPO.joinpath(*parts)
    if base.with_name(base.name + ".py").is_file() or (base / "__init__.py").is_file():
        return True
    parent = REPO.joinpath(*parts[:-1])
    return len(parts) >= 2 and has_attribute(parent.with_name(parent.name + ".py"), parts[-1])


def link_exists(page: Path, target: str) -> bool:
    """A relative link's file or folder, inside the repository (an anchor is mkdocs's to check)."""
    resolved = (page.parent / target.split("#", 1)[0]).resolve()
    return resolved.is_relative_to(REPO) and resolved.exists()


def missing(page: Path) -> list[str]:
    code, prose = split_code(page.read_text())
    bad = [f"`{p}`" for piece in code for p in named_paths(piece) if not path_exists(p)]
    bad += [f"`{m}` (module)" for piece in code for m in named_modules(piece) if not module_exists(m)]
    for m in LINK.finditer(prose):
        target = m.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL, mailto:, or an anchor of the page itself
        if not link_exists(page, target):
            bad.append(f"]({target})")
    return bad


@pytest.mark.parametrize("page", documents(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_repository_path_a_page_names_exists(page: Path) -> None:
    bad = missing(page)
    assert not bad, f"{page.relative_to(REPO)} names what the repository does not have: {', '.join(bad)}"


def test_the_check_sees_paths_modules_and_links_and_not_prose() -> None:
    code, prose = split_code(
        "See `settings/versions.py`, `tools/local_check/` and `make destroy STACKS=a-b`, `s3://BUCKET/PREFIX`,"
        " `Qwen/Qwen3.5-9B`, `nvidia.com/gpu`, `vllm/engine/arg_utils.py`, [page](deploy.md).\n"
        "```\npython -m tools.maintainer.write_dist   # and preflight/changes.plan()\n```\n"
    )
    assert [p for piece in code for p in named_paths(piece)] == [
        "preflight/changes.plan",
        "settings/versions.py",
        "tools/local_check/",
    ]
    assert [m for piece in code for m in named_modules(piece)] == ["tools.maintainer.write_dist"]
    assert LINK.findall(prose) == ["deploy.md"]
    assert path_exists("settings/versions.py") and path_exists("tools/local_check/")
    assert path_exists("docs/upgrading/X.Y.md") and path_exists("preflight/context.setting")
    assert path_exists("settings/data/vllm_X_Y_*") and not path_exists("settings/data/vllm_X_Y_nothing")
    assert not path_exists("preflight/changes.plan") and not path_exists("settings/no_such_module.py")
    assert not path_exists("docs/upgrading.md/")
    assert module_exists("tools.maintainer.write_dist") and module_exists("tools.maintainer.docs_tables.PAGES")
    assert not module_exists("tools.review") and not module_exists("tools.maintainer.vendor_vlm")
    assert not path_exists("preflight/context.no_such_function")
    # A link out of the repository fails without being looked at (is_relative_to comes first).
    assert not link_exists(REPO / "docs" / "index.md", "/".join(("..", "..", "outside.md")))
