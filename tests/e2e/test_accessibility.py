"""Keyboards and screen readers: axe-core on every page, the chat's live region,
Esc, focus and the skip link, in Chromium."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.support.browser import log_in, new_chat
from tests.support.processes import manage_json
from tests.support.scripted_llm import Reply

# One of each row the pages list, owned by the e2e user, in the app's own database.
SEED = """
import json
from django.contrib.auth import get_user_model
from django.utils import timezone
from importers.models import ImportJob
from memory import recording
from memory.files.paths import write_memory_file
from memory.workspace import workspace_dir
from memory.models import Event, Fact, Macro, MemoryFile, MemoryChunk
from tests.support.records import make_rows

user = get_user_model().objects.get(username="tester")
rows = {model.__name__: row for model, row in make_rows(user, "-a11y").items()}
session = rows["Session"]
# Not a turn in progress: nothing may run, and take a reply scripted for another test.
rows["ChatInput"].delete()
rows["ChatClaim"].delete()
recording.record(
    user, str(session.pk), "assistant_response",
    {"content": "Your favourite colour is **blue**, noted in your facts."},
)
recording.record(user, str(session.pk), "tool_call", {"name": "search_memory", "arguments": "{}"})
write_memory_file(workspace_dir(user.pk, "main"), rows["MemoryFile"].path, "# Notes\\n\\nhello\\n")
Fact.objects.create(owner=user, category="person", key="name", value="Ada")
done = ImportJob.objects.create(
    owner=user, kind="openclaw", filename="openclaw.tar.gz", status="done",
    started_at=timezone.now(), finished_at=timezone.now(),
    report={"dry_run": False, "rows": [["messages", 10, 9, 1, "empty"]], "notes": ["One note"]},
)
print(json.dumps({
    "session": str(session.pk),
    "chat": session.key,
    "fact": rows["Fact"].pk,
    "task": str(rows["ScheduledTask"].pk),
    "file": rows["MemoryFile"].path,
    "import_job": str(done.pk),
}))
"""


# The live app is shared with the other browser tests: what this module made
# goes when it ends (its chats would be the latest, its rows in their lists).
NOW = """
import json
from django.utils import timezone
print(json.dumps(timezone.now().isoformat()))
"""
TAKE_AWAY = """
from django.contrib.auth import get_user_model
from memory.files.indexing import index_workspace
from memory.workspace import workspace_dir
from sessions_app.models import Agent, ChatClaim, Session
from tests.support.records import OWNED_MODELS

user = get_user_model().objects.get(username="tester")
made = list(Session.objects.filter(created_at__gte=SINCE).values_list("key", flat=True))
ChatClaim.objects.filter(key__in=made).delete()
for model in reversed(OWNED_MODELS):
    if model is not Agent and model is not ChatClaim:
        model.objects.filter(created_at__gte=SINCE).delete()
(workspace_dir(user.pk, "main") / FILE).unlink(missing_ok=True)
index_workspace(user, "main")
print("null")
"""


def in_live_app(live_env, code: str):
    try:
        return manage_json(live_env, code)
    except subprocess.CalledProcessError as error:
        pytest.fail(f"manage.py shell in the live app failed:\n{error.stderr}")


@pytest.fixture(scope="module", autouse=True)
def seeded(live_app, live_env) -> Iterator[dict]:
    since = in_live_app(live_env, NOW)
    ids = in_live_app(live_env, SEED)
    yield ids
    in_live_app(live_env, f"SINCE = {since!r}; FILE = {ids['file']!r}\n{TAKE_AWAY}")


def page_paths(seeded: dict) -> list[str]:
    file = f"?agent=main&path={seeded['file']}"
    return [
        "/",
        f"/chat/{seeded['chat']}/",  # with a command waiting for approval
        "/sessions/",
        f"/sessions/{seeded['session']}/",
        "/sessions/cleanup/",
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
        "/import/",
        f"/import/{seeded['import_job']}/",
        "/no-such-page/",
    ]


def serious_violations(page) -> list[str]:
    results = Axe().run(page)
    return [
        f"{violation['id']} ({violation['impact']}): "
        + ", ".join(" ".join(node["target"]) for node in violation["nodes"])
        for violation in results.response["violations"]
        if violation["impact"] in ("serious", "critical")
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
