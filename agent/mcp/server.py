"""/mcp: Neotask's memory and tasks as an MCP server (streamable HTTP), for other
tools' agents (Claude Desktop, IDEs, the SDK's client).

The same API tokens as /api/v1/ (checked by core.tokens), the same
registered tools as the agent's, called through agent.tools.call_tool with the
same argument checks, as their owner's main agent, on behalf of the client: what
it writes is the client's (the history's actor, the fact's source). Never the
terminal: only the tools named in TOOLS are offered, and none of them asks for
an approval.

Stateless, JSON responses: every POST is a whole exchange, so any server
process answers any request and nothing is kept between them.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.core.exceptions import ImproperlyConfigured
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from pydantic import AnyUrl

from agent.tools import ToolContext, call_tool, get_tool
from core import tokens
from core.api import TooManyRequests
from core.ownership import Owner
from core.websocket_origin import from_another_site, known_host
from memory.files.paths import MemoryPathError, read_memory_file
from memory.models import Fact, MemoryFile
from memory.workspace import DEFAULT_AGENT

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

PATHS = ("/mcp", "/mcp/")
OWNER_KEY = "neotask.owner"  # where the wrapper leaves the token's owner in the ASGI scope
TOOLS = (
    "search_memory",
    "remember_fact",
    "forget_fact",
    "list_facts",
    "read_memory_file",
    "write_memory_file",
    "schedule_task",
    "list_tasks",
)
FACTS_URI = "neotask://facts"
FILES_URI = "neotask://files/"
LISTED_FILES = 500
HOST_HINT = (
    "Its address goes in NEOTASK_ALLOWED_HOSTS, a trusted page's origin in "
    "NEOTASK_CSRF_TRUSTED_ORIGINS."
)
CLIENT = "MCP client"
SCOPE = "mcp"  # core.tokens' scope of the tokens /mcp takes (sessions_app.models.Api.MCP)


@dataclass
class Door:
    """What the chat app, a floor above, tells /mcp when it starts (sessions_app.apps),
    as it tells core.tokens how to check its tokens: how a call counts toward its
    owner's quota (raising core.api.TooManyRequests), and the name its owner gave
    the token presented."""

    admit: Callable[[Owner], Any] | None = None
    token_name: Callable[[str], str | None] | None = None

    def told(self, part: str) -> Callable[..., Any]:
        """The part sessions_app gave, or a clear error (not an assert: -O drops those)."""
        given = getattr(self, part)
        if given is None:
            raise ImproperlyConfigured(f"/mcp was not told its `{part}`: sessions_app sets it")
        return given


door = Door()

server: Server[Any, Any] = Server(
    "neotask",
    instructions=(
        "The user's Neotask memory: search it, keep and forget facts, read and write "
        "memory files (MEMORY.md, memory/*.md), schedule prompts for their agent."
    ),
)


def requesting_owner() -> Owner:
    """The token's owner, put in the request's scope by `application`."""
    request = server.request_context.request
    return request.scope[OWNER_KEY]  # type: ignore[union-attr]


def tool_context(owner: Owner, client: str = CLIENT) -> ToolContext:
    # The owner's program asked, with their token, not the owner: what it writes is
    # the client's in the history and on the facts, and shown to the model as unverified.
    return ToolContext.for_session(owner, "", DEFAULT_AGENT, client=client)


def requesting_client() -> str:
    """The client as its token names it ("MCP client “claude-desktop”")."""
    request = server.request_context.request
    header = request.headers.get("authorization", "") if request is not None else ""
    name = door.told("token_name")(header.partition(" ")[2].strip())
    return f"{CLIENT} “{name}”" if name is not None else CLIENT


@server.list_tools()
async def list_tools() -> list[types.Tool]:
    tools = [get_tool(name) for name in TOOLS]
    return [
        types.Tool(name=tool.name, description=tool.description, inputSchema=tool.parameters)
        for tool in tools
    ]


# validate_input=False: the registry checks the arguments, as it does the agent's,
# and its message is the one a caller sees.
@server.call_tool(validate_input=False)
async def run_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
    owner = requesting_owner()
    try:  # each call counts as a message toward the owner's quota (sessions_app.quotas)
        await database_sync_to_async(door.told("admit"))(owner)
    except TooManyRequests as exc:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=str(exc))], isError=True
        )
    client = await database_sync_to_async(requesting_client)()
    context = await sync_to_async(tool_context)(owner, client)
    output = await call_tool(context, name, json.dumps(arguments), only=TOOLS)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=output.error or output.text)],
        isError=bool(output.error),
    )


def owned_resources(owner: Owner) -> list[types.Resource]:
    files = MemoryFile.objects.owned_by(owner).filter(agent=DEFAULT_AGENT).order_by("path")
    return [
        types.Resource(
            uri=AnyUrl(FACTS_URI),
            name="facts",
            description="Every fact Neotask keeps about you, one per line.",
            mimeType="text/plain",
        ),
        *(
            types.Resource(
                uri=AnyUrl(FILES_URI + row.path),
                name=row.path,
                description=f"Memory file ({row.size} bytes)",
                mimeType="text/markdown",
            )
            for row in files[:LISTED_FILES]
        ),
    ]


def facts_text(owner: Owner) -> str:
    facts = Fact.objects.owned_by(owner).order_by("category", "key")
    return "\n".join(f"{fact.category}/{fact.key}: {fact.value}" for fact in facts)


def resource_text(owner: Owner, uri: str) -> str:
    if uri == FACTS_URI:
        return facts_text(owner)
    if uri.startswith(FILES_URI):
        context = tool_context(owner)
        try:
            text, _ = read_memory_file(context.workspace, uri.removeprefix(FILES_URI))
        except MemoryPathError as exc:
            raise ValueError(str(exc)) from None
        return text
    raise ValueError(f"Unknown resource {uri}: use {FACTS_URI} or {FILES_URI}<path>.")


@server.list_resources()
async def list_resources() -> list[types.Resource]:
    return await database_sync_to_async(owned_resources)(requesting_owner())


@server.read_resource()
async def read_resource(uri: AnyUrl) -> str:
    return await sync_to_async(resource_text, thread_sensitive=False)(requesting_owner(), str(uri))


class SessionManagers:
    """The SDK's session manager runs in a task group it opens itself, normally
    from the server's lifespan; daphne runs no ASGI lifespan, so it is started
    at the first request, once per event loop (a test's server has its own)."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.manager: StreamableHTTPSessionManager | None = None
        self.started = asyncio.Event()
        self.running: asyncio.Task[None] | None = None

    async def current(self) -> StreamableHTTPSessionManager:
        loop = asyncio.get_running_loop()
        if self.manager is None or self.loop is not loop:
            manager = StreamableHTTPSessionManager(server, json_response=True, stateless=True)
            self.loop, self.manager, self.started = loop, manager, asyncio.Event()
            # A context of its own: not the first request's (its log bindings).
            self.running = loop.create_task(
                self.run(manager, self.started), context=contextvars.Context()
            )
        manager, started = self.manager, self.started
        await started.wait()  # requests that came meanwhile wait for it too
        return manager

    @staticmethod
    async def run(manager: StreamableHTTPSessionManager, started: asyncio.Event) -> None:
        async with manager.run():
            started.set()
            await asyncio.Event().wait()  # as long as the process serves


managers = SessionManagers()


async def refuse(
    send: Send, status: int, message: str, challenge: dict[str, str] | None = None
) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json")]
    headers += [
        (name.lower().encode(), value.encode()) for name, value in (challenge or {}).items()
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def wrap(django: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """The HTTP application: /mcp to the MCP server, for a valid API token only,
    never for a page of another site (the MCP transport's DNS-rebinding rule);
    everything else to Django."""

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in PATHS:
            return await django(scope, receive, send)
        if not known_host(scope):
            return await refuse(send, 400, f"/mcp does not answer for this Host. {HOST_HINT}")
        if from_another_site(scope):
            return await refuse(send, 403, f"/mcp does not answer other sites' pages. {HOST_HINT}")
        try:
            owner = await tokens.asgi_authenticate(scope, SCOPE)
        except tokens.TokenRefused as refused:
            return await refuse(send, refused.status, str(refused), refused.headers)
        manager = await managers.current()
        await manager.handle_request({**scope, OWNER_KEY: owner}, receive, send)

    return application
