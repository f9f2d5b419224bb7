"""The agent's tools as the model calls them (arguments parsed from a call's
JSON), and the terminal as it runs after "Allow once"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User

from agent.tools import ToolContext, ToolError, get_tool, parse_arguments


def context_for(user: User) -> ToolContext:
    return ToolContext(owner=user, session_id="s1", agent_name="main", workspace=Path("/tmp"))


def use_tool(user: User, tool_name: str, /, **arguments: Any) -> str:
    tool = get_tool(tool_name)
    return tool.run(context_for(user), parse_arguments(tool, json.dumps(arguments)))


def run_terminal(context: ToolContext, command: str) -> str:
    """The terminal's output, or `stopped: <why>` when it stopped the command."""
    try:
        return get_tool("terminal").run(context, {"command": command})
    except ToolError as exc:
        return f"stopped: {exc}"
