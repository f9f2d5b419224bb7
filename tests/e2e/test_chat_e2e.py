"""The chat in a real browser: Chromium, the real server, the scripted LLM."""

from __future__ import annotations

import subprocess

from tests.support.browser import ARTIFACTS, log_in, new_chat, send
from tests.support.scripted_llm import Reply, reply_with_tool


def test_it_chats_streams_approves_and_keeps_history(page, e2e_llm):
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    log_in(page)
    new_chat(page)

    # A streamed answer: the partial text shows before the answer is complete.
    e2e_llm.script(Reply(deltas=["Hello ", "from ", "a ", "**streamed** ", "answer."], delay=0.25))
    send(page, "Hi there")
    page.wait_for_selector(".streaming .bubble:has-text('Hello from')")
    answer = page.locator(".assistant_response .bubble.markdown").last
    answer.wait_for()
    assert answer.inner_text() == "Hello from a streamed answer."
    assert answer.locator("strong").inner_text() == "streamed"
    assert page.locator("#input").input_value() == ""
    assert "in ·" in page.locator("#meter-tokens").inner_text()

    # Shift+Enter makes a new line instead of sending.
    page.fill("#input", "line one")
    page.press("#input", "Shift+Enter")
    page.type("#input", "line two")
    assert page.locator("#input").input_value() == "line one\nline two"
    page.fill("#input", "")

    # A terminal command waits for approval; "Allow always" lets it run.
    e2e_llm.script(
        reply_with_tool("terminal", {"command": "echo approved-in-browser"}),
        Reply(text="The command ran."),
    )
    send(page, "Run the echo command")
    card = page.locator(".approval")
    card.wait_for()
    assert card.locator(".command").inner_text() == "echo approved-in-browser"
    with page.expect_response("**/chat/approval/") as answered:  # hx-post, with its CSRF token
        card.locator("button[value=always]").click()
    assert answered.value.status == 200
    page.locator(".bubble.assistant:has-text('The command ran.')").wait_for()
    assert page.locator(".approval").count() == 0
    page.locator("details.tool summary:has-text('Result of')").last.click()
    assert "approved-in-browser" in page.locator("details.tool pre").last.inner_text()

    # HTML in a message is shown as text and never runs.
    e2e_llm.script(Reply(text="Noted."))
    send(page, "<img src=x onerror=alert(1)>")
    page.locator(".bubble.assistant:has-text('Noted.')").wait_for()
    assert page.locator(".bubble.user").last.inner_text() == "<img src=x onerror=alert(1)>"
    assert page.locator(".events img").count() == 0

    # The sidebar shows the chat under its first message.
    page.locator("#chat-list:has-text('Hi there')").wait_for()

    # After a reload the whole conversation is still there, in order.
    page.reload()
    bubbles = page.locator(".bubble").all_inner_texts()
    assert bubbles == [
        "Hi there",
        "Hello from a streamed answer.",
        "Run the echo command",
        "The command ran.",
        "<img src=x onerror=alert(1)>",
        "Noted.",
    ]
    page.screenshot(path=str(ARTIFACTS / "chat.png"), full_page=True)
    assert dialogs == []


def test_it_shows_slash_command_answers_and_errors(page, e2e_llm):
    log_in(page)
    new_chat(page)
    send(page, "/help")
    page.locator(".note.notice:has-text('/compact')").wait_for()
    # Laid out: a table, a row per command, not one run-on line.
    assert page.locator(".note.laid-out table tbody tr").count() >= 10
    send(page, "/status")
    status = page.locator(".note.laid-out:has-text('Model:')")
    status.wait_for()
    assert status.locator("ul > li").count() >= 4
    # The scripted server has no reply queued: it answers 500, shown in the pane.
    send(page, "this will fail")
    page.locator(".note.error:has-text('failed (500)')").wait_for()
    assert page.locator("#input").is_enabled()
    e2e_llm.script(Reply(text="Working again."))
    send(page, "and now?")
    page.locator(".bubble.assistant:has-text('Working again.')").wait_for()


def drop_connections(port: int) -> None:
    """Destroy the browser's TCP connections to the server, as a network drop would."""
    subprocess.run(
        ["ss", "-K", "state", "established", f"( dport = :{port} )"],
        check=True,
        capture_output=True,
    )


def test_it_reconnects_after_a_dropped_socket_without_losing_or_repeating(page, e2e_llm, live_app):
    log_in(page)
    new_chat(page)
    e2e_llm.script(Reply(deltas=[f"part{n} " for n in range(12)], delay=0.25))
    send(page, "tell me a long story")
    page.wait_for_selector(".streaming .bubble:has-text('part1')")
    # Drop the connection mid-answer; the server finishes the turn meanwhile.
    drop_connections(int(live_app.rsplit(":", 1)[1]))
    page.locator("#connection").wait_for(state="visible")
    page.locator("#connection").wait_for(state="hidden")
    answer = page.locator(".assistant_response .bubble.markdown:has-text('part11')")
    answer.wait_for()
    assert page.locator(".bubble.user").all_inner_texts() == ["tell me a long story"]
    assert page.locator(".assistant_response .bubble.markdown").count() == 1
    assert page.locator(".streaming").count() == 0


def test_it_compacts_from_the_chat_and_the_meter_shows_it(page, e2e_llm):
    log_in(page)
    new_chat(page)
    for number in range(7):
        e2e_llm.script(Reply(text=f"Answer {number}: " + "details " * 40))
        send(page, f"Question {number}: " + "context " * 40)
        page.locator(f".bubble.markdown:has-text('Answer {number}:')").wait_for()
        page.locator("#chat:not(.busy)").wait_for()  # the turn is done
    before = page.locator("#meter-context").inner_text()
    e2e_llm.script(Reply(text="DONE"), Reply(text="- The user asked seven questions"))
    send(page, "/compact")
    page.locator(".note.notice:has-text('Compacted:')").wait_for()
    page.locator("details.compaction").wait_for()
    after = page.locator("#meter-context").inner_text()
    percent = lambda text: int(text.split()[1].rstrip("%"))  # noqa: E731
    assert percent(after) < percent(before)
    old_transcript = page.locator("details.compaction a").get_attribute("href")
    download = page.locator(".chat-head a.download").get_attribute("href")
    assert download.endswith("/transcript.jsonl")
    assert download.split("/")[2] != old_transcript.split("/")[2]  # follows the new session
    page.locator("details.compaction summary").click()
    assert "seven questions" in page.locator("details.compaction").inner_text()
    # The archived transcript opens with every message.
    with page.expect_navigation():
        page.locator("details.compaction a:has-text('full transcript')").click()
    assert page.locator(".bubble.user").count() == 7
