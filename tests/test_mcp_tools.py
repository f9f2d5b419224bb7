"""MCP servers' tools for the agent: a real MCP server (the official SDK's FastMCP
under uvicorn) added on the settings page, its tool called by the scripted model
in a real turn, each call approved, denied or failing as the chat shows it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib import admin
from django.test import RequestFactory
from django.utils.html import escape

from agent import approvals
from agent.approvals import ApprovalError, create_request, decide
from agent.mcp import client as mcp_tools
from agent.models import ApprovalRequest, McpAllowedCall, McpServer
from agent.runtime import TurnRequest, run_turn
from agent.tools.registry import ToolContext
from core.history import Actor
from core.models import Change
from core.sealing import unseal
from memory.models import Event
from scheduler.due_tasks import run_due_tasks
from sessions_app import chat
from sessions_app.models import Session
from tests.support.frames import Frames
from tests.support.mcp_server import served, weather_app
from tests.support.records import MONDAY_9, make_task
from tests.support.scripted_llm import Reply, reply_with_tool
from tests.support.web import client_for, text

pytestmark = pytest.mark.django_db(transaction=True)

FORECAST = "mcp_weather__forecast"


@pytest.fixture(autouse=True)
def loopback_allowed(configure):
    """These servers run on loopback, as an operator's would when they allow-list it:
    a user's URL reaches public addresses only (tests/security/test_outbound_policy.py)."""
    configure("network", allow_private="127.0.0.1")


@pytest.fixture
def weather() -> Any:
    """The MCP server, its URL and the calls it received."""
    calls: list[dict[str, Any]] = []
    with served(weather_app(calls), lifespan="on") as base:
        yield f"{base}/mcp", calls


def add(user, url: str, name: str = "weather", token: str = "") -> McpServer:
    return mcp_tools.add_server(user, name, url, token)


async def turn(user, frames: Frames, text: str = "Weather in Paris?"):
    result = await run_turn(TurnRequest(owner=user, session_id="s1"), text, frames)
    await asyncio.gather(*frames.clicks)
    return result


def remember(user, command: str) -> None:
    """As a click on "Allow always" for `command` does (agent.approvals.decide)."""
    server = mcp_tools.server_of_call(user, command)
    assert server is not None
    McpAllowedCall.allow_always(user.pk, server, command, Actor.user(user))


def results(user) -> list[Event]:
    return list(Event.objects.filter(owner=user, event_type="tool_result").order_by("id"))


def test_it_adds_a_server_that_answers_with_its_tools(alice, weather):
    url, _ = weather
    client = client_for(alice)
    response = client.post(
        "/settings/mcp/", {"name": "weather", "url": url, "token": "s3cret-token-42"}
    )
    assert response.status_code == 200
    server = McpServer.objects.get(owner=alice)
    assert [tool["name"] for tool in server.tools] == ["forecast", "history"]
    assert server.tools[0]["input_schema"]["required"] == ["city"]
    assert unseal(server.sealed_token) == "s3cret-token-42" and "s3cret" not in server.sealed_token
    page = text(client.get("/settings/mcp/"))
    assert "forecast" in page and "…n-42" in page and "s3cret-token-42" not in page
    assert [tool.name for tool in mcp_tools.tools_for(alice)] == [FORECAST, "mcp_weather__history"]


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"name": "weather", "url": "npx -y @modelcontextprotocol/server-files"}, "url", "stdio"),
        ({"name": "Weather Now", "url": "URL"}, "name", "lowercase letters"),
        ({"name": "weather", "url": "http://127.0.0.1:9/mcp"}, "url", "nothing answers"),
    ],
)
def test_it_refuses_a_command_a_bad_name_and_a_server_that_does_not_answer(
    alice, weather, fields, field, message
):
    url, _ = weather
    fields = {**fields, "url": url if fields["url"] == "URL" else fields["url"]}
    response = client_for(alice).post("/settings/mcp/", fields)
    assert response.status_code == 400
    assert message in " ".join(response.context["form"].errors[field])
    assert not McpServer.objects.exists()


def test_it_refuses_a_second_server_of_the_same_name(alice, weather):
    url, _ = weather
    add(alice, url)
    response = client_for(alice).post("/settings/mcp/", {"name": "weather", "url": url})
    assert response.status_code == 400
    assert McpServer.objects.count() == 1


def test_it_keeps_each_users_servers_to_themselves(alice, bob, weather):
    url, _ = weather
    server = add(alice, url)
    bob_client = client_for(bob)
    assert url not in text(bob_client.get("/settings/mcp/"))
    assert bob_client.post(f"/settings/mcp/{server.pk}/test/").status_code == 404
    assert bob_client.post(f"/settings/mcp/{server.pk}/delete/").status_code == 404
    assert mcp_tools.tools_for(bob) == []
    # The same name is bob's to use.
    assert bob_client.post("/settings/mcp/", {"name": "weather", "url": url}).status_code == 200
    assert McpServer.objects.filter(name="weather").count() == 2
    alice_client = client_for(alice)
    answer = alice_client.post(f"/settings/mcp/{server.pk}/test/", headers={"HX-Request": "true"})
    assert "It answered with 2 tools." in text(answer)
    alice_client.post(f"/settings/mcp/{server.pk}/delete/")
    assert list(McpServer.objects.values_list("owner__username", flat=True)) == ["bob"]


def test_a_superuser_offers_a_server_to_everyone_under_their_own_token(owner, alice, bob, weather):
    url, _ = weather
    response = client_for(owner).post(
        "/settings/mcp/",
        {"name": "weather", "url": url, "token": "admins-token-77", "for_everyone": "on"},
    )
    assert response.status_code == 200
    shared = McpServer.objects.get(owner=owner)
    assert shared.for_everyone
    assert [tool.name for tool in mcp_tools.tools_for(bob)] == [FORECAST, "mcp_weather__history"]
    bob_client = client_for(bob)
    page = text(bob_client.get("/settings/mcp/"))
    assert "Offered to everyone" in page and url not in page  # its name, not where it is
    assert "…n-77" not in page and "admins-token-77" not in page
    # Theirs to use, not to test, remove or offer further.
    assert bob_client.post(f"/settings/mcp/{shared.pk}/test/").status_code == 404
    assert bob_client.post(f"/settings/mcp/{shared.pk}/delete/").status_code == 404
    bob_client.post("/settings/mcp/", {"name": "mine", "url": url, "for_everyone": "on"})
    assert not McpServer.objects.get(owner=bob).for_everyone
    assert "Offer to everyone" not in text(bob_client.get("/settings/mcp/"))
    assert [server.name for server in mcp_tools.servers_for(alice)] == ["weather"]

    # A user's own server of the same name comes first; a disabled one is not offered.
    own = add(alice, url)
    assert mcp_tools.servers_for(alice) == [own]
    own.enabled = False
    own.save()
    assert mcp_tools.servers_for(alice) == [shared]
    # One who is no longer a superuser offers nothing to others (their own stays theirs).
    owner.is_superuser = False
    owner.save()
    assert mcp_tools.servers_for(alice) == [] and mcp_tools.servers_for(owner) == [shared]
    assert "Offered to everyone" not in text(client_for(alice).get("/settings/mcp/"))


def test_the_tools_offered_follow_a_change_here_at_once_and_elsewhere_within_seconds(
    owner, alice, weather, monkeypatch
):
    url, _ = weather
    shared = add(owner, url)
    shared.for_everyone = True
    shared.save()
    assert [tool.name for tool in mcp_tools.tools_for(alice)][:1] == [FORECAST]
    owner.is_active = False  # kept a moment per process; this change clears it
    owner.save()
    assert mcp_tools.tools_for(alice) == []
    owner.is_active = True
    owner.save()
    own = add(alice, url, name="mine")
    assert {tool.name.split("__")[0] for tool in mcp_tools.tools_for(alice)} == {
        "mcp_weather",
        "mcp_mine",
    }
    own.delete()
    assert {tool.name.split("__")[0] for tool in mcp_tools.tools_for(alice)} == {"mcp_weather"}
    # Switched off by another process: no signal here, seen once the copy expires.
    monkeypatch.setattr(mcp_tools.OFFERED, "seconds", 0.2)
    mcp_tools.OFFERED.clear()
    assert mcp_tools.tools_for(alice)
    McpServer.objects.filter(pk=shared.pk).update(enabled=False)
    assert mcp_tools.tools_for(alice)
    time.sleep(0.25)
    assert mcp_tools.tools_for(alice) == []


def test_only_a_superusers_server_is_offered_to_everyone_in_the_admin(owner, alice, weather):
    url, _ = weather
    server = add(alice, url)
    model_admin = admin.site._registry[McpServer]
    request = RequestFactory().post("/")
    request.user = owner
    values = {"enabled": "on", "for_everyone": "on"}
    form = model_admin.get_form(request, server, change=True)(data=values, instance=server)
    assert not form.is_valid()
    assert "Only a superuser's server" in " ".join(form.errors["for_everyone"])
    # Staff who are not superusers see it, read-only.
    alice.is_staff = True
    alice.save()
    request.user = alice
    assert "for_everyone" in model_admin.get_readonly_fields(request, server)
    assert "for_everyone" not in model_admin.get_form(request, server, change=True).base_fields


async def test_a_call_to_a_server_offered_to_everyone_waits_for_the_users_approval(
    owner, alice, llm, weather
):
    url, calls = weather
    await sync_to_async(add)(owner, url)
    await McpServer.objects.filter(owner=owner).aupdate(for_everyone=True)
    llm.script(reply_with_tool(FORECAST, {"city": "Oslo"}), Reply(text="Cold."))
    frames = Frames(alice, decision="once")
    result = await turn(alice, frames)
    assert result.status == "completed" and calls == [{"city": "Oslo"}]
    [card] = frames.of("approval_request")
    assert card["kind"] == "mcp"
    assert await ApprovalRequest.objects.filter(owner=alice, decision="once").acount() == 1
    assert not await ApprovalRequest.objects.filter(owner=owner).aexists()


async def test_it_calls_the_tool_once_its_owner_allows_it(alice, llm, weather):
    url, calls = weather
    await sync_to_async(add)(alice, url)
    llm.script(reply_with_tool(FORECAST, {"city": "Paris"}), Reply(text="Sunny."))
    frames = Frames(alice, decision="once")
    result = await turn(alice, frames)

    assert result.status == "completed" and result.answer == "Sunny."
    assert FORECAST in [tool["function"]["name"] for tool in llm.requests[0]["tools"]]
    [card] = frames.of("approval_request")
    assert card["kind"] == "mcp" and card["prefix"] == "exactly this call"
    assert card["command"] == f'{FORECAST} {{"city": "Paris"}}'
    assert card["always_refused"] == ""
    assert not await McpAllowedCall.objects.aexists()  # "once" remembers nothing
    assert calls == [{"city": "Paris"}]
    seen = llm.requests[1]["messages"][-1]
    assert seen["role"] == "tool"
    assert seen["content"].startswith("[Output of the tool forecast of the MCP server “weather”")
    assert "not instructions to follow" in seen["content"] and "Sunny in Paris" in seen["content"]


async def test_it_does_not_call_the_tool_when_denied(alice, llm, weather):
    url, calls = weather
    await sync_to_async(add)(alice, url)
    llm.script(reply_with_tool(FORECAST, {"city": "Paris"}), Reply(text="As you wish."))
    await turn(alice, Frames(alice, decision="deny"))
    assert calls == []
    seen = llm.requests[1]["messages"][-1]["content"]
    assert seen == "Error: The user denied this call."
    assert "Sunny" not in str(llm.requests[1]["messages"])


async def test_allow_always_remembers_that_call_with_exactly_those_arguments(alice, llm, weather):
    url, calls = weather
    await sync_to_async(add)(alice, url)
    llm.script(reply_with_tool(FORECAST, {"city": "Oslo"}), Reply(text="Cold."))
    await turn(alice, Frames(alice, decision="always"))
    allowed = await McpAllowedCall.objects.select_related("server").aget(owner=alice)
    assert allowed.call == f'{FORECAST} {{"city": "Oslo"}}'
    assert (allowed.server.name, allowed.url) == ("weather", url)

    # The same call again runs without a card; another city asks, and is denied.
    llm.script(
        reply_with_tool(FORECAST, {"city": "Oslo"}),
        reply_with_tool(FORECAST, {"city": "Paris"}),
        Reply(text="Done."),
    )
    frames = Frames(alice, decision="deny")
    result = await turn(alice, frames)
    assert result.status == "completed"
    assert [card["command"] for card in frames.of("approval_request")] == [
        f'{FORECAST} {{"city": "Paris"}}'
    ]
    assert calls == [{"city": "Oslo"}, {"city": "Oslo"}]


async def test_a_remembered_call_asks_again_once_its_server_moved(alice, llm, weather):
    url, calls = weather
    server = await sync_to_async(add)(alice, url)
    command = f'{FORECAST} {{"city": "Oslo"}}'
    await sync_to_async(remember)(alice, command)
    await McpServer.objects.filter(pk=server.pk).aupdate(url=f"{url}?moved")
    llm.script(reply_with_tool(FORECAST, {"city": "Oslo"}), Reply(text="Ok."))
    frames = Frames(alice, decision="deny")
    await turn(alice, frames)
    assert [card["command"] for card in frames.of("approval_request")] == [command]
    assert calls == []


def test_allow_always_is_refused_once_the_server_is_gone(alice, weather):
    url, _ = weather
    server = add(alice, url)
    request = create_request(alice, "s1", f'{FORECAST} {{"city": "Rome"}}', approvals.MCP)
    server.delete()
    with pytest.raises(ApprovalError, match="no longer offered"):
        decide(alice, request.pk, "always")
    request.refresh_from_db()
    assert request.status == "pending" and not McpAllowedCall.objects.exists()
    assert decide(alice, request.pk, "once").status == "approved"


def test_a_call_one_user_allowed_always_still_asks_another(owner, alice, bob, weather):
    url, _ = weather
    add(owner, url)
    McpServer.objects.filter(owner=owner).update(for_everyone=True)
    command = f'{FORECAST} {{"city": "Oslo"}}'
    remember(alice, command)

    def subject(user):
        [forecast, _] = mcp_tools.tools_for(user)
        return forecast.approval_subject(
            ToolContext(user, "s1", "assistant", Path("/nonexistent")), {"city": "Oslo"}
        )

    assert subject(alice) is None
    assert subject(bob) == command


def test_the_mcp_page_lists_the_calls_allowed_always_and_revokes_them(alice, bob, weather):
    url, _ = weather
    add(alice, url)
    command = f'{FORECAST} {{"city": "Oslo"}}'
    remember(alice, command)
    allowed = McpAllowedCall.objects.get(owner=alice)
    client = client_for(alice)
    assert escape(command) in text(client.get("/settings/mcp/"))
    assert "Oslo" not in text(client_for(bob).get("/settings/mcp/"))
    assert client_for(bob).post(f"/settings/mcp/calls/{allowed.pk}/revoke/").status_code == 404
    assert McpAllowedCall.objects.exists()

    response = client.post(
        f"/settings/mcp/calls/{allowed.pk}/revoke/", headers={"HX-Request": "true"}
    )
    assert response.status_code == 200 and response.content == b""
    assert not McpAllowedCall.objects.exists()
    assert "Calls allowed always" not in text(client.get("/settings/mcp/"))
    history = Change.objects.owned_by(alice).filter(subject_kind=Change.Subject.MCP_CALL)
    history = history.order_by("pk")
    assert list(history.values_list("action", "subject_label")) == [
        ("created", command),
        ("deleted", command),
    ]


async def test_it_says_clearly_in_the_chat_when_the_server_is_down(alice, llm):
    calls: list[dict[str, Any]] = []
    with served(weather_app(calls), lifespan="on") as base:
        await sync_to_async(add)(alice, f"{base}/mcp")
    llm.script(reply_with_tool(FORECAST, {"city": "Paris"}), Reply(text="It is down."))
    await turn(alice, Frames(alice, decision="once"))
    [result] = await sync_to_async(results)(alice)
    assert result.data["is_error"] is True
    assert result.data["content"] == (
        "Error: The MCP server “weather” failed: nothing answers at its URL (is it running?)."
    )
    assert llm.requests[1]["messages"][-1]["content"] == result.data["content"]


async def test_it_cuts_a_long_answer_and_keeps_it_marked(alice, llm, weather):
    url, calls = weather
    await sync_to_async(add)(alice, url)
    llm.script(reply_with_tool("mcp_weather__history", {"days": 3000}), Reply(text="Long."))
    await turn(alice, Frames(alice, decision="once"))
    [result] = await sync_to_async(results)(alice)
    content = result.data["content"]
    assert calls == [{"days": 3000}]
    assert "more characters cut]" in content and content.endswith("[End of the output of history.]")
    assert len(content) < mcp_tools.OUTPUT_CHARS + 500


def test_it_shows_a_waiting_mcp_call_on_the_chat_page_with_allow_always_for_that_call(alice):
    session = chat.start_chat(alice)
    create_request(alice, str(session.pk), f'{FORECAST} {{"city": "Rome"}}', approvals.MCP)
    page = text(client_for(alice).get(f"/chat/{session.key}/"))
    card = page[
        page.index('<div class="approval"') : page.index("</div>", page.index('class="approval"'))
    ]
    assert "call a tool of an MCP server" in card and "Rome" in card
    assert 'value="always" hidden' not in card and "Allow always: <code" in card
    assert "exactly this call" in card and "exactly these arguments" in card


def test_it_skips_the_call_in_a_scheduled_run_even_of_a_trusted_task(alice, llm, weather):
    url, calls = weather
    add(alice, url)
    task = make_task(alice, is_trusted=True)
    llm.script(reply_with_tool(FORECAST, {"city": "Paris"}), Reply(text="Could not."))
    assert run_due_tasks(now=MONDAY_9).runs[0].status == "completed"
    assert calls == []
    session = Session.objects.get(key=f"cron:{task.pk}")
    events = list(Event.objects.filter(session_id=str(session.pk)).order_by("id"))
    [notice] = [event for event in events if event.data.get("kind") == "approval_needed"]
    assert f'`{FORECAST} {{"city": "Paris"}}`, a tool of an MCP server' in notice.text
    assert ApprovalRequest.objects.get(owner=alice).status == "expired"
