"""The list of pages is written once (tools/docs_tables.py's PAGES): the site's navigation, the README's table and
docs/index.md's are generated from it, so none can leave a page out."""

from __future__ import annotations

import yaml

from tests.conftest import REPO
from tools.docs_tables import PAGES


def test_every_page_of_the_docs_is_listed_once() -> None:
    listed = [page for _, page, _ in PAGES]
    assert len(listed) == len(set(listed))
    assert sorted(["index.md", *listed]) == sorted(p.name for p in (REPO / "docs").glob("*.md")), "a page of docs/ is missing from PAGES"


def test_the_navigation_and_both_tables_hold_every_page() -> None:
    class _Loader(yaml.SafeLoader):  # mkdocs.yml names a Python function (the mermaid fence): read, not built
        pass

    _Loader.add_multi_constructor("tag:yaml.org,2002:python/name:", lambda loader, suffix, node: suffix)
    nav = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=_Loader)["nav"]
    assert nav == [{"Home": "index.md"}, *({title: page} for title, page, _ in PAGES)]
    readme, index = (REPO / "README.md").read_text(), (REPO / "docs" / "index.md").read_text()
    assert all(f"](docs/{page})" in readme and f"]({page})" in index for _, page, _ in PAGES)
