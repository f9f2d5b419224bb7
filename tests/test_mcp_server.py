"""/mcp, driven by the official MCP SDK's client over a real socket (Neotask's ASGI
application under uvicorn): the tools, their errors, resources, tokens, owners."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from agent.tools import ToolContext, call_tool
from memory.models import Fact
from memory.workspace import DEFAULT_AGENT
from neotask_site.asgi import application
from scheduler.models import ScheduledTask
from sessions_app.models import ApiToken
from tests.support.mcp_server import served

pytestmark = pytest.mark.django_db(transaction=True)

TOOLS = {
    "search_memory",
    "remember_fact",
    "forget_fact",
    "list_facts",
    "read_memory_file",
    "write_memory_file",
    "schedule_task",
    "list_tasks",
}


@pytest.fixture
def mcp_url(transactional_db) -> Any:
    with served(application) as base:
        yield f"{base}/mcp"


def token_for(user) -> str:
    return ApiToken.issue(user, "mcp client")[1]


def with_client(url: str, token: str, use: Callable[[ClientSession], Awaitable[Any]]) -> Any:
    """Runs `use` with an initialised SDK client session, as an MCP host would."""

    async def run() -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx.AsyncClient(headers=headers, timeout=30) as http,
            streamable_http_client(url, http_client=http) as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await use(session)

    return asyncio.run(run())


def call_as(user, name: str, arguments: dict[str, Any]) -> None:
    """A tool called as the agent's tools are, to give `user` memory to find."""
    context = ToolContext.for_session(user, "", DEFAULT_AGENT, by_person=True)
    assert not asyncio.run(call_tool(context, name, json.dumps(arguments))).error


def text_of(result) -> str:
    return "".join(block.text for block in result.content)


def test_it_lists_the_memory_tools_and_never_the_terminal(configure, alice, mcp_url):
    configure("terminal", enabled=True)
    token = token_for(alice)

    async def use(session):
        return (await session.list_tools()).tools

    async def two_at_once():
        # The first requests of a process start the SDK's session manager together.
        clients = [asyncio.to_thread(with_client, mcp_url, token, use) for _ in range(2)]
        return await asyncio.gather(*clients)

    tools, second = asyncio.run(two_at_once())
    assert {tool.name for tool in tools} == TOOLS == {tool.name for tool in second}
    remember = next(tool for tool in tools if tool.name == "remember_fact")
    # One fact, or several at once: each with its category, key and value.
    properties = remember.inputSchema["properties"]
    assert {"category", "key", "value", "facts"} <= set(properties)
    assert properties["facts"]["items"]["required"] == ["category", "key", "value"]


def test_it_calls_each_tool_as_the_agent_would(alice, mcp_url):
    calls = [
        ("remember_fact", {"category": "Preference", "key": "colour", "value": "teal"}),
        ("list_facts", {}),
        ("write_memory_file", {"path": "memory/trips.md", "text": "# Trips\nLisbon in May."}),
        ("read_memory_file", {"path": "memory/trips.md"}),
        ("search_memory", {"query": "Lisbon trip"}),
        ("schedule_task", {"schedule": "every day at 9am", "prompt": "Plan my day"}),
        ("list_tasks", {}),
        ("forget_fact", {"category": "preference", "key": "colour"}),
    ]
    assert {name for name, _ in calls} == TOOLS

    async def use(session):
        answers = {}
        for name, arguments in calls:
            result = await session.call_tool(name, arguments)
            assert not result.isError, (name, text_of(result))
            answers[name] = text_of(result)
        return answers

    answers = with_client(mcp_url, token_for(alice), use)
    assert answers["remember_fact"] == "Remembered preference/colour: teal"
    assert answers["list_facts"] == "preference/colour: teal (unverified)"  # the client wrote it
    assert answers["write_memory_file"] == "Wrote memory/trips.md (22 characters)."
    assert answers["read_memory_file"] == "# Trips\nLisbon in May."
    assert "Lisbon in May" in answers["search_memory"]
    assert answers["schedule_task"].startswith('Scheduled "Plan my day"')
    assert '"Plan my day"' in answers["list_tasks"]
    assert answers["forget_fact"] == "Forgot preference/colour."
    assert not Fact.objects.filter(owner=alice).exists()
    task = ScheduledTask.objects.get(owner=alice)
    assert task.cron_expr == "0 9 * * *" and task.prompt == "Plan my day"


def test_it_answers_a_bad_argument_with_the_tools_own_error(alice, mcp_url):
    bad = [
        ("remember_fact", {"category": "x", "key": "y"}),
        ("remember_fact", {"category": "x", "key": "y", "value": 3}),
        ("list_facts", {"colour": "teal"}),
        ("write_memory_file", {"path": "../escape.md", "text": "x"}),
        ("schedule_task", {"schedule": "whenever you like", "prompt": "x"}),
        ("terminal", {"command": "ls"}),
    ]

    async def use(session):
        return [await session.call_tool(name, arguments) for name, arguments in bad]

    results = with_client(mcp_url, token_for(alice), use)
    assert all(result.isError for result in results)
    messages = [text_of(result) for result in results]
    assert messages[0] == "remember_fact needs the argument 'value'."
    assert messages[1] == "remember_fact: 'value' must be a string."
    assert messages[2].startswith("list_facts has no argument 'colour'")
    assert messages[3] == "'../escape.md' leads out of the workspace ('..' is not allowed)."
    assert messages[4] and "unexpectedly" not in messages[4]  # the schedule parser's own words
    assert messages[5].startswith("Unknown tool 'terminal'. Available tools: ")
    assert not Fact.objects.exists() and not ScheduledTask.objects.exists()


def test_it_holds_tool_calls_to_the_owners_quota(configure, alice, bob, mcp_url):
    configure("quotas", messages_per_minute=2)

    async def use(session):
        return [await session.call_tool("list_facts", {}) for _ in range(3)]

    results = with_client(mcp_url, token_for(alice), use)
    assert [result.isError for result in results] == [False, False, True]
    assert "this minute" in text_of(results[2])
    # Bob's quota is his own.
    assert not with_client(mcp_url, token_for(bob), use)[0].isError


def test_it_keeps_each_owner_to_their_own_memory(alice, bob, mcp_url):
    call_as(bob, "remember_fact", {"category": "secret", "key": "pin", "value": "4321"})
    call_as(bob, "write_memory_file", {"path": "MEMORY.md", "text": "bob only"})

    async def use(session):
        listed = text_of(await session.call_tool("list_facts", {}))
        forgot = await session.call_tool("forget_fact", {"category": "secret", "key": "pin"})
        read = await session.call_tool("read_memory_file", {"path": "MEMORY.md"})
        resources = (await session.list_resources()).resources
        facts = (await session.read_resource("neotask://facts")).contents[0].text
        return listed, forgot, read, resources, facts

    listed, forgot, read, resources, facts = with_client(mcp_url, token_for(alice), use)
    assert listed == "There are no facts yet." and "4321" not in facts
    assert forgot.isError and text_of(forgot) == "There is no fact secret/pin."
    assert "bob only" not in text_of(read)
    assert [str(resource.uri) for resource in resources] == ["neotask://facts"]
    assert Fact.objects.get(owner=bob).value == "4321"


def test_it_serves_facts_and_memory_files_as_resources(alice, mcp_url):
    call_as(alice, "remember_fact", {"category": "person", "key": "sister", "value": "Ana"})
    call_as(alice, "write_memory_file", {"path": "memory/people.md", "text": "Ana: sister"})

    async def use(session):
        uris = [str(resource.uri) for resource in (await session.list_resources()).resources]
        facts = (await session.read_resource("neotask://facts")).contents[0].text
        people = (await session.read_resource("neotask://files/memory/people.md")).contents[0].text
        return uris, facts, people

    uris, facts, people = with_client(mcp_url, token_for(alice), use)
    assert uris == ["neotask://facts", "neotask://files/memory/people.md"]
    assert facts == "person/sister: Ana"
    assert people == "Ana: sister"


@pytest.mark.parametrize("header", [None, "Bearer nt_abc_wrong", "Basic YWxpY2U6eA=="])
def test_it_refuses_a_missing_or_bad_token(header, alice, mcp_url):
    headers = {"Authorization": header} if header else {}
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    response = httpx.post(mcp_url, json=initialize, headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert "API token" in response.json()["error"]


def test_it_refuses_a_revoked_token(alice, mcp_url):
    token = token_for(alice)
    ApiToken.objects.get(owner=alice).revoke()

    async def use(session):
        return await session.list_tools()

    with pytest.raises(Exception) as failure:
        with_client(mcp_url, token, use)
    assert "401" in repr(failure.value) or "401" in str(failure.value.__cause__)


def test_a_door_nobody_set_up_says_what_is_missing():
    from django.core.exceptions import ImproperlyConfigured

    from agent.mcp.server import Door

    with pytest.raises(ImproperlyConfigured, match="not told its `admit`"):
        Door().told("admit")
    assert Door(admit=print).told("admit") is print
