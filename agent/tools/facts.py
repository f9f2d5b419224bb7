from __future__ import annotations

from typing import Any

from agent.tools.registry import Tool, ToolContext, ToolError, register
from memory.models import Event, EventType, Fact

REMEMBERED_IMPORTANCE = 0.8


def remember_fact(context: ToolContext, arguments: dict[str, Any]) -> str:
    category = Fact.normalise(arguments["category"])
    key = Fact.normalise(arguments["key"])
    value = arguments["value"].strip()
    fact, created = Fact.objects.update_or_create(
        owner=context.owner,
        category=category,
        key=key,
        defaults={"value": value, "source": Fact.Source.AGENT},
    )
    # What made the agent remember this matters too: keep that message handy.
    latest = (
        Event.objects.owned_by(context.owner)
        .filter(session_id=context.session_id, event_type=EventType.USER_MESSAGE)
        .order_by("-id")
        .first()
    )
    if latest is not None and latest.importance < REMEMBERED_IMPORTANCE:
        Event.objects.filter(pk=latest.pk).update(importance=REMEMBERED_IMPORTANCE)
    return f"{'Remembered' if created else 'Updated'} {fact.category}/{fact.key}: {fact.value}"


def forget_fact(context: ToolContext, arguments: dict[str, Any]) -> str:
    category = Fact.normalise(arguments["category"])
    key = Fact.normalise(arguments["key"])
    deleted, _ = Fact.objects.owned_by(context.owner).filter(category=category, key=key).delete()
    if not deleted:
        raise ToolError(f"There is no fact {category}/{key}.")
    return f"Forgot {category}/{key}."


FACT_KEY = {
    "category": {"type": "string", "maxLength": 100, "description": "e.g. preference, person"},
    "key": {"type": "string", "maxLength": 255, "description": "e.g. favourite_color"},
}

register(
    Tool(
        name="remember_fact",
        description=(
            "Save a durable fact about the user or their world (a preference, a person, a "
            "plan). Replaces the value if the category/key exists."
        ),
        parameters={
            "type": "object",
            "properties": {**FACT_KEY, "value": {"type": "string", "maxLength": Fact.MAX_VALUE}},
            "required": ["category", "key", "value"],
        },
        run=remember_fact,
    )
)
register(
    Tool(
        name="forget_fact",
        description="Delete a saved fact that is wrong or no longer true.",
        parameters={"type": "object", "properties": FACT_KEY, "required": ["category", "key"]},
        run=forget_fact,
    )
)
