"""Keyboards and screen readers: axe-core on every page, the chat's live region,
Esc, focus and the skip link, in Chromium."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.programs import seeds
from tests.support.browser import log_in, new_chat, serious_violations
from tests.support.processes import run_program
from tests.support.scripted_llm import Reply


def in_live_app(live_env, program: Callable[..., Any], *arguments: Any) -> Any:
    try:
        return run_program(live_env, program, *arguments)
    except subprocess.CalledProcessError as error:
        pytest.fail(f"{program.__name__} in the live app failed:\n{error.stderr}")


@pytest.fixture(scope="module", autouse=True)
def seeded(live_app, live_env) -> Iterator[dict]:
    """One of each row the pages list, owned by the e2e user, in the app's own
    database; the live app is shared with the other browser tests: what this module
    made goes when it ends (its chats would be the latest, its rows in their lists)."""
    since = in_live_app(live_env, seeds.now)
    ids = in_live_app(live_env, seeds.one_of_each)
    yield ids
    in_live_app(live_env, seeds.remove_made_since, since, ids["file"])


def page_paths(seeded: dict) -> list[str]:
    file = f"?agent=main&path={seeded['file']}"
    return [
        "/",
        f"/chat/{seeded['chat']}/",  # with a command waiting for approval
        "/sessions/",
        f"/sessions/{seeded['session']}/",
        "/sessions/cleanup/",
        f"/chat/{seeded['chat']}/rename/",
        "/agents/",
        "/memory/?q=hello",
        "/memory/facts/",
        f"/memory/facts/{seeded['fact']}/edit/",
        "/memory/macros/",
        "/memory/files/",
        f"/memory/files/view/{file}",
        f"/memory/files/delete/{file}",
        "/tasks/",
        f"/tasks/{seeded['task']}/delete/",
        "/settings/terminal/",
        "/settings/tokens/",
        "/settings/mcp/",
        "/settings/models/",
        "/settings/models/add/",
        "/setup/model/",
        "/import/",
        f"/import/{seeded['import_job']}/",
        "/no-such-page/",
    ]


def first_focusable(page) -> str:
    return page.evaluate(
        """document.querySelector(
          "a[href], button, textarea, select, input:not([type=hidden]), [tabindex]"
        ).className"""
    )


@pytest.mark.parametrize("color_scheme", ["light", "dark"])  # the stylesheet has both
def test_it_has_no_serious_axe_violations_on_any_page(page, seeded, color_scheme):
    found: dict[str, list[str]] = {}
    page.emulate_media(color_scheme=color_scheme)
    page.goto("/accounts/login/")
    if violations := serious_violations(page):
        found["/accounts/login/"] = violations
    log_in(page)
    for path in page_paths(seeded):
        response = page.goto(path)
        assert response.status == (404 if path == "/no-such-page/" else 200), path
        page.wait_for_load_state("networkidle")
        violations = serious_violations(page)
        if path != "/no-such-page/" and first_focusable(page) != "skip-link":
            violations.append("the skip link is not the first focusable element")
        if violations:
            found[path] = violations
    assert not found, "\n".join(
        f"{path}:\n  " + "\n  ".join(violations) for path, violations in found.items()
    )


def send_by_click(page, text: str) -> None:
    page.fill("#input", text)
    page.click("#send")


def focused_id(page) -> str:
    return page.evaluate("document.activeElement.id")


# Each change of the announcer's text, as a screen reader would be told of it.
RECORD_ANNOUNCEMENTS = """() => {
  window.announcements = [];
  const announcer = document.getElementById("announcer");
  new MutationObserver(() => window.announcements.push(announcer.textContent))
    .observe(announcer, { childList: true, characterData: true, subtree: true });
}"""


def test_it_announces_a_finished_answer_once_and_focuses_the_message_box(page, e2e_llm):
    log_in(page)
    new_chat(page)
    assert page.get_attribute("#events", "aria-live") is None  # the deltas are not announced
    assert page.get_attribute("#announcer", "aria-live") == "polite"
    page.evaluate(RECORD_ANNOUNCEMENTS)
    e2e_llm.script(Reply(deltas=["Blue ", "is ", "your ", "**favourite** ", "colour."], delay=0.5))
    send_by_click(page, "What is my favourite colour?")
    assert focused_id(page) == "input"  # back from the Send button
    page.wait_for_selector(".streaming .bubble:has-text('Blue is')")
    assert page.evaluate("window.announcements") == []
    page.evaluate("document.activeElement.blur()")

    answer = page.locator(".assistant_response .bubble.markdown").last
    answer.wait_for()
    page.locator("#chat:not(.busy)").wait_for()
    assert answer.inner_text() == "Blue is your favourite colour."
    assert page.evaluate("window.announcements") == ["Blue is your favourite colour."]
    assert page.locator("#announcer").text_content() == answer.inner_text()
    assert focused_id(page) == "input"


def test_it_stops_an_answer_with_escape(page, e2e_llm):
    log_in(page)
    new_chat(page)
    e2e_llm.script(Reply(deltas=[f"word{number} " for number in range(80)], delay=0.2))
    send_by_click(page, "Tell me a very long story")
    page.wait_for_selector(".streaming .bubble:has-text('word2')")
    assert serious_violations(page) == []  # mid-answer, with the Stop button shown
    page.evaluate("document.activeElement.blur()")  # Esc works wherever the focus is
    page.keyboard.press("Escape")

    stopped = page.locator(".assistant_response.interrupted")
    stopped.wait_for(timeout=10_000)  # well before the 16 s the whole answer takes
    assert "Answer interrupted by /stop." in stopped.inner_text()
    assert "word79" not in stopped.inner_text()
    page.locator("#chat:not(.busy)").wait_for()
    assert page.locator("#stop").is_hidden()
    assert page.locator(".streaming").count() == 0
    assert page.locator("#announcer").text_content().endswith("Answer interrupted by /stop.")
    assert focused_id(page) == "input"


@pytest.mark.parametrize("path", ["/tasks/", "/sessions/"])
def test_it_skips_to_the_content_with_the_first_tab(page, path):
    log_in(page)
    page.goto(path)
    skip = page.locator("a.skip-link")
    assert skip.bounding_box()["y"] < 0  # out of sight until focused
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip-link"
    assert skip.inner_text() == "Skip to content"
    assert skip.bounding_box()["y"] >= 0
    page.keyboard.press("Enter")
    assert focused_id(page) == "main"
    assert page.url.endswith("#main")
