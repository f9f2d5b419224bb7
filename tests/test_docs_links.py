"""Every `docs/<page>.md#<section>` a module cites, and every link to a section
between the README and the docs, names a heading of that page, so a renamed
section breaks the build, not the reader's link."""

from __future__ import annotations

import re
import tomllib

from tests.support.processes import ROOT

LINK = re.compile(r"docs/([\w-]+\.md)#([\w-]+)")
MARKDOWN_LINK = re.compile(r"\]\(([^)#\s]*)#([^)\s]+)\)")


def anchors(page: str) -> set[str]:
    """The page's headings as GitHub names their anchors."""
    headings = re.findall(r"^#+ (.+)$", (ROOT / "docs" / page).read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).strip().replace(" ", "-") for h in headings}


def cited() -> set[tuple[str, str, str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    folders = [*config["tool"]["importlinter"]["root_packages"], "tests", "bench"]
    return {
        (str(path.relative_to(ROOT)), page, anchor)
        for folder in folders
        for path in (ROOT / folder).rglob("*.py")
        for page, anchor in LINK.findall(path.read_text())
    }


def test_modules_link_to_the_runtime_page():
    linking = {path for path, page, _ in cited() if page == "chat-runtime.md"}
    assert {"sessions_app/runner.py", "sessions_app/turns.py", "agent/prompt.py"} <= linking


def test_every_cited_section_exists():
    missing = [
        (path, f"docs/{page}#{anchor}")
        for path, page, anchor in sorted(cited())
        if anchor not in anchors(page)
    ]
    assert missing == []


def test_every_linked_section_exists():
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    missing = []
    for source in pages:
        for target, anchor in MARKDOWN_LINK.findall(source.read_text()):
            page = (source.parent / target if target else source).resolve()
            if anchor not in anchors(str(page.relative_to(ROOT / "docs"))):
                missing.append((str(source.relative_to(ROOT)), f"{target}#{anchor}"))
    assert missing == []
