"""`make run` with no LLM configured: the embedded model answers in the browser."""

from __future__ import annotations

import os
import signal

from tests.support.browser import PASSWORD, add_tester, log_in, new_chat, send
from tests.support.processes import app_env, free_port, spawn_serve, wait_for_health


def test_it_answers_a_chat_message_with_the_embedded_model(browser, tmp_path):
    env = app_env(tmp_path, DJANGO_SUPERUSER_PASSWORD=PASSWORD)
    env.pop("NEOTASK_LLM_BASE_URL", None)  # no LLM configured: the embedded one
    add_tester(env)
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    serve = spawn_serve(env, port, log=log)
    try:
        wait_for_health(port, serve)
        context = browser.new_context(base_url=f"http://127.0.0.1:{port}")
        page = context.new_page()
        page.set_default_timeout(120_000)
        log_in(page)
        new_chat(page)
        send(page, "Hello! Who are you?")
        answer = page.locator(".assistant_response .bubble.markdown").first
        answer.wait_for()
        assert answer.inner_text().strip()  # the wording is the model's business
        assert page.locator(".note.error").count() == 0
        context.close()
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=30)
        log.close()
