"""Every page on a phone (390 by 844, a mobile context): nothing wider than the
screen, the navigation and the chat list behind their buttons, a chat that works."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.programs import seeds
from tests.support.browser import ARTIFACTS, DESKTOP, PHONE, log_in
from tests.support.processes import run_program
from tests.support.scripted_llm import Reply

LONG_URL = "https://example.org/a/very/long/path/" + "segment-" * 20 + "end?query=" + "x" * 60
LONG_WORD = "Supercalifragilistic" * 6
QUESTION = f"Can you keep this link for me? {LONG_URL} And this word: {LONG_WORD}"
ANSWER = f"""Here is what I found: {LONG_URL}

```python
print("a line of code far longer than any phone is wide, so its box scrolls: {"0123456789" * 8}")
```

| Name | Kind | Where | When | Size | Notes | Owner | State |
|------|------|-------|------|------|-------|-------|-------|
| notes.md | file | memory/notes.md | 2026-06-01 10:00 | 1.2 kB | {LONG_WORD} | tester | indexed |
"""

# Each element that sticks out past the right edge of what clips it: the
# viewport, or its nearest ancestor that scrolls or hides horizontal overflow.
# Inside a box that scrolls sideways on purpose (code, a table, a text box) an
# element may extend as far as it likes; that box itself must fit. What a
# visually hidden box (1 px, for screen readers) holds is not on screen.
OVERFLOWING = """() => {
  const width = document.documentElement.clientWidth;
  const scrollsOnPurpose = (element) => element.matches("pre, table, textarea")
    && ["auto", "scroll"].includes(getComputedStyle(element).overflowX);
  const name = (element) => element.tagName.toLowerCase()
    + (element.id ? "#" + element.id : "")
    + [...element.classList].map((c) => "." + c).join("");
  const path = (element) => {
    const names = [];
    for (let e = element; e && e !== document.body && names.length < 4; e = e.parentElement) {
      names.unshift(name(e));
    }
    return names.join(" > ");
  };
  // The right edge element may reach, or null when it may reach any.
  const limit = (element) => {
    for (let e = element.parentElement; e && e !== document.body; e = e.parentElement) {
      const style = getComputedStyle(e);
      if (style.position === "fixed") return width;
      if (style.overflowX === "visible") continue;
      if (scrollsOnPurpose(e) || e.clientWidth <= 1 || e.clientHeight <= 1) return null;
      return Math.min(width, e.getBoundingClientRect().left + e.clientLeft + e.clientWidth);
    }
    return width;
  };
  const found = [];
  for (const element of document.body.querySelectorAll("*")) {
    if (!element.checkVisibility({visibilityProperty: true})) continue;
    const box = element.getBoundingClientRect();
    if (box.width === 0 || box.height === 0) continue;
    const edge = limit(element);
    if (edge !== null && box.right > edge + 0.5) {
      found.push(`${path(element)} (right ${box.right.toFixed(1)} > ${edge.toFixed(1)})`);
    }
  }
  return {scrollWidth: document.documentElement.scrollWidth, clientWidth: width, found};
}"""


@pytest.fixture(scope="module")
def seeded(live_app, live_env) -> Iterator[dict[str, Any]]:
    """What every page needs to show something, made long (tests.programs.pages)."""
    ids = run_program(live_env, seeds.long_content, QUESTION, ANSWER, LONG_URL, LONG_WORD)
    yield ids
    run_program(live_env, seeds.remove_long_content, ids)


@pytest.fixture(scope="module")
def signed_in(browser, live_app) -> dict[str, Any]:
    """The cookies of a signed-in tester, for each new context."""
    context = browser.new_context(base_url=live_app)
    page = context.new_page()
    log_in(page)
    state = context.storage_state()
    context.close()
    return state


def pages(ids: dict[str, Any]) -> dict[str, str]:
    """Every user-facing page, by name."""
    file = "?agent=main&path=memory/trips.md"
    return {
        "chat": f"/chat/{ids['chat']}/",
        "sessions": "/sessions/",
        "session": f"/sessions/{ids['session']}/",
        "cleanup": "/sessions/cleanup/",
        "chat-rename": f"/chat/{ids['chat']}/rename/",
        "agents": "/agents/",
        "memory-search": "/memory/?q=Lisbon",
        "facts": "/memory/facts/",
        "fact-edit": f"/memory/facts/{ids['fact']}/edit/",
        "macros": "/memory/macros/",
        "files": "/memory/files/",
        "file": f"/memory/files/view/{file}",
        "file-delete": f"/memory/files/delete/{file}",
        "tasks": "/tasks/",
        "task-delete": f"/tasks/{ids['task']}/delete/",
        "terminal": "/settings/terminal/",
        "tokens": "/settings/tokens/",
        "import": "/import/",
        "import-job": f"/import/{ids['job']}/",
        "not-found": "/sessions/00000000-0000-0000-0000-000000000000/",
        "admin": "/admin/",
    }


PAGE_NAMES = list(pages({"chat": "", "session": "", "fact": 0, "task": "", "job": ""}))


def assert_fits(page, name: str) -> None:
    measured = page.evaluate(OVERFLOWING)
    assert measured["scrollWidth"] <= measured["clientWidth"] and not measured["found"], (
        f"{name} at {page.url} is {measured['scrollWidth']} px wide in a "
        f"{measured['clientWidth']} px screen; sticking out:\n" + "\n".join(measured["found"])
    )


@pytest.mark.parametrize("name", PAGE_NAMES)
def test_it_fits_every_page_in_a_phone_screen(browser, live_app, seeded, signed_in, name):
    context = browser.new_context(base_url=live_app, storage_state=signed_in, **PHONE)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(pages(seeded)[name])
    page.wait_for_load_state("networkidle")
    assert_fits(page, name)
    if name not in ("admin", "not-found"):  # Django's admin and the error pages have no menu
        menu = page.locator("button[aria-controls=site-nav]")
        expect(menu).to_be_visible()
        expect(page.locator("#site-nav")).to_be_hidden()
        menu.click()
        expect(page.locator("#site-nav summary:has-text('Automations')")).to_be_in_viewport()
        assert_fits(page, f"{name} with the menu open")
        page.locator("#site-nav summary:has-text('Settings')").click()  # the longest group
        expect(page.locator("#site-nav a:has-text('API tokens')")).to_be_in_viewport()
        assert_fits(page, f"{name} with the menu and its Settings open")
    context.close()


def test_it_still_fits_every_page_in_a_desktop_window(browser, live_app, seeded, signed_in):
    context = browser.new_context(base_url=live_app, storage_state=signed_in, **DESKTOP)
    page = context.new_page()
    page.set_default_timeout(30_000)
    for name, url in pages(seeded).items():
        page.goto(url)
        page.wait_for_load_state("networkidle")
        assert_fits(page, name)
        if name not in ("admin", "not-found"):
            expect(page.locator("#site-nav summary:has-text('Automations')")).to_be_in_viewport()
            expect(page.locator("button[aria-controls=site-nav]")).to_be_hidden()
            page.locator("#site-nav summary:has-text('Settings')").click()
            expect(page.locator("#site-nav a:has-text('Admin')")).to_be_in_viewport()
            assert_fits(page, f"{name} with Settings open")
            page.keyboard.press("Escape")
    context.close()


def test_it_fits_the_login_page(browser, live_app):
    context = browser.new_context(base_url=live_app, **PHONE)
    page = context.new_page()
    page.goto("/accounts/login/")
    assert_fits(page, "login")
    expect(page.locator("button[type=submit]")).to_be_in_viewport()
    context.close()


def test_it_chats_on_a_phone(browser, live_app, seeded, signed_in, e2e_llm):
    context = browser.new_context(base_url=live_app, storage_state=signed_in, **PHONE)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(pages(seeded)["chat"])

    # The chat list is behind its button, and closes again.
    chats = page.locator("button[aria-controls=chat-sidebar]")
    expect(page.locator("#chat-list")).to_be_hidden()
    chats.click()
    expect(chats).to_have_attribute("aria-expanded", "true")
    expect(page.locator("#chat-list a:has-text('Plans for a long trip')")).to_be_in_viewport()
    expect(page.locator("#new-chat")).to_be_in_viewport()
    assert_fits(page, "chat with the chat list open")
    page.screenshot(path=str(ARTIFACTS / "chat-phone-list.png"))
    chats.click()
    expect(page.locator("#chat-list")).to_be_hidden()
    expect(chats).to_have_attribute("aria-expanded", "false")

    # The navigation opens from the menu button.
    menu = page.locator("button[aria-controls=site-nav]")
    menu.click()
    expect(menu).to_have_attribute("aria-expanded", "true")
    expect(page.locator("#site-nav summary:has-text('Memory')")).to_be_in_viewport()
    page.screenshot(path=str(ARTIFACTS / "chat-phone-menu.png"))
    menu.click()
    expect(page.locator("#site-nav")).to_be_hidden()

    # The message box and its button are on screen; an answer shows.
    expect(page.locator("#input")).to_be_in_viewport()
    expect(page.locator("#send")).to_be_in_viewport()
    e2e_llm.script(Reply(text="Sent from a phone, answered on a phone."))
    page.locator("#input").tap()
    page.fill("#input", "Hello from my phone")
    page.locator("#send").tap()
    answer = page.locator(".bubble.assistant:has-text('answered on a phone')")
    answer.wait_for()
    expect(page.locator(".bubble.user:has-text('Hello from my phone')")).to_be_in_viewport()
    expect(answer).to_be_in_viewport()
    assert_fits(page, "chat after an answer")
    context.close()


@pytest.mark.parametrize("name", ["chat", "memory-search", "tasks"])
def test_it_takes_screenshots_at_both_sizes(browser, live_app, seeded, signed_in, name):
    for size, options in [("desktop", DESKTOP), ("phone", PHONE)]:
        context = browser.new_context(base_url=live_app, storage_state=signed_in, **options)
        page = context.new_page()
        response = page.goto(pages(seeded)[name])
        assert response is not None and response.status == 200
        page.wait_for_load_state("networkidle")
        assert_fits(page, f"{name} ({size})")
        shot = page.screenshot(path=str(ARTIFACTS / f"{name}-{size}.png"), full_page=True)
        # A PNG's IHDR holds its size: the whole page, at the device's pixel density.
        width, height = struct.unpack(">II", shot[16:24])
        scale = options.get("device_scale_factor", 1)
        assert width == options["viewport"]["width"] * scale, (name, size, width)
        assert height >= options["viewport"]["height"] * scale, (name, size, height)
        context.close()
