"""The chat header's model picker in Chromium, on the embedded profile (issue 42):
each installed embedded model once (Qwen 0.5B as fetched, the bundled SmolLM2),
the default marked, "Connect a model…" for the staff; choosing SmolLM2 makes the
next answer come from it; on a desktop and on a phone, where the picker stays
inside the screen and big enough to tap. The embedded model server is played by
scripted servers, one per model (tests/support/embedded.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.browser import (
    ARTIFACTS,
    DESKTOP,
    PASSWORD,
    PHONE,
    add_tester,
    log_in,
    new_chat,
    send,
)
from tests.support.embedded import QWEN, FakeModelServer, fetched
from tests.support.processes import app_env, free_port, start_daphne
from tests.support.scripted_llm import Reply, ScriptedLLM

KEY = "embedded-e2e-key-0123456789"
TAP = 44  # CSS pixels: the smallest tap target the phone layout gives a control (Apple's HIG)


def assert_fits_a_phone(page) -> None:
    """The picker and its link inside the screen's width, each tall enough to tap."""
    width = page.viewport_size["width"]
    for selector in ("#chat-model", "#chat-model-form a.connect-model"):
        box = page.locator(selector).bounding_box()
        assert box is not None, selector
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, (selector, box)
        assert box["height"] >= TAP, (selector, box)
    # Nothing of the page sideways: the document is no wider than the screen.
    assert page.evaluate("document.documentElement.scrollWidth") <= width


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_the_picker_offers_each_model_once_and_a_choice_answers_next(browser, tmp_path, size):
    data = tmp_path / "data"
    data.mkdir()
    fetched(data)
    with ScriptedLLM(api_key=KEY) as qwen, ScriptedLLM(api_key=KEY) as smol:
        env = app_env(
            data,
            DJANGO_SUPERUSER_PASSWORD=PASSWORD,
            NEOTASK_LLM_LOCAL_MODEL=QWEN,
            NEOTASK_LOCAL_LLM_KEY=KEY,
            NEOTASK_LOCAL_LLM_URL=qwen.url,
        )
        env.pop("NEOTASK_LLM_BASE_URL", None)
        add_tester(env)
        model_server = FakeModelServer(Path(data), {QWEN: qwen, "smollm2": smol}, QWEN)
        port = free_port()
        log = (tmp_path / "daphne.log").open("w")
        server = start_daphne(env, port, log)
        device = PHONE if size == "phone" else DESKTOP
        context = browser.new_context(base_url=f"http://127.0.0.1:{port}", **device)
        try:
            page = context.new_page()
            page.set_default_timeout(30_000)
            log_in(page)
            new_chat(page)
            options = page.locator("#chat-model option").all_inner_texts()
            assert options == ["Qwen2.5-Coder-0.5B (default)", "SmolLM2-135M"]
            connect = page.locator("#chat-model-form a.connect-model")
            assert connect.is_visible() and connect.get_attribute("href") == "/settings/models/"
            if size == "phone":
                assert_fits_a_phone(page)
                page.locator("#chat-model").tap()  # opens the system's list: not in a screenshot
                page.screenshot(path=str(ARTIFACTS / "model-picker-phone-open.png"))

            page.select_option("#chat-model", label="SmolLM2-135M")
            page.locator("#chat-model option[selected]:has-text('SmolLM2')").wait_for(
                state="attached"
            )
            smol.script(Reply("SmolLM2 answers."))
            send(page, "Who answers?")
            page.locator(".assistant_response .bubble:has-text('SmolLM2 answers')").wait_for()
            assert len(smol.requests) == 1 and not qwen.requests
            assert model_server.loads == [QWEN, "smollm2"]
            page.screenshot(path=str(ARTIFACTS / f"model-picker-{size}.png"))

            page.reload()
            assert page.locator("#chat-model option[selected]").inner_text() == "SmolLM2-135M"
            assert page.locator("#chat-model option").all_inner_texts() == options
            if size == "phone":
                assert_fits_a_phone(page)
        finally:
            context.close()
            model_server.close()
            server.terminate()
            server.wait(timeout=15)
            log.close()
