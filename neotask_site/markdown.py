"""Markdown from the model or the user, rendered to HTML that is safe to show.

Two layers: markdown-it escapes raw HTML in the source, and nh3 then keeps
only an allow-list of tags and attributes (no scripts, no event handlers, no
javascript: links), adding rel="noopener noreferrer" to every link.

Bounded: a text that could take markdown-it long is shown as escaped plain text
with a note instead. Its cost grows with the text (up to ~20 ms per 1,000
characters of runs of `[`), and its tables are filled out to the header's width
(1.5 KB can make 65,536 cells and a second of CPU); bench/render_bench.py
measures both.
"""

from __future__ import annotations

import html
import re

import nh3
from markdown_it import MarkdownIt

_renderer = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable(
    ["table", "strikethrough"]
)

ALLOWED_TAGS = {
    "p",
    "br",
    "hr",
    "strong",
    "em",
    "del",
    "code",
    "pre",
    "blockquote",
    "ul",
    "ol",
    "li",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "a",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
}  # no <img>: a model's answer must not make the browser fetch remote URLs
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "code": {"class"},
    "th": {"style"},
    "td": {"style"},
    "ol": {"start"},
}


MARKDOWN_LIMIT = 20_000  # characters: at most ~0.4 s of markdown-it, whatever the text
TABLE_CELL_LIMIT = 10_000  # about as long again
# A table's delimiter row, `|---|:--:|` (GFM): it decides the table's width.
DELIMITER_ROW = re.compile(r" {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*")


def render_markdown(text: str) -> str:
    text = text or ""
    if len(text) > MARKDOWN_LIMIT:
        return plain_text(text, f"longer than {MARKDOWN_LIMIT:,} characters")
    if table_cells(text) > TABLE_CELL_LIMIT:
        return plain_text(text, f"its tables would have more than {TABLE_CELL_LIMIT:,} cells")
    return nh3.clean(
        _renderer.render(text),
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer",
    )


def plain_text(text: str, reason: str) -> str:
    note = f'<p class="note">Shown as plain text: {reason}.</p>'
    return f'{note}<pre class="plain">{html.escape(text)}</pre>'


def table_cells(text: str) -> int:
    """At least as many cells as markdown-it would make of the text's tables: each
    row from the delimiter row to the next blank line, as wide as the delimiter row."""
    cells = width = 0
    for line in text.splitlines():
        if not line.strip():
            width = 0
        elif width:
            cells += width
        elif "|" in line and DELIMITER_ROW.fullmatch(line):
            width = line.strip().strip("|").count("|") + 1
            cells += width  # the header row
    return cells
