from __future__ import annotations

from typing import Any

from agent.tools.confirmation import listing
from agent.tools.registry import Ran, Tool, ToolContext, ToolError, register
from memory import forgetting
from memory.models import Event, EventType, Fact

REMEMBERED_IMPORTANCE = 0.8


def fact_origin(context: ToolContext) -> dict[str, Any]:
    """Who a fact is from, as Fact.objects.remember keeps it: a person's /remember
    is theirs; an API client's is the client's; the agent's call is its own, linked
    to the turn, and unverified if outside text was in it."""
    if context.client:
        source, origin = Fact.Source.CLIENT, Fact.Origin.CLIENT
    elif context.by_person:
        source, origin = Fact.Source.USER, Fact.Origin.MESSAGE
    else:
        source, origin = Fact.Source.AGENT, Fact.Origin.TURN
    return {
        "source": source,
        "origin": origin,
        "origin_event_id": context.event_id,
        "origin_session_id": context.session_id,
        "origin_label": context.client,
        "unverified": context.unverified,
    }


def remember_fact(context: ToolContext, arguments: dict[str, Any]) -> str:
    fact, created = Fact.objects.remember(
        context.owner,
        arguments["category"],
        arguments["key"],
        arguments["value"].strip(),
        actor=context.actor,
        **fact_origin(context),
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
    facts = Fact.objects.owned_by(context.owner).filter(category=category, key=key)
    # The one forgetting path: the call that set it is redacted too.
    if not forgetting.forget_facts(context.owner, facts, context.actor).facts:
        raise ToolError(f"There is no fact {category}/{key}.")
    return f"Forgot {category}/{key}."


LISTED_FACTS = 200  # the prompt already holds the most useful ones; this is for looking up


def list_facts(context: ToolContext, arguments: dict[str, Any]) -> str:
    category = Fact.normalise(arguments.get("category", ""))
    facts = Fact.objects.owned_by(context.owner).order_by("category", "key")
    if category:
        facts = facts.filter(category=category)
    lines = [
        f"{fact.category}/{fact.key}: {fact.value}" + (" (unverified)" if fact.unverified else "")
        for fact in facts[:LISTED_FACTS]
    ]
    if not lines:
        return f"There are no facts in {category}." if category else "There are no facts yet."
    return "\n".join(lines)


def named(key: str) -> str:
    return key.replace("_", " ").strip()


def saved(calls: list[Ran]) -> str:
    return listing(
        "Saved", "fact", [fact_said(c.arguments["key"], c.arguments["value"]) for c in calls]
    )


def fact_said(key: str, value: str) -> str:
    """A fact as a confirmation names it, "allergy — peanuts"; the value alone when it
    holds the key (a small model's key "Pixel" for the value "Pixel")."""
    key, value = named(key), value.strip()
    return value if key.lower() in value.lower() else f"{key} — {value}"


def forgot(calls: list[Ran]) -> str:
    return listing("Forgot", "fact", [named(c.arguments["key"]) for c in calls])


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
        outside_text=False,
        lasting=True,
        confirm=saved,
    )
)
register(
    Tool(
        name="forget_fact",
        description="Delete a saved fact that is wrong or no longer true.",
        parameters={"type": "object", "properties": FACT_KEY, "required": ["category", "key"]},
        run=forget_fact,
        outside_text=False,
        lasting=True,
        confirm=forgot,
    )
)
register(
    Tool(
        name="list_facts",
        description="List the saved facts (category/key: value), optionally of one category.",
        parameters={"type": "object", "properties": {"category": FACT_KEY["category"]}},
        run=list_facts,
        confirm=lambda calls: "Listed your facts",
        outside_text=False,  # the facts the prompt shows anyway, marked as it marks them
    )
)
