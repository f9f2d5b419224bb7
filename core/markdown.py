"""Markdown from the model or the user, rendered to HTML that is safe to show.

Two layers: markdown-it escapes raw HTML in the source (code blocks are escaped
by Pygments, which highlights them: core.highlight), and nh3 then keeps
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
import multiprocessing
import re
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import nh3
from markdown_it import MarkdownIt

from core.highlight import budget_for_message, highlight_code

_renderer = MarkdownIt(
    "commonmark", {"html": False, "breaks": True, "highlight": highlight_code}
).enable(["table", "strikethrough"])

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
    "span",  # Pygments' tokens in a highlighted code block
}  # no <img>: a model's answer must not make the browser fetch remote URLs
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "code": {"class"},
    "span": {"class"},
    "th": {"style"},
    "td": {"style"},
    "ol": {"start"},
}


MARKDOWN_LIMIT = 20_000  # characters: at most ~0.4 s of markdown-it, whatever the text
TABLE_CELL_LIMIT = 10_000  # about 0.2 s
INLINE_LIMIT = 1_000  # characters rendered in the calling thread: at most ~20 ms
# A table's delimiter row, `|---|:--:|` (GFM): it decides the table's width.
DELIMITER_ROW = re.compile(r" {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*")


# What could start emphasis, code, a link, an HTML tag or entity, a table cell or
# a strikethrough inside a line (any ASCII punctuation may be escaped: CommonMark 2.4).
MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_\[\]<>|~&!])")


def escape_markdown(text: str) -> str:
    """One line of `text` as Markdown that shows it literally, in the middle of a
    line (a memory quoted in /status, after its list item's label)."""
    return MARKDOWN_PUNCTUATION.sub(r"\\\1", text)


def render_markdown(text: str) -> str:
    text = text or ""
    if len(text) > MARKDOWN_LIMIT:
        return plain_text(text, f"longer than {MARKDOWN_LIMIT:,} characters")
    if table_cells(text) > TABLE_CELL_LIMIT:
        return plain_text(text, f"its tables would have more than {TABLE_CELL_LIMIT:,} cells")
    if len(text) <= INLINE_LIMIT:
        return markdown_to_html(text)
    return in_renderer_process(text)


def markdown_to_html(text: str) -> str:
    budget_for_message()
    return nh3.clean(
        _renderer.render(text),
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer",
    )


_process: ProcessPoolExecutor | None = None
_process_lock = threading.Lock()


def in_renderer_process(text: str) -> str:
    """`markdown_to_html(text)` in a process of its own, started on first use.

    markdown-it is pure Python: in a thread of the server's process it would hold
    the GIL for as long as it works, and the event loop could only run between
    its switches (measured: /healthz 135-230 ms late during a 20,000-character
    answer rendered in a thread). Waiting on the other process lets the GIL go."""
    global _process
    with _process_lock:
        if _process is None:
            # spawn, not fork: the server's other threads may hold locks a fork would copy.
            _process = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        process = _process
    try:
        return process.submit(markdown_to_html, text).result()
    except BrokenProcessPool:  # the process died (killed?): a new one next time
        with _process_lock:
            if _process is process:
                _process = None
        return markdown_to_html(text)


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
