"""`make run` with no LLM configured: the embedded model answers in the browser."""

from __future__ import annotations

from tests.support.browser import PASSWORD, new_chat, send, served_and_signed_in
from tests.support.processes import app_env


def test_it_answers_a_chat_message_with_the_embedded_model(browser, tmp_path):
    env = app_env(tmp_path, DJANGO_SUPERUSER_PASSWORD=PASSWORD)
    env.pop("NEOTASK_LLM_BASE_URL", None)  # no LLM configured: the embedded one
    with served_and_signed_in(browser, env, tmp_path, 120_000) as page:
        new_chat(page)
        send(page, "Hello! Who are you?")
        answer = page.locator(".assistant_response .bubble.markdown").first
        answer.wait_for()
        assert answer.inner_text().strip()  # the wording is the model's business
        assert page.locator(".note.error").count() == 0
