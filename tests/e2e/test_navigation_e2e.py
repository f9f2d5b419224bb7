"""A calm layout, on a desktop and on a phone: the staff adds a user, who signs
in to a chat with the message box focused (not a "No chats yet" card), whose
first message starts it; the grouped navigation opens Memory and follows Facts."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.support.browser import ARTIFACTS, log_in
from tests.support.scripted_llm import Reply

SIZES: dict[str, dict[str, Any]] = {
    "desktop": {"viewport": {"width": 1280, "height": 800}},
    "phone": {
        "viewport": {"width": 390, "height": 844},
        "is_mobile": True,
        "has_touch": True,
        "device_scale_factor": 3,
    },
}
NEW_PASSWORD = "a long passphrase 42"


def open_group(page: Any, label: str, phone: bool) -> None:
    """The navigation's group `label`, opened (on a phone, in the menu first)."""
    if phone:
        menu = page.locator("button[aria-controls=site-nav]")
        if menu.get_attribute("aria-expanded") != "true":
            menu.click()
    page.locator(f"#site-nav summary:has-text('{label}')").click()
    expect(page.locator(f"#site-nav details:has(summary:has-text('{label}'))")).to_have_attribute(
        "open", ""
    )


@pytest.mark.parametrize("size", SIZES)
def test_a_new_user_lands_in_a_chat_and_finds_the_facts(browser, live_app, e2e_llm, size):
    phone = size == "phone"
    context = browser.new_context(base_url=live_app, **SIZES[size])
    page = context.new_page()
    page.set_default_timeout(30_000)

    # The staff member lands in a chat, the message box focused, and adds a user.
    log_in(page)
    expect(page.locator("#input")).to_be_focused()
    open_group(page, "Settings", phone)
    page.locator("#site-nav a:has-text('Add user')").click()
    page.wait_for_url("**/settings/users/add/")
    username = f"newcomer-{size}"
    page.fill("input[name=username]", username)
    page.fill("input[name=password1]", NEW_PASSWORD)
    page.fill("input[name=password2]", NEW_PASSWORD)
    page.click("button:has-text('Add user')")
    expect(page.locator(".flash")).to_contain_text(f"Added {username} as a user")
    if phone:
        page.click("button[aria-controls=site-nav]")
    page.click("#site-nav button:has-text('Log out')")

    # The new user has no chat yet: a message box, focused, all the same.
    page.goto("/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", NEW_PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#input")).to_be_focused()
    expect(page.get_by_text("No chats yet")).to_have_count(0)
    page.screenshot(path=str(ARTIFACTS / f"first-chat-{size}.png"))
    e2e_llm.script(Reply(text=f"Welcome, {username}."))
    page.keyboard.type("Hello, I am new here")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/chat/agent:main:web:\w+/$"))
    page.locator(".bubble.user:has-text('Hello, I am new here')").wait_for()
    page.locator(f".bubble.assistant:has-text('Welcome, {username}.')").wait_for()
    expect(page.locator("#input")).to_be_focused()
    assert any("Hello, I am new here" in json.dumps(sent["messages"]) for sent in e2e_llm.requests)

    # Memory ▾ Facts; the facts page is marked as the one shown.
    open_group(page, "Memory", phone)
    facts = page.locator("#site-nav a:has-text('Facts')")
    expect(facts).to_be_in_viewport()
    page.screenshot(path=str(ARTIFACTS / f"nav-memory-{size}.png"))
    facts.click()
    page.wait_for_url("**/memory/facts/")
    expect(page.locator("#site-nav [aria-current=page]")).to_have_text("Facts")
    expect(page.locator("#site-nav summary.current")).to_have_text("Memory")
    context.close()


def test_the_groups_open_one_at_a_time_and_close_on_esc_or_elsewhere(page, live_app):
    log_in(page)
    memory = page.locator("#site-nav details:has(summary:has-text('Memory'))")
    settings = page.locator("#site-nav details:has(summary:has-text('Settings'))")
    # The keyboard opens a group as any summary.
    page.locator("#site-nav summary:has-text('Memory')").focus()
    page.keyboard.press("Enter")
    expect(memory).to_have_attribute("open", "")
    page.keyboard.press("Tab")  # into its list
    expect(page.locator("#site-nav a:has-text('Search')")).to_be_focused()
    # Another group opening closes it.
    page.locator("#site-nav summary:has-text('Settings')").click()
    expect(settings).to_have_attribute("open", "")
    expect(memory).not_to_have_attribute("open", "")
    # Esc closes it, back on its summary.
    page.keyboard.press("Escape")
    expect(settings).not_to_have_attribute("open", "")
    expect(page.locator("#site-nav summary:has-text('Settings')")).to_be_focused()
    # A click elsewhere closes it too.
    page.locator("#site-nav summary:has-text('Memory')").click()
    expect(memory).to_have_attribute("open", "")
    page.locator("#events").click()
    expect(memory).not_to_have_attribute("open", "")
