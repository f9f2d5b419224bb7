from __future__ import annotations

from typing import Any

from django.db import transaction

from agent.tools.registry import Ran, Tool, ToolContext, ToolError, register
from agent.tools.wording import listing
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


FACT_FIELDS = ("category", "key", "value")
MAX_FACTS_AT_ONCE = 20


def facts_given(arguments: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The facts of a call, checked whole before any is saved: one (category, key,
    value), or several in `facts`, a list of objects with those three. A message that
    states four facts is then saved in one call: the small models make one call a
    round, and answering a tool's result is where they go astray (docs/models.md)."""
    single = [name for name in FACT_FIELDS if name in arguments]
    if "facts" not in arguments:
        for name in FACT_FIELDS:
            if name not in arguments:
                raise ToolError(f"remember_fact needs the argument {name!r}.")
        return [checked_fact(arguments, "")]
    if single:
        raise ToolError("remember_fact takes either `facts` or category, key and value, not both.")
    facts = arguments["facts"]
    if not isinstance(facts, list) or not facts:
        raise ToolError("remember_fact: `facts` must be a list of at least one fact.")
    if len(facts) > MAX_FACTS_AT_ONCE:
        raise ToolError(f"remember_fact takes at most {MAX_FACTS_AT_ONCE} facts at once.")
    return [checked_fact(fact, f"facts[{number}]") for number, fact in enumerate(facts)]


def checked_fact(fact: Any, where: str) -> tuple[str, str, str]:
    name = f"remember_fact: {where}" if where else "remember_fact:"
    if not isinstance(fact, dict):
        raise ToolError(f"{name} must be an object with category, key and value.")
    if missing := [field for field in FACT_FIELDS if field not in fact]:
        raise ToolError(f"{name} needs {', '.join(missing)}.")
    extra = sorted(set(fact) - set(FACT_FIELDS))
    if extra and where:  # (a single fact's other arguments: agent.tools.parse_arguments)
        raise ToolError(f"{name} has {', '.join(map(repr, extra))}; it takes {FACT_FIELDS}.")
    for field in FACT_FIELDS:
        value = fact[field]
        if not isinstance(value, str) or not value.strip():
            raise ToolError(f"{name} {field!r} must be a non-empty string.")
        if len(value) > FACT_LENGTHS[field]:
            raise ToolError(f"{name} {field!r} is longer than {FACT_LENGTHS[field]}.")
    return fact["category"], fact["key"], fact["value"].strip()


def remember_fact(context: ToolContext, arguments: dict[str, Any]) -> str:
    given = facts_given(arguments)
    with transaction.atomic():  # all of them or none
        saved = [
            Fact.objects.remember(
                context.owner, category, key, value, actor=context.actor, **fact_origin(context)
            )
            for category, key, value in given
        ]
    # What made the agent remember this matters too: keep that message handy.
    latest = (
        Event.objects.owned_by(context.owner)
        .filter(session_id=context.session_id, event_type=EventType.USER_MESSAGE)
        .order_by("-id")
        .first()
    )
    if latest is not None and latest.importance < REMEMBERED_IMPORTANCE:
        Event.objects.filter(pk=latest.pk).update(importance=REMEMBERED_IMPORTANCE)
    return "\n".join(
        f"{'Remembered' if created else 'Updated'} {fact.category}/{fact.key}: {fact.value}"
        for fact, created in saved
    )


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
    """The facts the calls saved, one or a list each (`facts_given`: they ran, so they
    pass it)."""
    said = [fact_said(key, value) for c in calls for _, key, value in facts_given(c.arguments)]
    return listing("Saved", "fact", said)


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
FACT_VALUE = {"type": "string", "maxLength": Fact.MAX_VALUE}
FACT_LENGTHS = {"category": 100, "key": 255, "value": Fact.MAX_VALUE}
ONE_FACT: dict[str, Any] = {
    "type": "object",
    "properties": {**FACT_KEY, "value": FACT_VALUE},
    "required": list(FACT_FIELDS),
}

register(
    Tool(
        name="remember_fact",
        description=(
            "Save durable facts about the user or their world (who they are, where they "
            "live, a person, their health, a preference, a plan): every fact the message "
            "states, as a list in `facts`, or one with category, key and value. Replaces "
            "the value if the category/key exists."
        ),
        parameters={
            "type": "object",
            "properties": {
                "facts": {
                    "type": "array",
                    "items": ONE_FACT,
                    "maxItems": MAX_FACTS_AT_ONCE,
                    "description": "several facts at once, each {category, key, value}",
                },
                **ONE_FACT["properties"],
            },
        },
        run=remember_fact,
        outside_text=False,
        lasting=True,
        check=facts_given,
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
