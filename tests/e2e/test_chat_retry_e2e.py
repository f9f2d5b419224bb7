"""In Chromium: Retry on a failed answer runs the turn again; the failure stays, marked."""

from __future__ import annotations

from tests.support.browser import log_in, new_chat, send
from tests.support.scripted_llm import Reply


def test_it_retries_a_failed_answer_with_its_button(page, e2e_llm):
    log_in(page)
    new_chat(page)
    send(page, "what is the plan?")  # nothing scripted: the model answers 500
    retry = page.locator(".event.error button.retry")
    retry.wait_for()
    page.locator("#chat:not(.busy)").wait_for()
    e2e_llm.script(Reply(text="Here is the plan."))
    retry.click()
    page.locator(".bubble.assistant:has-text('Here is the plan.')").wait_for()
    assert "Retried “what is the plan?”" in page.locator(".event.retried").inner_text()
    assert page.locator(".event.error").count() == 1  # the failure is kept
    assert page.locator("button.retry").count() == 0  # and can no longer be retried
    assert page.locator(".events .bubble").all_inner_texts() == [
        "what is the plan?",
        "Here is the plan.",
    ]
    # The same after a reload.
    page.reload()
    assert page.locator(".event.retried").count() == 1
    assert page.locator("button.retry").count() == 0
