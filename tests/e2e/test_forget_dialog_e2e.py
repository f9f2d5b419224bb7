"""Forget means forgotten, in a real browser with the real embedding model: a
fact stated in a chat is forgotten from the facts page through the dialog that
lists everything still saying it; afterwards a new chat sends the model none of
it, and memory search finds nothing by the words or by a paraphrase."""

from __future__ import annotations

import json
import time

from tests.support.browser import log_in, new_chat, send
from tests.support.scripted_llm import Reply, reply_with_tool

SAID = "I am allergic to peanuts, keep that in mind."
FACT = {"category": "health", "key": "allergy", "value": "peanuts"}
PARAPHRASE = "which nuts give me an allergic reaction"
QUESTION = "Suggest a snack for my hike."


def prompt_sent(e2e_llm, since: int) -> str:
    """What the model was sent since request `since`, lowercased."""
    return json.dumps(e2e_llm.requests[since:]).lower()


def search_texts(page, query: str) -> str:
    page.goto(f"/memory/?q={query.replace(' ', '+')}")
    return page.locator("ol.results").inner_text().lower()  # the hits, not the query


def ask_in_new_chat(page, e2e_llm) -> str:
    page.goto("/")
    new_chat(page)
    since = len(e2e_llm.requests)
    e2e_llm.script(Reply(text="Trail mix, or an apple."))
    send(page, QUESTION)
    page.locator(".bubble.assistant:has-text('Trail mix')").last.wait_for()
    return prompt_sent(e2e_llm, since)


def test_a_fact_forgotten_through_the_dialog_reaches_no_prompt_and_no_search(page, e2e_llm):
    log_in(page)
    new_chat(page)
    e2e_llm.script(reply_with_tool("remember_fact", FACT), Reply(text="Noted: no peanuts for you."))
    send(page, SAID)
    page.locator(".bubble.assistant:has-text('Noted: no peanuts')").wait_for()

    # Before: found by a paraphrase (its vector is stored), and in a new chat's prompt.
    deadline = time.monotonic() + 60
    while "peanut" not in search_texts(page, PARAPHRASE):
        assert time.monotonic() < deadline, "the message was never embedded"
        time.sleep(1)
    assert "peanut" in ask_in_new_chat(page, e2e_llm)

    # The facts page's Delete opens the dialog: nothing is deleted yet.
    page.goto("/memory/facts/")
    page.locator("tr", has_text="peanuts").locator("a.forget").click()
    dialog = page.locator("dialog.forget-dialog")
    dialog.wait_for()
    listed = dialog.locator(".forget-copies li").all_inner_texts()
    assert any("allergy: peanuts" in item for item in listed), listed  # the fact
    assert any(SAID in item for item in listed), listed  # where it was said
    assert any("Noted: no peanuts for you." in item for item in listed), listed
    boxes = dialog.locator("input[type=checkbox]")
    assert boxes.count() == len(listed) and all(
        boxes.nth(i).is_checked() for i in range(boxes.count())
    )
    dialog.locator("button:has-text('Forget selected')").click()
    page.locator(".flash li:has-text('Deleted')").wait_for()
    assert "peanuts" not in page.locator("#fact-results").inner_text()

    # After: the next chat's prompt holds none of it, and search finds nothing.
    sent = ask_in_new_chat(page, e2e_llm)
    assert QUESTION.lower() in sent  # (the request read is this turn's)
    assert "peanut" not in sent and "allerg" not in sent
    for query in ("peanuts", "allergic to peanuts", PARAPHRASE):
        assert "peanut" not in search_texts(page, query), query


def test_a_message_and_a_search_hit_are_forgotten_through_the_same_dialog(page, e2e_llm):
    log_in(page)
    new_chat(page)
    chat_url = page.url
    e2e_llm.script(Reply(text="Noted, the spare key."))
    send(page, "The spare key is under the blue flowerpot")
    page.locator(".bubble.assistant:has-text('Noted, the spare key.')").wait_for()

    # The trash icon of a message: the dialog lists it, and the answer that repeats it.
    message = page.locator(".event.user_message", has_text="blue flowerpot")
    message.hover()
    message.locator("a.delete-event").click()
    dialog = page.locator("dialog.forget-dialog")
    dialog.wait_for()
    listed = dialog.locator(".forget-copies li").all_inner_texts()
    assert "blue flowerpot" in listed[0]
    dialog.locator("button:has-text('Forget selected')").click()
    page.wait_for_url(chat_url)
    page.locator(".flash li:has-text('Deleted')").wait_for()
    assert not any("blue flowerpot" in text for text in page.locator(".bubble").all_inner_texts())

    # A memory search hit has its own Forget…
    page.goto("/memory/?q=spare+key")
    page.locator("ol.results li", has_text="Noted, the spare key.").locator("a.forget").click()
    page.locator("dialog.forget-dialog button:has-text('Forget selected')").click()
    page.locator(".flash li:has-text('Deleted')").wait_for()
    assert "spare key" not in search_texts(page, "spare key")
