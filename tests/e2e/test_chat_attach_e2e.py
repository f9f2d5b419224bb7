"""The chat's paperclip in a real browser, at desktop and phone width: it opens the
file picker, uploads without leaving the page, shows its progress and then the
result as a note in the chat, still there after a reload; a refused file says
why. Neither that nor a flash message (the form posted without script) changes
the chat column's width."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.support.browser import ARTIFACTS, log_in, new_chat

PHONE: dict[str, Any] = {
    "viewport": {"width": 390, "height": 844},
    "is_mobile": True,
    "has_touch": True,
}
DESKTOP: dict[str, Any] = {"viewport": {"width": 1280, "height": 800}}
PLAN = b"# Project plan\n\nThe launch is on 12 March.\n\n## Budget\n\nThe budget is 9,000 euros.\n"

# What every upload note said, as it changed (the progress is quick for a small file).
WATCH_NOTES = """() => {
  window.noteTexts = [];
  window.sameDocument = true;  // gone if the page reloads
  new MutationObserver(() => {
    for (const note of document.querySelectorAll("#events li.note.upload")) {
      window.noteTexts.push(note.textContent);
    }
  }).observe(document.getElementById("events"),
             {subtree: true, childList: true, characterData: true});
}"""

# The hidden form posted as a browser without script would: the page comes back
# with a flash message.
POST_WITHOUT_SCRIPT = """() => {
  const form = document.getElementById("attach");
  const files = new DataTransfer();
  files.items.add(new File(["# Flash\\n\\nA note."], "flash-%s.md", {type: "text/markdown"}));
  form.querySelector("input[type=file]").files = files.files;
  form.submit();
}"""


@pytest.fixture(scope="module")
def chat_of_tester(browser, live_app) -> dict[str, Any]:
    """A chat of the tester's and the cookies to open it from any context."""
    context = browser.new_context(base_url=live_app, **DESKTOP)
    page = context.new_page()
    page.set_default_timeout(30_000)
    log_in(page)
    new_chat(page)
    found = {"url": page.url, "state": context.storage_state()}
    context.close()
    return found


def choose(page, name: str, data: bytes) -> None:
    with page.expect_file_chooser() as chooser:
        page.click("#attach-button")
    chooser.value.set_files(files=[{"name": name, "mimeType": "text/plain", "buffer": data}])


@pytest.mark.parametrize(("size", "options"), [("desktop", DESKTOP), ("phone", PHONE)])
def test_the_paperclip_adds_a_document_as_a_note_and_the_chat_keeps_its_width(
    browser, live_app, chat_of_tester, size, options
):
    context = browser.new_context(
        base_url=live_app, storage_state=chat_of_tester["state"], **options
    )
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(chat_of_tester["url"])
    assert page.locator("input[type=file]:visible").count() == 0  # no raw "Choose File"
    width = page.locator("#composer").bounding_box()["width"]
    page.evaluate(WATCH_NOTES)

    choose(page, f"Project plan {size}.md", PLAN)
    # (The chat keeps the notes of the documents added before: this one, by its name.)
    note = page.locator("#events li.note.upload:not(.pending)", has_text=f"plan {size}.md")
    note.wait_for()
    added = re.fullmatch(
        rf"Added Project plan {size}\.md to memory: (\d+) passages? "
        rf"\(memory/docs/Project plan {size}\.md\)\.",
        note.inner_text(),
    )
    assert added and int(added[1]) >= 1, note.inner_text()
    said = page.evaluate("window.noteTexts")
    assert any(re.fullmatch(rf"Uploading Project plan {size}\.md… \d+ %", t) for t in said), said
    assert f"Converting Project plan {size}.md…" in said
    assert page.evaluate("window.sameDocument") and page.url == chat_of_tester["url"]
    assert page.locator("#composer").bounding_box()["width"] == width

    choose(page, f"setup-{size}.exe", b"MZ")
    refused = page.locator("#events li.note.upload.error").last
    refused.wait_for()
    assert "Not added to memory: 'setup-" in refused.inner_text()
    assert "is not a file Neotask can read" in refused.inner_text()
    page.screenshot(path=str(ARTIFACTS / f"chat-attach-{size}.png"))

    # A flash message takes a row above the conversation, never its column.
    page.evaluate(POST_WITHOUT_SCRIPT % size)
    flash = page.locator(".flash li", has_text=f"Added flash-{size}.md to memory")
    flash.wait_for()
    assert page.url == chat_of_tester["url"]
    assert page.locator("#composer").bounding_box()["width"] == width
    chat_box = page.locator("#chat").bounding_box()
    flash_box = page.locator(".flash").bounding_box()
    assert flash_box["y"] + flash_box["height"] <= chat_box["y"] + 1
    # The page came back from the server: the note of the document added before is still
    # in the chat (the refused file's is not: nothing was added).
    kept = page.locator("#events li.note.upload", has_text=f"Added Project plan {size}.md")
    assert kept.count() == 1 and page.locator("#events li.note.upload.error").count() == 0
    page.screenshot(path=str(ARTIFACTS / f"chat-flash-{size}.png"))
    context.close()
