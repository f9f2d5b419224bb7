"""Macros as the agent sees them: learned tool chains ("after A with these
arguments, B usually follows"). Which tool uses count as the same A, and the
hint the model reads, are the agent's; what is learned and how confident it
is, the model's (memory.models.Macro).
"""

from __future__ import annotations

import json
import re
from typing import Any

from core.ownership import Owner
from memory.models import Macro

ToolUse = tuple[str, dict[str, Any]]
SUBCOMMAND = re.compile(r"^[a-z][a-z0-9_-]*$")
# Programs whose second word picks what they do: `git status` and `git push`
# are different chains.
WITH_SUBCOMMANDS = frozenset(
    {
        *("apt", "apt-get", "brew", "cargo", "docker", "gh", "git", "go", "helm", "kubectl"),
        *("make", "npm", "pip", "pip3", "pnpm", "poetry", "systemctl", "uv", "yarn"),
    }
)


def command_prefix(command: str) -> str:
    """The program, plus its subcommand for tools that have them: what groups
    terminal commands into chains."""
    words = command.split()
    if len(words) > 1 and words[0] in WITH_SUBCOMMANDS and SUBCOMMAND.match(words[1]):
        return " ".join(words[:2])
    return words[0] if words else ""


def args_pattern(tool: str, arguments: dict[str, Any]) -> str | None:
    """What of A's arguments the chain depends on: for the terminal, the
    command's prefix (`git status`); for other tools, nothing."""
    if tool == "terminal" and isinstance(arguments.get("command"), str):
        return command_prefix(arguments["command"])
    return None


def observe(owner: Owner, previous: ToolUse, current: ToolUse) -> None:
    """Record that `current` followed `previous`."""
    trigger, trigger_args = previous
    Macro.objects.observe(owner, trigger, args_pattern(trigger, trigger_args), *current)


def hint(owner: Owner, tool: str, arguments: dict[str, Any]) -> str | None:
    """A note for the model when a confident chain starts with this tool use."""
    macro = Macro.objects.owned_by(owner).confident(tool, args_pattern(tool, arguments))
    if macro is None:
        return None
    return (
        f"Hint: after {tool}, {macro.next_tool} usually follows ({macro.confidence:.0%} of "
        f"{macro.used_count} times), last with arguments {json.dumps(macro.next_args)}."
    )
