from __future__ import annotations

from typing import Any

from agent.tools.registry import Ran, Tool, ToolContext, register
from agent.tools.wording import counted
from memory.files.search import FileHit
from memory.search import SearchHit, search_memory

RESULTS = 8
RESULT_CHARS = 300


def search(context: ToolContext, arguments: dict[str, Any]) -> str:
    hits = search_memory(context.owner, arguments["query"], k=RESULTS, agent=context.agent_name)
    lines = [describe(hit) for hit in hits]
    return "\n".join(lines) if lines else NOTHING


NOTHING = "Nothing in memory matches that."


def searched(calls: list[Ran]) -> str:
    found = sum(0 if c.result == NOTHING else len(c.result.splitlines()) for c in calls)
    times = f" {len(calls)} times" if len(calls) > 1 else ""
    return f"Searched memory{times}: {counted(found, 'result')}"


def describe(hit: SearchHit | FileHit) -> str:
    if isinstance(hit, FileHit):
        heading = f"{hit.heading}: " if hit.heading else ""
        return (
            f"[memory file] {heading}{' '.join(hit.text.split())[:RESULT_CHARS]} "
            f"(source: {hit.source})"
        )
    return (
        f"[{hit.event.created_at:%Y-%m-%d %H:%M}] {hit.event.get_event_type_display()}: "
        f"{' '.join(hit.event.text.split())[:RESULT_CHARS]} (source: {hit.source})"
    )


register(
    Tool(
        name="search_memory",
        description=(
            "Search everything said in past conversations (by meaning and by words) and "
            "your memory files for something the user mentioned or was told."
        ),
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string", "maxLength": 2000}},
            "required": ["query"],
        },
        run=search,
        confirm=searched,
    )
)
