from __future__ import annotations

import re
from typing import Any

from django.db.models import Q

from agent.tools import Tool, ToolContext, register
from memory.models import Event, EventType

RESULTS = 8
WORD = re.compile(r"\w{3,}")


def search_memory(context: ToolContext, arguments: dict[str, Any]) -> str:
    # Until hybrid memory search lands: the newest messages sharing a word
    # with the query.
    words = WORD.findall(arguments["query"].lower())[:10]
    if not words:
        return "The query has no words to search for."
    match = Q()
    for word in words:
        match |= Q(text__icontains=word)
    events = (
        Event.objects.owned_by(context.owner)
        .filter(match, event_type__in=[EventType.USER_MESSAGE, EventType.ASSISTANT_RESPONSE])
        .order_by("-created_at", "-id")[:RESULTS]
    )
    lines = [
        f"[{e.created_at:%Y-%m-%d %H:%M}] {e.get_event_type_display()}: {e.text[:300]}"
        for e in events
    ]
    return "\n".join(lines) if lines else "Nothing in memory matches that."


register(
    Tool(
        name="search_memory",
        description="Search past conversations for something the user said or was told.",
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string", "maxLength": 2000}},
            "required": ["query"],
        },
        run=search_memory,
    )
)
