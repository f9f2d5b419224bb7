"""Markdown rendering bounded in size and kept off the event loop (issue 24, attack 5)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async

from agent.frames import EventFrame
from core import markdown
from memory import recording
from memory.models import EventType
from neotask_site.templatetags import neotask
from sessions_app import chat
from sessions_app.broadcast import broadcast, channel_layer, group_name

# 256 columns, then 256 rows of one cell each: 1.5 KB that markdown-it fills out
# to 65,536 cells (650 KB of HTML, over a second of CPU).
TABLE_BOMB = "|" + "a|" * 256 + "\n|" + "-|" * 256 + "\n" + "a\n" * 256


def test_it_renders_a_short_message_as_markdown():
    html = markdown.render_markdown("**bold**, `code` and [a link](https://example.org)")
    assert "<strong>bold</strong>" in html and "<code>code</code>" in html
    assert '<a href="https://example.org" rel="noopener noreferrer">' in html
    assert "plain text" not in html


def test_it_shows_a_message_longer_than_the_limit_as_escaped_plain_text():
    text = "**x** <script>alert(1)</script> [" * 10_000  # 340,000 characters
    html = markdown.render_markdown(text)
    assert "Shown as plain text: longer than 20,000 characters." in html
    assert "<strong>" not in html and "<script>" not in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 10_000
    assert '<pre class="plain">**x** &lt;script&gt;' in html


def test_it_renders_a_message_of_exactly_the_limit():
    text = "**x**" + "a" * (markdown.MARKDOWN_LIMIT - 5)
    assert "<strong>x</strong>" in markdown.render_markdown(text)
    assert "plain text" in markdown.render_markdown(text + "a")


def test_it_renders_a_long_message_in_a_process_of_its_own(monkeypatch):
    here: list[int] = []  # what markdown-it renders in this process
    render = markdown._renderer.render
    monkeypatch.setattr(
        markdown._renderer, "render", lambda text: here.append(len(text)) or render(text)
    )
    assert markdown.render_markdown("**x** " * 1000).count("<strong>x</strong>") == 1000
    assert here == []
    assert markdown.render_markdown("**x**") == "<p><strong>x</strong></p>\n"
    assert here == [5]


def test_it_shows_a_table_that_would_be_filled_out_past_the_cell_limit_as_plain_text():
    html = markdown.render_markdown(TABLE_BOMB)
    assert "<table>" not in html and "<td>" not in html
    assert "Shown as plain text: its tables would have more than 10,000 cells." in html
    assert '<pre class="plain">|a|a|' in html


def test_it_renders_ordinary_tables():
    rows = "".join(f"| {n} | {n * n} |\n" for n in range(500))
    html = markdown.render_markdown("| n | square |\n|---|---:|\n" + rows)
    assert html.count("<tr>") == 501 and "plain text" not in html


def test_the_chat_page_shows_a_long_answer_as_plain_text(alice, alice_client):
    session = chat.start_chat(alice)
    answer = "# Imported\n\n" + "word *and* <b>tag</b> " * 15_000  # 300 KB, from an import
    recording.record(
        alice, str(session.pk), EventType.ASSISTANT_RESPONSE, {"content": answer}, embed=False
    )
    recording.record(
        alice, str(session.pk), EventType.ASSISTANT_RESPONSE, {"content": "*short*"}, embed=False
    )
    page = alice_client.get(f"/chat/{session.key}/").content.decode()
    assert page.count("Shown as plain text: longer than 20,000 characters.") == 1
    assert "<h1>Imported</h1>" not in page and "<b>tag</b>" not in page
    assert page.count("word *and* &lt;b&gt;tag&lt;/b&gt;") == 15_000
    assert "<em>short</em>" in page


@pytest.mark.django_db(transaction=True)
async def test_it_renders_an_event_for_the_websocket_off_the_event_loop(alice, monkeypatch):
    session = await sync_to_async(chat.start_chat)(alice)
    event = await sync_to_async(recording.record)(
        alice, str(session.pk), EventType.ASSISTANT_RESPONSE, {"content": "**done**"}
    )
    rendered_in: list[tuple[int, bool]] = []
    original = neotask.render_markdown

    def spy(text: str) -> str:
        try:
            asyncio.get_running_loop()
            on_a_loop = True
        except RuntimeError:
            on_a_loop = False
        rendered_in.append((threading.get_ident(), on_a_loop))
        return original(text)

    monkeypatch.setattr(neotask, "render_markdown", spy)
    layer = channel_layer()
    tab = await layer.new_channel()
    await layer.group_add(group_name(alice.pk, session.key), tab)
    await broadcast(alice.pk, session.key, EventFrame.of(event))
    message = await asyncio.wait_for(layer.receive(tab), timeout=10)
    await layer.group_discard(group_name(alice.pk, session.key), tab)
    assert "<strong>done</strong>" in message["frame"]["event"]["html"]
    assert rendered_in == [(rendered_in[0][0], False)]
    assert rendered_in[0][0] != threading.get_ident()


@pytest.mark.parametrize(
    "text",
    [
        "*not emphasis* and _this_ neither",
        "[a link](https://example.org) and ![an image](x.png)",
        "<b>bold</b> &amp; `code` | a cell ~~struck~~ back\\slash",
    ],
)
def test_it_escapes_a_quoted_line_to_show_it_as_it_is(text):
    html = markdown.markdown_to_html(f"- label: {markdown.escape_markdown(text)}")
    shown = html.removeprefix("<ul>\n<li>label: ").removesuffix("</li>\n</ul>\n")
    assert shown == text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
