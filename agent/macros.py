"""Macros: learned tool chains ("after A with these arguments, B usually follows").

`confidence` is the share of the times A was followed by another tool in
which that tool was B; `used_count` counts how often the chain A → B ran.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F

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


def chains_from(owner: Any, tool: str, pattern: str | None):  # -> QuerySet[Macro]
    return Macro.objects.owned_by(owner).filter(trigger_tool=tool, trigger_args_pattern=pattern)


def observe(owner: Any, previous: ToolUse, current: ToolUse) -> None:
    """Record that `current` followed `previous` and refresh the confidences."""
    trigger, trigger_args = previous
    pattern = args_pattern(trigger, trigger_args)
    with transaction.atomic():
        macro, _ = Macro.objects.get_or_create(
            owner=owner,
            trigger_tool=trigger,
            trigger_args_pattern=pattern,
            next_tool=current[0],
        )
        Macro.objects.filter(pk=macro.pk).update(
            used_count=F("used_count") + 1, next_args=current[1]
        )
        siblings = list(chains_from(owner, trigger, pattern))
        total = sum(m.used_count for m in siblings)
        for sibling in siblings:
            sibling.confidence = sibling.used_count / total
        Macro.objects.bulk_update(siblings, ["confidence"])


def hint(owner: Any, tool: str, arguments: dict[str, Any]) -> str | None:
    """A note for the model when a confident chain starts with this tool use."""
    options = settings.NEOTASK["macros"]
    macro = (
        chains_from(owner, tool, args_pattern(tool, arguments))
        .filter(is_disabled=False)
        .filter(confidence__gte=options["hint_confidence"], used_count__gte=options["min_uses"])
        .order_by("-confidence", "-used_count")
        .first()
    )
    if macro is None:
        return None
    return (
        f"Hint: after {tool}, {macro.next_tool} usually follows ({macro.confidence:.0%} of "
        f"{macro.used_count} times), last with arguments {json.dumps(macro.next_args)}."
    )
