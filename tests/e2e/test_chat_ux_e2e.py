"""In Chromium: what chat users expect — edit and resend (the old branch kept as an
earlier version), regenerate, search in the chat list, and the "Remembered" notice
with Undo; the search box on a phone too."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.support.browser import ARTIFACTS, log_in, new_chat, send
from tests.support.scripted_llm import Reply, reply_with_tool


def test_edit_regenerate_search_and_undo(page, e2e_llm, browser, live_app):
    log_in(page)
    new_chat(page)
    e2e_llm.script(Reply(text="Otters are mammals."))
    send(page, "Tell me about otters")
    page.locator(".bubble.assistant:has-text('Otters are mammals.')").wait_for()
    page.locator("#chat:not(.busy)").wait_for()

    # Edit and resend: an editor in place of the message; the new text runs as a new branch.
    page.locator(".event.user_message button.edit-message").last.click()
    editor = page.locator("form.edit-box textarea")
    expect(editor).to_have_value("Tell me about otters")
    e2e_llm.script(Reply(text="Beavers build dams."))
    editor.fill("Tell me about beavers")
    editor.press("Enter")
    page.locator(".bubble.assistant:has-text('Beavers build dams.')").wait_for()
    page.locator("#chat:not(.busy)").wait_for()
    # The model was sent the new branch only.
    assert [m["content"] for m in e2e_llm.requests[-1]["messages"][1:]] == ["Tell me about beavers"]
    # The otter question and its answer, kept (and what was recalled for it, if
    # earlier tests left anything to recall).
    old = page.locator(".event.superseded:not(.recall)")
    expect(old).to_have_count(2)
    expect(old.first).to_contain_text("Edited: earlier version")
    expect(old.last).to_contain_text("Earlier answer")
    expect(page.locator(".event.edited .bubble")).to_have_text("Tell me about beavers")

    # Regenerate the latest answer: the old one stays, marked; the new one follows.
    expect(page.locator("button.regenerate")).to_have_count(1)
    e2e_llm.script(Reply(text="Beavers are rodents."))
    page.locator("button.regenerate").click()
    page.locator(".bubble.assistant:has-text('Beavers are rodents.')").wait_for()
    page.locator("#chat:not(.busy)").wait_for()
    assert [m["content"] for m in e2e_llm.requests[-1]["messages"][1:]] == ["Tell me about beavers"]
    expect(page.locator(".event.superseded:has-text('Beavers build dams.')")).to_contain_text(
        "Earlier answer"
    )
    expect(page.locator("button.regenerate")).to_have_count(1)

    # The same after a reload: drawn by the server.
    page.reload()
    expect(page.locator(".event.superseded:not(.recall)")).to_have_count(4)
    expect(page.locator(".note.earlier:has-text('Edited: earlier version')")).to_have_count(1)
    expect(page.locator("button.regenerate")).to_have_count(1)
    expect(page.locator(".events .bubble.assistant").last).to_have_text("Beavers are rodents.")

    # The notice when memory changed, and its Undo.
    e2e_llm.script(
        reply_with_tool(
            "remember_fact",
            {"category": "health", "key": "allergy", "value": "allergic to peanuts"},
        ),
        Reply(text="Noted."),
    )
    send(page, "I am allergic to peanuts")
    notice = page.locator(".memory-note:has-text('Remembered: allergic to peanuts')")
    notice.wait_for()
    page.locator("#chat:not(.busy)").wait_for()
    page.reload()  # still there after a reload, with its Undo
    notice.locator("button.undo").click()
    expect(page.locator(".memory-note.undone")).to_have_text("Undone: the fact is forgotten.")
    page.screenshot(path=str(ARTIFACTS / "chat-ux.png"))
    chat_url = page.url
    page.goto("/memory/facts/")
    assert "allergic to peanuts" not in page.content()

    # Search in the chat list: a second chat, then by message words and by title.
    page.goto(chat_url)
    new_chat(page)
    e2e_llm.script(Reply(text="Pack binoculars."))
    send(page, "Plan a zebra safari")
    page.locator(".bubble.assistant:has-text('Pack binoculars.')").wait_for()
    page.locator("#chat:not(.busy)").wait_for()
    search = page.locator("#chat-search-q")
    chats = page.locator("#chat-list .chat-title")
    search.fill("beavers")  # a word of a message, not of a title
    expect(chats).to_have_text(["Tell me about otters"])
    search.fill("zebra saf")  # part of a title, as it is typed
    expect(chats).to_have_text(["Plan a zebra safari"])
    search.fill("quokka")
    expect(page.locator("#chat-list")).to_contain_text("No chat matches “quokka”.")
    search.fill("")
    expect(chats.filter(has_text="Tell me about otters")).to_have_count(1)
    expect(chats.filter(has_text="Plan a zebra safari")).to_have_count(1)

    # On a phone: the search box behind the Chats toggle, inside the screen, and working.
    state = page.context.storage_state()
    phone = browser.new_context(
        base_url=live_app, storage_state=state, viewport={"width": 390, "height": 844}
    )
    try:
        small = phone.new_page()
        small.goto(chat_url)
        small.locator("button.chats-toggle").click()
        box = small.locator("#chat-search-q")
        expect(box).to_be_in_viewport()
        assert box.bounding_box()["width"] <= 390
        box.fill("safari")
        expect(small.locator("#chat-list .chat-title")).to_have_text(["Plan a zebra safari"])
        small.screenshot(path=str(ARTIFACTS / "chat-search-phone.png"))
    finally:
        phone.close()
