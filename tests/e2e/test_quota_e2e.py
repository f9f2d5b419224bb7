"""A message refused by a quota, in a real browser: said why, and back in the box."""

from __future__ import annotations

from tests.support.browser import PASSWORD, new_chat, send
from tests.support.processes import run_program
from tests.support.scripted_llm import Reply


def test_it_puts_a_refused_message_back_into_the_box(page, live_env, e2e_llm):
    run_program(live_env, "tests.programs.accounts:limited_user", "limited", PASSWORD, 1)
    page.goto("/accounts/login/")
    page.fill("input[name=username]", "limited")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("#new-chat")
    new_chat(page)
    e2e_llm.script(Reply(text="Noted."))
    send(page, "first")
    page.locator(".bubble.assistant:has-text('Noted.')").wait_for()

    send(page, "second, kept for later")
    page.locator(".note.error:has-text('this minute; try again in')").wait_for()
    assert page.locator("#input").input_value() == "second, kept for later"
    assert page.locator(".bubble.user:has-text('second')").count() == 0
