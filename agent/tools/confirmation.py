"""What a turn did, said plainly when it ends on tool calls without an answer of
its own (a small model saves a fact and writes nothing, or asks for the same call
again): a sentence per tool, from the calls that ran, each tool saying what its
calls did (`Tool.confirm`)."""

from __future__ import annotations

from collections.abc import Sequence

from agent.tools import load_builtin_tools
from agent.tools.registry import REGISTRY, Ran


def confirmation(ran: Sequence[Ran]) -> str:
    load_builtin_tools()
    done: dict[str, list[Ran]] = {}  # by tool, in the order they first ran
    failed: list[str] = []
    for call in ran:
        if call.error:
            failed.append(f"{call.name} failed: {call.error}")
        else:
            done.setdefault(call.name, []).append(call)
    said = []
    for name, calls in done.items():
        tool = REGISTRY.get(name)
        if tool is not None and tool.confirm is not None:
            said.append(tool.confirm(calls))
        else:
            said.append(f"Ran {name}" + (f" {len(calls)} times" if len(calls) > 1 else ""))
    return "\n\n".join([*said, *failed])
