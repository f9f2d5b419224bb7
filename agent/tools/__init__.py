"""The agent's tools: JSON-schema definitions in one registry (registry.py), one
module each, which registers itself when loaded; and `call_tool`, the one way
every caller — the agent's turn, compaction's memory flush, the slash commands —
runs one."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from agent.tools.registry import (
    REGISTRY,
    Ran,
    Tool,
    ToolContext,
    ToolError,
    call_text,
    parse_arguments,
    register,
    terminal_enabled,
)

__all__ = [
    "Ran",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolOutput",
    "available_tools",
    "brings_outside_text",
    "call_tool",
    "get_tool",
    "parse_arguments",
    "register",
    "terminal_enabled",
]


def load_builtin_tools() -> None:
    from agent.tools import (  # noqa: F401  (they register themselves)
        facts,
        memory_files,
        search,
        terminal,
    )


# Offered first, in this order; the others in the order they registered. A small
# model leans to the first tools it is shown: Qwen2.5-Coder-0.5B, told four facts
# with schedule_task listed first, scheduled a task (docs/models.md).
FIRST_OFFERED = ("remember_fact", "search_memory", "list_facts", "forget_fact")


def available_tools() -> list[Tool]:
    load_builtin_tools()
    tools = [tool for tool in REGISTRY.values() if tool.enabled()]
    first = {name: rank for rank, name in enumerate(FIRST_OFFERED)}
    return sorted(tools, key=lambda tool: first.get(tool.name, len(first)))


def brings_outside_text(name: str) -> bool:
    """Whether a result of the tool `name` is outside text: any tool's but those of
    the registry that say otherwise (an MCP server's and a client's are)."""
    load_builtin_tools()
    tool = REGISTRY.get(name)
    return tool is None or tool.outside_text


def get_tool(name: str) -> Tool:
    load_builtin_tools()
    tool = REGISTRY.get(name)
    if tool is None or not tool.enabled():
        known = ", ".join(t.name for t in available_tools())
        raise ToolError(f"Unknown tool {name!r}. Available tools: {known}.")
    return tool


log = logging.getLogger(__name__)

LASTING = "lasting"  # ApprovalRequest.Kind.LASTING: the registry loads before the models may

# Asks the person about `subject` (a command, or an MCP tool call: the tool's
# approval_kind); raises ToolError unless they allow it.
Approve = Callable[[str, str], Awaitable[None]]


@dataclass(frozen=True)
class ToolOutput:
    text: str = ""  # the tool's answer
    error: str = ""  # why it failed, said to the person or the model
    arguments: dict[str, Any] | None = None  # as checked; None if they were not valid
    ran: bool = False  # the tool ran (allowed, if it asked), whether or not it failed

    @property
    def for_model(self) -> str:
        return f"Error: {self.error}" if self.error else self.text


async def call_tool(
    context: ToolContext,
    name: str,
    arguments: str,
    *,
    approve: Approve | None = None,
    only: Collection[str] | None = None,
    extra: Collection[Tool] = (),
) -> ToolOutput:
    """Run the tool `name` with its JSON `arguments`: looked up (among `only`, if
    given: the tools offered; in `extra`, the owner's own tools such as their MCP servers', then in
    the registry), the arguments checked against its schema, the person's approval asked
    through `approve` where the tool needs it or where it makes a lasting change
    after outside text entered the turn (refused where nobody can give it),
    then run off the database thread: a command may run for seconds, a search
    embed. Every failure is an output, never an exception."""
    checked: dict[str, Any] | None = None
    ran = False
    try:
        if only is not None and name not in only:
            known = ", ".join(sorted(only)) or "none"
            raise ToolError(f"Unknown tool {name!r}. Available tools: {known}.")
        tool = next((tool for tool in extra if tool.name == name), None) or get_tool(name)
        checked = parse_arguments(tool, arguments)
        if tool.approval_subject is not None:
            subject = await database_sync_to_async(tool.approval_subject)(context, checked)
            if subject is not None:
                if approve is None:
                    raise ToolError(
                        f"{name} needs a person's approval, which nobody can give here."
                    )
                await approve(subject, tool.approval_kind)
        if tool.lasting and context.outside_text:
            # What came from outside may have asked for it: a person decides, each time.
            if approve is None:
                raise ToolError(f"{name} needs a person's approval, which nobody can give here.")
            await approve(call_text(name, checked), LASTING)
        ran = True
        text = await sync_to_async(tool.run, thread_sensitive=False)(context, checked)
        return ToolOutput(text, arguments=checked, ran=True)
    except ToolError as exc:
        return ToolOutput(error=str(exc), arguments=checked, ran=ran)
    except Exception:
        log.exception("tool %s failed", name)
        error = f"the tool {name} failed unexpectedly."
        return ToolOutput(error=error, arguments=checked, ran=ran)
