"""Another MCP server's tool in a real browser: added on the settings page, called
by the (scripted) model, held on its card until the person allows it once."""

from __future__ import annotations

from tests.support.browser import log_in, new_chat, send
from tests.support.mcp_server import served, weather_app
from tests.support.scripted_llm import Reply, reply_with_tool


def test_it_adds_a_server_and_runs_its_tool_only_once_allowed(page, e2e_llm):
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
        assert "mcp_weather__forecast" in card.locator(".command").inner_text()
        assert card.locator("button[value=always]").is_hidden()  # never "always"
        assert calls == []  # nothing runs before the click
        with page.expect_response("**/chat/approval/") as answered:
            card.locator("button[value=once]").click()
        assert answered.value.status == 200
        page.locator(".bubble.assistant:has-text('Sunny, the server says.')").wait_for()
        assert calls == [{"city": "Paris"}]
        assert page.locator(".approval").count() == 0
