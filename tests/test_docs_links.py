"""Every `docs/<page>.md#<section>` a module cites names a heading of that page,
so a renamed section breaks the build, not the reader's link."""

from __future__ import annotations

import re
import tomllib

from tests.support.processes import ROOT

LINK = re.compile(r"docs/([\w-]+\.md)#([\w-]+)")


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
