"""The floors of the house: settings/ at the bottom, k8s_constructs/ and preflight/ above it, stacks/ above
those, app.py, ci_app.py and tools/ on top. No import points back up (read from each module's source), and
no hand-written module grows past ~400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

# package -> the project packages it may import
ALLOWED = {
    "settings": {"settings"},
    "k8s_constructs": {"settings", "k8s_constructs", "imports"},
    "preflight": {"settings", "preflight"},
    "stacks": {"settings", "k8s_constructs", "preflight", "stacks", "imports"},
    "tools": {"settings", "k8s_constructs", "preflight", "stacks", "tools", "imports"},
}
PROJECT = {*ALLOWED, "imports", "tests", "app", "ci_app"}
LONGEST = 420  # lines: "about 400"


def _imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names & PROJECT


def test_no_import_points_back_up() -> None:
    wrong = {}
    for package, allowed in ALLOWED.items():
        for path in sorted((REPO / package).rglob("*.py")):
            bad = _imported(path) - allowed
            if bad:
                wrong[str(path.relative_to(REPO))] = sorted(bad)
    assert wrong == {}


def test_the_check_sees_a_wrong_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from stacks.application import build_stacks\nimport tools.entry\n")
    assert _imported(module) - ALLOWED["settings"] == {"stacks", "tools"}


def test_no_hand_written_module_is_over_about_400_lines() -> None:
    long = {
        str(p.relative_to(REPO)): n
        for p in sorted(REPO.rglob("*.py"))
        if not p.relative_to(REPO).parts[0].startswith((".", "imports", "node_modules", "site"))
        and (n := len(p.read_text().splitlines())) > LONGEST
    }
    assert long == {}, "split by what they do"
