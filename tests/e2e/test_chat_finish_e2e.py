"""The finished chat in a real browser: highlighted code, copy buttons, the title
in the header, renaming (issue 27 part 4)."""

from __future__ import annotations

from tests.support.browser import ARTIFACTS, log_in, new_chat, send
from tests.support.scripted_llm import Reply

CODE_ANSWER = "Here it is:\n\n```python\ndef greet(name):\n    return f'hi {name}'\n```\n\nDone."


def test_it_highlights_copies_and_names_the_chat(page, e2e_llm):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    log_in(page)
    new_chat(page)
    assert page.locator("#chat-title").inner_text() == "New chat"

    e2e_llm.script(Reply(deltas=[CODE_ANSWER[:20], CODE_ANSWER[20:]]))
    send(page, "Write a greeting function")
    answer = page.locator(".assistant_response .bubble.markdown").last
    answer.wait_for()

    # The header and the window title follow the title the first message gave the chat.
    page.locator("#chat-title:has-text('Write a greeting function')").wait_for()
    assert page.title() == "Write a greeting function · Neotask"
    # Not cut short by the header's other controls (they wrap first).
    assert page.locator("#chat-title").evaluate("e => e.scrollWidth <= e.clientWidth")

    # Highlighted on the server, coloured by the theme's CSS.
    keyword = answer.locator("pre code span.k").first
    assert keyword.inner_text() == "def"
    plain = answer.locator("pre code span.n").first
    assert keyword.evaluate("e => getComputedStyle(e).color") != plain.evaluate(
        "e => getComputedStyle(e).color"
    )

    # A copy button on the streamed answer's code block and on the answer, never
    # over the code, however narrow the block.
    page.set_viewport_size({"width": 420, "height": 800})
    button_box = answer.locator("pre button.copy").bounding_box()
    code_box = answer.locator("pre code").bounding_box()
    assert button_box and code_box
    assert button_box["y"] + button_box["height"] <= code_box["y"]
    page.set_viewport_size({"width": 1280, "height": 800})
    answer.locator("pre button.copy").click()
    assert page.evaluate("navigator.clipboard.readText()") == (
        "def greet(name):\n    return f'hi {name}'"
    )
    answer_copy = page.locator(".assistant_response button.copy[aria-label='Copy answer']").last
    answer_copy.click()
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith("Here it is:") and copied.endswith("Done.") and "Copy" not in copied
    page.screenshot(path=str(ARTIFACTS / "chat-code.png"), full_page=True)

    # Renamed from the header: header, window title and sidebar follow.
    page.locator(".chat-title-box summary").click()
    page.fill(".chat-title-box input[name=title]", "Greetings in Python")
    page.locator(".chat-title-box button[type=submit]").click()
    page.locator("#chat-title:has-text('Greetings in Python')").wait_for()
    page.locator("#chat-list .current:has-text('Greetings in Python')").wait_for()

    # An empty title is refused where it was typed.
    page.locator(".chat-title-box summary").click()
    page.fill(".chat-title-box input[name=title]", " ")
    page.locator(".chat-title-box input[name=title]").evaluate("e => e.removeAttribute('required')")
    page.locator(".chat-title-box button[type=submit]").click()
    page.locator(".chat-title-box .error:has-text('Give the chat a title.')").wait_for()

    page.reload()
    assert page.locator("#chat-title").inner_text() == "Greetings in Python"
    assert page.locator(".assistant_response pre button.copy").count() == 1  # after a reload too
