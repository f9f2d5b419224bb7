"""The tools' registry: what a tool is, the tools by name, and their arguments checked
against their JSON schemas. Each tool module registers itself here."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from core.history import Actor
from core.ownership import Owner
from memory.workspace import workspace_dir


class ToolError(Exception):
    """A tool failed in a way the model should see and may correct."""


@dataclass(frozen=True)
class ToolContext:
    owner: Owner
    session_id: str
    agent_name: str
    workspace: Path
    trusted: bool = False  # scheduled tasks marked trusted skip approvals
    # The tool_call event of the agent's call, what its writes came from; None
    # when a person runs the tool (a slash command).
    event_id: int | None = None
    by_person: bool = False  # typed by the owner, not decided by the agent
    task: str = ""  # the scheduled task whose run called it
    # Outside text (a tool's answer, a recalled document) is in the turn: a
    # lasting change then waits for a person's click and is kept marked unverified.
    outside_text: bool = False
    client: str = ""  # the API client that called it (/mcp), named for the history

    @property
    def actor(self) -> Actor:
        """Who the history says made the tool's changes."""
        if self.client:
            return Actor.client(self.client)
        if self.by_person:
            return Actor.user(self.owner)
        return Actor.task(self.task) if self.task else Actor.agent(self.agent_name)

    @property
    def unverified(self) -> bool:
        """Whether what the call writes came from outside the person's own words."""
        return self.outside_text or bool(self.client)

    @classmethod
    def for_session(
        cls,
        owner: Owner,
        session_id: str,
        agent_name: str,
        *,
        trusted: bool = False,
        by_person: bool = False,
        task: str = "",
        client: str = "",
    ) -> ToolContext:
        """The context of a tool called in a session of `agent_name`: its workspace made."""
        workspace = workspace_dir(owner.pk, agent_name)
        return cls(
            owner,
            session_id,
            agent_name,
            workspace,
            trusted,
            by_person=by_person,
            task=task,
            client=client,
        )


@dataclass(frozen=True)
class Ran:
    """A call a turn ran, with its checked arguments: what it did, for the person
    (agent.tools.confirmation)."""

    name: str
    arguments: dict[str, Any]
    result: str = ""
    error: str = ""
    event_id: int | None = None  # its tool_call event


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[[ToolContext, dict[str, Any]], str]
    # Returns the command that needs the user's approval, or None when allowed.
    approval_subject: Callable[[ToolContext, dict[str, Any]], str | None] | None = None
    enabled: Callable[[], bool] = field(default=lambda: True)
    approval_kind: str = "terminal"  # an ApprovalRequest.Kind: what the card asks about
    # What its answer may carry: text from outside the person and the agent (another
    # server's answer, a file, a search of memory and documents). Untrusted by
    # default; a tool whose answer is only the agent's own says False.
    outside_text: bool = True
    # It makes a change that outlasts the turn (memory, facts, the schedule): asked
    # for, once outside text is in the turn (agent.tools.call_tool).
    lasting: bool = False
    # What the schema cannot say (one of two forms of arguments, a list's items):
    # checked with it, raising ToolError, before any approval or run.
    check: Callable[[dict[str, Any]], Any] | None = None
    # What its calls did, in a few words for the person, when a turn ends on them
    # without an answer (agent.tools.confirmation); None: "Ran <name>".
    confirm: Callable[[list[Ran]], str] | None = None

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


REGISTRY: dict[str, Tool] = {}
MAX_ARGUMENTS_BYTES = 64 * 1024


def call_text(name: str, arguments: dict[str, Any]) -> str:
    """A call as its approval card shows it (and "Allow always" remembers an MCP
    call): the arguments in one form however the model ordered or spaced them."""
    return f"{name} {json.dumps(arguments, ensure_ascii=False, sort_keys=True)}"


def register(tool: Tool) -> Tool:
    if tool.name in REGISTRY:
        raise ValueError(f"tool {tool.name!r} is registered twice")
    REGISTRY[tool.name] = tool
    return tool


JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def parse_arguments(tool: Tool, raw: str) -> dict[str, Any]:
    """The model's JSON arguments, checked against the tool's schema."""
    if len(raw.encode()) > MAX_ARGUMENTS_BYTES:
        raise ToolError(f"Arguments for {tool.name} are larger than {MAX_ARGUMENTS_BYTES} bytes.")
    try:
        arguments = json.loads(raw or "{}")
    except ValueError as exc:
        raise ToolError(f"Arguments for {tool.name} are not valid JSON ({exc}).") from None
    if not isinstance(arguments, dict):
        raise ToolError(f"Arguments for {tool.name} must be a JSON object.")
    properties = tool.parameters.get("properties", {})
    for name in tool.parameters.get("required", []):
        if name not in arguments:
            raise ToolError(f"{tool.name} needs the argument {name!r}.")
    for name, value in arguments.items():
        spec = properties.get(name)
        if spec is None:
            raise ToolError(f"{tool.name} has no argument {name!r}; it takes {sorted(properties)}.")
        # Another server's schema (agent.mcp.client) may use what this check does not
        # know (a union, no type): that server checks those arguments itself.
        kind = spec.get("type") if isinstance(spec, dict) else None
        expected = JSON_TYPES.get(kind) if isinstance(kind, str) else None
        if expected is None:
            continue
        if not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
            raise ToolError(f"{tool.name}: {name!r} must be a {spec['type']}.")
        if isinstance(value, str):
            if not value.strip() and name in tool.parameters.get("required", []):
                raise ToolError(f"{tool.name}: {name!r} must not be empty.")
            if len(value) > spec.get("maxLength", 10_000):
                raise ToolError(f"{tool.name}: {name!r} is longer than {spec.get('maxLength')}.")
    if tool.check is not None:
        tool.check(arguments)
    return arguments


def terminal_enabled() -> bool:
    return settings.NEOTASK["terminal"]["enabled"]
