"""Another MCP server's tool in a real browser: added on the settings page, called
by the (scripted) model, held on its card until the person allows it; "Allow
always" remembers that one call, which the settings page can revoke."""

from __future__ import annotations

from tests.support.browser import log_in, new_chat, send
from tests.support.mcp_server import served, weather_app
from tests.support.scripted_llm import Reply, reply_with_tool

PARIS = 'mcp_weather__forecast {"city": "Paris"}'


def test_it_runs_a_servers_tool_only_once_allowed_and_remembers_exactly_that_call(page, e2e_llm):
    calls: list[dict] = []
    with served(weather_app(calls), lifespan="on") as base:
        log_in(page)
        page.goto("/settings/mcp/")
        page.fill("input[name=name]", "weather")
        page.fill("input[name=url]", f"{base}/mcp")
        page.locator("button:has-text('Add server')").click()
        page.locator("table.mcp-servers:has-text('forecast')").wait_for()

        page.goto("/")
        new_chat(page)
        e2e_llm.script(
            reply_with_tool("mcp_weather__forecast", {"city": "Paris"}),
            Reply(text="Sunny, the server says."),
        )
        send(page, "Weather in Paris?")
        card = page.locator(".approval")
        card.wait_for()
        assert "MCP server" in card.locator(".approval-what").inner_text()
        assert card.locator(".command").inner_text() == PARIS
        always = card.locator("button[value=always]")
        assert always.inner_text() == "Allow always: exactly this call"
        assert "exactly these arguments" in always.get_attribute("title")
        assert calls == []  # nothing runs before the click
        with page.expect_response("**/chat/approval/") as answered:
            always.click()
        assert answered.value.status == 200
        page.locator(".bubble.assistant:has-text('Sunny, the server says.')").wait_for()
        assert calls == [{"city": "Paris"}]
        assert page.locator(".approval").count() == 0

        # The same call again runs without a card.
        e2e_llm.script(
            reply_with_tool("mcp_weather__forecast", {"city": "Paris"}),
            Reply(text="Still sunny."),
        )
        send(page, "And now?")
        page.locator(".bubble.assistant:has-text('Still sunny.')").wait_for()
        assert calls == [{"city": "Paris"}] * 2
        assert page.locator(".approval").count() == 0

        page.goto("/settings/mcp/")
        row = page.locator("table.mcp-allowed-calls tr", has_text=PARIS)
        page.on("dialog", lambda dialog: dialog.accept())
        with page.expect_response("**/revoke/") as revoked:
            row.locator("button:has-text('Revoke')").click()
        assert revoked.value.status == 200
        row.wait_for(state="detached")
