"""What people read is written once: the list of pages (tools/maintainer/docs_tables.py's PAGES) writes the site's
navigation, the README's table and docs/index.md's; every version of the changelog has an upgrade note, and the
newest is pyproject.toml's version."""

from __future__ import annotations

import re
import tomllib

import yaml

from tests.conftest import REPO
from tools.maintainer.docs_tables import PAGES, upgrade_notes


def test_every_page_of_the_docs_is_listed_once() -> None:
    listed = [page for _, page, _ in PAGES]
    assert len(listed) == len(set(listed))
    assert sorted(["index.md", *listed]) == sorted(p.name for p in (REPO / "docs").glob("*.md")), (
        "a page of docs/ is missing from PAGES"
    )


def _nav() -> list[object]:
    class _Loader(yaml.SafeLoader):  # mkdocs.yml names a Python function (the mermaid fence): read, not built
        pass

    _Loader.add_multi_constructor("tag:yaml.org,2002:python/name:", lambda loader, suffix, node: suffix)
    nav: list[object] = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=_Loader)["nav"]
    return nav


def test_the_navigation_and_both_tables_hold_every_page() -> None:
    notes = [{f"To {version}": page} for version, page in upgrade_notes()]
    expected = [{title: page if page != "upgrading.md" else [page, *notes]} for title, page, _ in PAGES]
    assert _nav() == [{"Home": "index.md"}, *expected]
    readme, index = (REPO / "README.md").read_text(), (REPO / "docs" / "index.md").read_text()
    assert all(f"](docs/{page})" in readme and f"]({page})" in index for _, page, _ in PAGES)


def test_every_version_has_its_upgrade_note_and_the_newest_is_the_projects() -> None:
    changelog = (REPO / "docs" / "changelog.md").read_text()
    versions = re.findall(r"^## (\d+)\.(\d+)\.(\d+)\b", changelog, re.MULTILINE)
    assert versions == sorted(versions, key=lambda v: tuple(map(int, v)), reverse=True) and len(versions) >= 2
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert re.match(r"(\d+)\.(\d+)\.(\d+)", project).groups() == versions[0]  # type: ignore[union-attr]
    # The first version has nothing to upgrade from; each later one its note, linked from its section.
    assert [v for v, _ in upgrade_notes()] == [f"{major}.{minor}" for major, minor, _ in versions[:-1]]
    for major, minor, _ in versions[:-1]:
        assert f"(upgrading/{major}.{minor}.md)" in changelog, f"the {major}.{minor} section links its upgrade note"
