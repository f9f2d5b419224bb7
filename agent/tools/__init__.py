"""The agent's tools: JSON-schema definitions in one registry (registry.py), one
module each, which registers itself when loaded."""

from __future__ import annotations

from agent.tools.registry import (
    REGISTRY,
    Tool,
    ToolContext,
    ToolError,
    parse_arguments,
    register,
    terminal_enabled,
)

__all__ = [
    "Tool",
    "ToolContext",
    "ToolError",
    "available_tools",
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


def available_tools() -> list[Tool]:
    load_builtin_tools()
    return [tool for tool in REGISTRY.values() if tool.enabled()]


def get_tool(name: str) -> Tool:
    load_builtin_tools()
    tool = REGISTRY.get(name)
    if tool is None or not tool.enabled():
        known = ", ".join(t.name for t in available_tools())
        raise ToolError(f"Unknown tool {name!r}. Available tools: {known}.")
    return tool
