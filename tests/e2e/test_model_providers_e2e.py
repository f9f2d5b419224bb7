"""Models chosen in the UI, in a real browser (issue 27 part 2): the staff
connects a second OpenAI-compatible server as "another provider", tests it,
and a chat switches to it; its answer then comes from that server."""

from __future__ import annotations

from tests.support.browser import ARTIFACTS, log_in, new_chat, send
from tests.support.scripted_llm import Reply, ScriptedLLM

KEY = "sk-e2e-other-provider-key-42"


def test_it_connects_tests_and_switches_a_chat_to_another_provider(page, e2e_llm):
    with ScriptedLLM(api_key=KEY, models=("m-other",)) as other:
        log_in(page)
        page.goto("/settings/models/")
        page.click("text=+ Connect a model")
        page.fill("input[name=name]", "Other provider")
        page.fill("input[name=base_url]", other.url)
        page.fill("input[name=api_key]", "sk-wrong")
        page.fill("textarea[name=offered_models]", "m-other")

        page.click("#test-provider")
        failed = page.locator("#test-result.error")
        failed.wait_for()
        assert "HTTP 401: the API key was refused" in failed.inner_text()

        page.fill("input[name=api_key]", KEY)
        other.script(Reply("OK"))
        page.click("#test-provider")
        page.locator("#test-result.ok").wait_for()
        assert other.requests[-1]["max_tokens"] == 1
        page.click("#provider-form button[type=submit]")
        row = page.locator("tr:has-text('Other provider')")
        row.wait_for()
        assert KEY not in page.content() and "…y-42" in row.inner_text()
        page.screenshot(path=str(ARTIFACTS / "model-providers.png"), full_page=True)

        page.goto("/")
        new_chat(page)
        page.select_option("#chat-model", label="Other provider · m-other")
        page.locator("#chat-model option[selected]:has-text('m-other')").wait_for(state="attached")
        before = len(e2e_llm.requests)
        other.script(Reply("Answered by the other provider."))
        send(page, "Who answers?")
        page.locator(".assistant_response .bubble:has-text('other provider')").wait_for()
        assert [r["model"] for r in other.requests[-1:]] == ["m-other"]
        assert len(e2e_llm.requests) == before
        # Reloaded, the chat still uses it.
        page.reload()
        assert page.locator("#chat-model option[selected]").inner_text() == (
            "Other provider · m-other"
        )

        # Removed: the live app's other tests see no extra model.
        page.goto("/settings/models/")
        page.once("dialog", lambda dialog: dialog.accept())
        page.locator("tr:has-text('Other provider') button.danger").click()
        page.locator("tr:has-text('Other provider')").wait_for(state="detached")
