"""An OpenAI-compatible client's own tools (sessions_app.openai_compat): a client
of /v1 that brings its tools has their calls handed back to it, not run here.

The turn (agent.runtime) offers them to the model beside Neotask's own (or
instead of them: [llm] mix_client_tools); a call of one is stored marked
`client` and ends the turn, and the client's next request brings the results
(`ClientTurn.results`), which the same message's turn goes on from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agent.llm import ToolCall
from agent.tools import Tool, ToolContext, ToolError
from agent.tools.registry import JSON_TYPES
from core.ownership import Owner
from memory.models import Event, EventType

NOTHING_WAITS = "None of these tool results answers a call waiting in this chat."


@dataclass(frozen=True)
class ClientTurn:
    """What an OpenAI-compatible client (sessions_app.openai_compat) sends with its
    input. Its system message joins this turn's prompt; its tools are offered to
    the model, and a call of one is not run here: it ends the turn and goes back
    to the client, whose next request brings the `results` the turn goes on from."""

    system: str = ""
    tools: tuple[dict[str, Any], ...] = ()  # OpenAI tool schemas, checked by the caller
    results: tuple[dict[str, str], ...] = ()  # {"tool_call_id", "content"}

    @property
    def tool_names(self) -> set[str]:
        return {tool["function"]["name"] for tool in self.tools}

    def readable_tools(self) -> list[Tool]:
        """The client's tools as agent.text_tool_calls checks a call written as text
        (the embedded Qwen's way): with the arguments of plain types only, so a
        call using others stays text rather than passing unchecked. Never run here."""
        return [readable_tool(schema["function"]) for schema in self.tools]

    def as_json(self) -> dict[str, Any]:
        return {"system": self.system, "tools": list(self.tools), "results": list(self.results)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClientTurn:
        return cls(data["system"], tuple(data["tools"]), tuple(data["results"]))


def readable_tool(function: dict[str, Any]) -> Tool:
    parameters = function.get("parameters") or {}
    given, needed = parameters.get("properties"), parameters.get("required")
    properties = {
        name: spec
        for name, spec in (given.items() if isinstance(given, dict) else ())
        if isinstance(spec, dict) and spec.get("type") in JSON_TYPES
    }
    required = (
        [name for name in needed if isinstance(name, str)] if isinstance(needed, list) else []
    )
    return Tool(
        name=function["name"],
        description=function.get("description", ""),
        parameters={"type": "object", "properties": properties, "required": required},
        run=run_by_the_client,
    )


def run_by_the_client(context: ToolContext, arguments: dict[str, Any]) -> str:
    raise ToolError("This tool is the client's: its calls go back to the client.")


def offered(
    client: ClientTurn | None, own: list[Tool]
) -> tuple[list[Tool], list[dict[str, Any]], set[str]]:
    """A round's tools: those the model may call as text, their schemas, and the
    names of the client's (handed back). A client's turn runs only the tools it
    offered (none if it offered none), unless [llm] mix_client_tools mixes
    Neotask's in (a client's tool wins a shared name)."""
    if client is None:
        return own, [tool.schema() for tool in own], set()
    if not settings.NEOTASK["llm"]["mix_client_tools"]:
        own = []
    own = [tool for tool in own if tool.name not in client.tool_names]
    schemas = [tool.schema() for tool in own] + list(client.tools)
    return own + client.readable_tools(), schemas, client.tool_names


def handed_over(call: ToolCall) -> dict[str, Any]:
    """A call of one of the client's tools, as stored (`client`: it waits for the
    client's result, `pending_client_calls`), not run."""
    return {"id": call.id, "name": call.name, "arguments": call.arguments, "client": True}


def pending_client_calls(owner: Owner, session_id: str) -> tuple[Event | None, dict[str, str]]:
    """The session's latest user message, and the client's tool calls made since
    that wait for their result (id → tool name)."""
    events = Event.objects.owned_by(owner).filter(session_id=session_id)
    message = events.filter(event_type=EventType.USER_MESSAGE).order_by("-pk").first()
    if message is None:
        return None, {}
    since = events.filter(pk__gt=message.pk).order_by("pk")
    calls = since.filter(event_type=EventType.TOOL_CALL, data__client=True)
    pending = {call.data["id"]: call.data["name"] for call in calls}
    for result in since.filter(event_type=EventType.TOOL_RESULT):
        pending.pop((result.data or {}).get("tool_call_id"), None)
    return message, pending


def answered(
    owner: Owner, session_id: str, results: tuple[dict[str, str], ...]
) -> tuple[Event | None, list[dict[str, Any]]]:
    """The message whose turn handed calls to the client, and the client's
    `results` of those still waiting, as their results are stored."""
    message, pending = pending_client_calls(owner, session_id)
    return message, [
        {
            "tool_call_id": result["tool_call_id"],
            "name": pending[result["tool_call_id"]],
            "content": result["content"],
            "is_error": False,
            "client": True,
        }
        for result in results
        if result["tool_call_id"] in pending
    ]
