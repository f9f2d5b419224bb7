"""The templates themselves: Django's {# #} comments end at the line's end, so a
comment written over two lines is shown on the page as text."""

from __future__ import annotations

import re
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent.parent / "neotask_site" / "templates"
UNCLOSED_COMMENT = re.compile(r"\{#(?:(?!#\}).)*$", re.MULTILINE)


def test_it_closes_every_short_comment_on_its_own_line():
    opened = [
        f"{path.relative_to(TEMPLATES)}:{number}"
        for path in sorted(TEMPLATES.rglob("*.html"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if UNCLOSED_COMMENT.search(line)
    ]
    assert opened == []


def test_it_shows_no_template_comment_on_the_chat_page(alice_client):
    page = alice_client.post("/chat/new/", follow=True)
    assert page.status_code == 200
    assert "{#" not in page.content.decode()
