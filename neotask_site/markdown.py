"""Markdown from the model or the user, rendered to HTML that is safe to show.

Two layers: markdown-it escapes raw HTML in the source, and nh3 then keeps
only an allow-list of tags and attributes (no scripts, no event handlers, no
javascript: links), adding rel="noopener noreferrer" to every link.
"""

from __future__ import annotations

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


def render_markdown(text: str) -> str:
    html = _renderer.render(text or "")
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer",
    )
