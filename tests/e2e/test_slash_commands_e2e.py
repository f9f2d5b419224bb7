"""The tools' slash commands in a real browser: memory usable without the model."""

from __future__ import annotations

from tests.support.browser import log_in, new_chat, send
from tests.support.scripted_llm import Reply


def test_it_remembers_and_searches_from_the_chat(page, e2e_llm):
    log_in(page)
    new_chat(page)
    e2e_llm.script(Reply(text="What a lovely name."))
    send(page, "My cat is called Miso")
    page.locator(".bubble.assistant:has-text('What a lovely name.')").wait_for()
    asked = len(e2e_llm.requests)

    send(page, "/remember pet.cat = Miso")
    page.locator(".note.notice:has-text('Remembered pet/cat: Miso')").wait_for()
    send(page, "/search Miso")
    page.locator(".note.notice:has-text('User message: My cat is called Miso')").wait_for()
    send(page, "/remember pet.cat")
    page.locator(".note.error:has-text('Usage: /remember <category>.<key> = <value>')").wait_for()
    assert len(e2e_llm.requests) == asked  # none of them asked the model
    assert page.locator("#input").input_value() == ""

    page.goto("/memory/facts/")
    page.locator("text=Miso").first.wait_for()
