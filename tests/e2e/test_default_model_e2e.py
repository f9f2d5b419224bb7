"""The default embedded model for real, in the browser: told a fact in one chat,
a new chat's answer holds it (recalled from memory, whether or not the model
chose to store it as a fact: at 0.5B it often does not, see docs/models.md).

It needs Qwen2.5-Coder-0.5B's 491 MB file, which the suite never downloads: set
NEOTASK_TEST_MODELS_DIR to a `models/` directory that `manage.py fetch_model`
filled (e.g. data/models); without it the test is skipped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.browser import PASSWORD, add_tester, log_in, new_chat, send
from tests.support.processes import ROOT, app_env, free_port, wait_for_health

MODELS = os.environ.get("NEOTASK_TEST_MODELS_DIR", "")

pytestmark = pytest.mark.skipif(not MODELS, reason="NEOTASK_TEST_MODELS_DIR is not set")


def test_it_remembers_a_fact_across_chats_with_the_default_model(browser, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "models").symlink_to(Path(MODELS).resolve())
    env = app_env(
        data, DJANGO_SUPERUSER_PASSWORD=PASSWORD, NEOTASK_LLM_LOCAL_MODEL="qwen2.5-coder-0.5b"
    )
    env.pop("NEOTASK_LLM_BASE_URL", None)
    add_tester(env)
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    serve = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port), "--no-jobs"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for_health(port, serve)
        context = browser.new_context(base_url=f"http://127.0.0.1:{port}")
        page = context.new_page()
        page.set_default_timeout(600_000)  # a few tokens a second on a busy 2-core machine
        log_in(page)
        new_chat(page)
        send(page, "Remember this fact about me: my phone is a Pixel.")
        # The turn is over once an answer with text is stored (tool rounds store silent ones).
        page.locator(".assistant_response:not(.streaming) .bubble").first.wait_for()
        assert "SmolLM2" not in page.content()  # no fallback notice: Qwen answered
        new_chat(page)
        send(page, "What phone do I have?")
        answer = page.locator(".assistant_response .bubble.markdown").first
        answer.wait_for()
        assert "pixel" in answer.inner_text().lower()
        context.close()
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=30)
        log.close()
