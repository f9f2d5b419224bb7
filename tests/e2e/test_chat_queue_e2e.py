"""In Chromium: a message typed while an answer streams waits, shown as queued in every tab."""

from __future__ import annotations

from tests.support.browser import log_in, new_chat, send
from tests.support.scripted_llm import Reply


def test_it_shows_a_message_typed_during_an_answer_as_queued_then_answers_it(page, e2e_llm):
    log_in(page)
    new_chat(page)
    other = page.context.new_page()
    other.goto(page.url)
    other.locator(".empty-chat").wait_for()
    slow = [f"slow{n} " for n in range(8)]
    e2e_llm.script(Reply(deltas=slow, delay=0.3), Reply(text="Second answer."))
    send(page, "first question")
    page.wait_for_selector(".streaming .bubble:has-text('slow1')")
    send(page, "second question")
    for tab in (page, other):
        queued = tab.locator(".queued-input:has-text('second question')")
        queued.wait_for()
        assert "Queued" in queued.locator(".queued-mark").inner_text()
    for tab in (page, other):
        tab.locator(".bubble.assistant:has-text('Second answer.')").wait_for()
        assert tab.locator(".queued-input").count() == 0
        assert tab.locator(".events .bubble").all_inner_texts() == [
            "first question",
            "".join(slow).strip(),
            "second question",
            "Second answer.",
        ]
