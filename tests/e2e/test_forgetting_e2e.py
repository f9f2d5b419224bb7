"""Forgetting in a real browser: a turn deleted from the chat after its
confirmation page, then the whole chat."""

from __future__ import annotations

from tests.support.browser import log_in, new_chat, send
from tests.support.scripted_llm import Reply


def test_it_deletes_a_turn_then_the_chat_after_asking(page, e2e_llm):
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    log_in(page)
    new_chat(page)
    chat_url = page.url
    e2e_llm.script(Reply(text="Noted: level 3."), Reply(text="Lentil soup."))
    send(page, "I parked the bike on level 3")
    page.locator(".bubble.assistant:has-text('Noted: level 3.')").wait_for()
    send(page, "What is for dinner?")
    page.locator(".bubble.assistant:has-text('Lentil soup.')").wait_for()

    # The trash icon of the first message asks first: this message only, or its turn.
    page.locator(".event.user_message").first.hover()
    page.locator(".event.user_message").first.locator("a.delete-event").click()
    # (the trash icon opens the forget dialog, which offers this page too)
    page.locator("dialog.forget-dialog a.delete-turn").click()
    page.wait_for_url("**/events/*/delete/")
    assert "I parked the bike on level 3" in page.locator("blockquote").inner_text()
    page.click("button:has-text('Delete the whole turn')")
    page.wait_for_url(chat_url)
    assert page.locator(".bubble").all_inner_texts() == ["What is for dinner?", "Lentil soup."]

    # Cancel leaves the chat as it was; confirming deletes it.
    page.click("a.delete-chat")
    page.click("a:has-text('Cancel')")
    page.wait_for_url(chat_url)
    page.click("a.delete-chat")
    page.click("button:has-text('Delete the chat')")
    page.wait_for_selector("#new-chat")
    # (the flash names the deleted chat, once; nothing else does)
    shown = page.locator("body").inner_text().replace(page.locator(".flash").inner_text(), "")
    assert "What is for dinner?" not in shown
    assert dialogs == []
