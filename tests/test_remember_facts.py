"""remember_fact with several facts at once (`facts`), and its bad input: a clear
error for the model, and nothing half-written."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agent.tools import ToolContext, call_tool
from agent.tools.facts import MAX_FACTS_AT_ONCE
from memory.models import Event, Fact

pytestmark = pytest.mark.django_db(transaction=True)

FOUR = [
    {"category": "person", "key": "name", "value": "Marta"},
    {"category": "place", "key": "city", "value": "Porto"},
    {"category": "person", "key": "partner", "value": "João"},
    {"category": "health", "key": "allergy", "value": "peanuts"},
]


def remember(owner, arguments: Any) -> Any:
    context = ToolContext.for_session(owner, "s1", "default")
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return asyncio.run(call_tool(context, "remember_fact", raw))


def facts(owner) -> dict[str, str]:
    return {f"{f.category}/{f.key}": f.value for f in Fact.objects.filter(owner=owner)}


def test_it_saves_several_facts_in_one_call(owner):
    output = remember(owner, {"facts": FOUR})
    assert not output.error
    assert facts(owner) == {
        "person/name": "Marta",
        "place/city": "Porto",
        "person/partner": "João",
        "health/allergy": "peanuts",
    }
    assert output.for_model.splitlines() == [
        "Remembered person/name: Marta",
        "Remembered place/city: Porto",
        "Remembered person/partner: João",
        "Remembered health/allergy: peanuts",
    ]
    # A later list updates what it names and adds the rest.
    output = remember(owner, {"facts": [{"category": "Place", "key": "City", "value": " Lisbon "}]})
    assert output.for_model == "Updated place/city: Lisbon"
    assert facts(owner)["place/city"] == "Lisbon"


def test_one_fact_is_saved_as_before(owner):
    output = remember(owner, {"category": "pref", "key": "drink", "value": "tea"})
    assert output.for_model == "Remembered pref/drink: tea"
    assert remember(owner, {"category": "pref", "key": "drink"}).error == (
        "remember_fact needs the argument 'value'."
    )


def test_each_fact_of_a_call_links_to_it(owner):
    call = Event.objects.create(owner=owner, session_id="s1", event_type="tool_call")
    context = ToolContext.for_session(owner, "s1", "default")
    from dataclasses import replace

    output = asyncio.run(
        call_tool(replace(context, event_id=call.pk), "remember_fact", json.dumps({"facts": FOUR}))
    )
    assert not output.error
    assert set(Fact.objects.filter(owner=owner).values_list("origin_event_id", flat=True)) == {
        call.pk
    }


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"facts": []}, "remember_fact: `facts` must be a list of at least one fact."),
        ({"facts": "name=Marta"}, "remember_fact: 'facts' must be a array."),
        ({"facts": {"category": "a"}}, "remember_fact: 'facts' must be a array."),
        (
            {"facts": [*FOUR, "allergic to cats"]},
            "remember_fact: facts[4] must be an object with category, key and value.",
        ),
        (
            {"facts": [*FOUR[:2], {"category": "person", "key": "partner"}]},
            "remember_fact: facts[2] needs value.",
        ),
        (
            {"facts": [{"category": "person", "key": "age", "value": 41}]},
            "remember_fact: facts[0] 'value' must be a non-empty string.",
        ),
        (
            {"facts": [{"category": "person", "key": " ", "value": "x"}]},
            "remember_fact: facts[0] 'key' must be a non-empty string.",
        ),
        (
            {"facts": [{"category": "a", "key": "b", "value": "c", "why": "d"}]},
            "remember_fact: facts[0] has 'why'; it takes ('category', 'key', 'value').",
        ),
        (
            {"facts": [{"category": "a", "key": "b", "value": "x" * (Fact.MAX_VALUE + 1)}]},
            f"remember_fact: facts[0] 'value' is longer than {Fact.MAX_VALUE}.",
        ),
        (
            {"facts": [FOUR[0]] * (MAX_FACTS_AT_ONCE + 1)},
            f"remember_fact takes at most {MAX_FACTS_AT_ONCE} facts at once.",
        ),
        (
            {"facts": FOUR, "category": "a", "key": "b", "value": "c"},
            "remember_fact takes either `facts` or category, key and value, not both.",
        ),
        ({}, "remember_fact needs the argument 'category'."),
        ("[1, 2]", "Arguments for remember_fact must be a JSON object."),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(owner, arguments, error):
    output = remember(owner, arguments)
    assert output.error == error
    assert not Fact.objects.filter(owner=owner).exists()


def test_a_failure_while_saving_leaves_none_of_them(owner, monkeypatch):
    from memory.models import FactQuerySet

    real = FactQuerySet.remember
    saved: list[str] = []

    def failing_third(self, owner, category, key, value, **fields):
        if len(saved) == 2:
            raise RuntimeError("disk full")
        saved.append(key)
        return real(self, owner, category, key, value, **fields)

    monkeypatch.setattr(FactQuerySet, "remember", failing_third)
    output = remember(owner, {"facts": FOUR})
    assert output.error and saved == ["name", "city"]
    assert not Fact.objects.filter(owner=owner).exists()


def test_a_turn_ending_on_a_list_of_facts_confirms_each():
    from agent.tools.facts import saved
    from agent.tools.registry import Ran

    calls = [
        Ran("remember_fact", {"facts": FOUR[:3]}),
        Ran("remember_fact", {"category": "health", "key": "allergy", "value": "peanuts"}),
    ]
    assert saved(calls) == (
        "Saved 4 facts: name — Marta; city — Porto; partner — João; allergy — peanuts"
    )
