"""Tool calls the model writes as its answer's text (the Qwen2.5-Coder models'
habit): a call only when the whole answer is one, for a tool on offer, with
arguments its schema accepts; anything else stays the answer."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User

from agent.frames import Frame
from agent.runtime import TurnRequest, run_turn
from agent.text_tool_calls import tool_call_in_text
from agent.tools import available_tools
from memory.models import Event, Fact
from tests.support.scripted_llm import Reply

pytestmark = pytest.mark.django_db(transaction=True)

TEA = {"category": "pref", "key": "drink", "value": "tea"}


async def ignore(frame: Frame) -> None:
    return None


async def turn(owner: User, llm, answer: str) -> list[Event]:
    llm.script(Reply(text=answer), Reply(text="Noted."))
    await run_turn(TurnRequest(owner=owner, session_id="s1"), "I like tea.", ignore)
    return [e async for e in Event.objects.filter(owner=owner).order_by("id")]


@pytest.mark.parametrize(
    "answer",
    [
        json.dumps({"name": "remember_fact", "arguments": TEA}),
        "{" + json.dumps({"name": "remember_fact", "arguments": TEA}) + "}",
        "\n " + json.dumps({"name": "remember_fact", "arguments": json.dumps(TEA)}) + "\n",
        "```json\n" + json.dumps({"name": "remember_fact", "arguments": TEA}, indent=2) + "\n```",
        json.dumps({"name": "remember_fact", "arguments": TEA})[:-1],
        "\n".join([json.dumps({"name": "remember_fact", "arguments": TEA})] * 3),
    ],
    ids=[
        "bare",
        "doubled braces",
        "arguments as a string",
        "fenced",
        "last brace missing",
        "written again and again",
    ],
)
async def test_it_runs_a_tool_call_written_as_the_answer(owner, llm, answer):
    events = await turn(owner, llm, answer)
    assert [e.event_type for e in events] == [
        "user_message",
        "assistant_response",
        "tool_call",
        "tool_result",
        "assistant_response",
    ]
    call = events[1].data["tool_calls"][0]["function"]
    assert (events[1].data["content"], call["name"]) == ("", "remember_fact")
    assert json.loads(call["arguments"]) == TEA
    fact = await Fact.objects.aget(owner=owner, key="drink")
    assert fact.value == "tea"
    # The next round shows the model its call as a call, and the tool's answer.
    follow_up = llm.requests[1]["messages"]
    assert follow_up[-2]["tool_calls"][0]["function"]["name"] == "remember_fact"
    assert follow_up[-1]["role"] == "tool"
    assert events[-1].data["content"] == "Noted."


@pytest.mark.parametrize(
    "answer",
    [
        json.dumps({"name": "delete_everything", "arguments": {}}),
        json.dumps({"name": "remember_fact", "arguments": {"category": "pref", "key": "drink"}}),
        json.dumps({"name": "remember_fact", "arguments": {**TEA, "owner": "admin"}}),
        json.dumps({"name": "remember_fact", "arguments": TEA, "then": "terminal"}),
        "Sure! " + json.dumps({"name": "remember_fact", "arguments": TEA}) + " Done.",
        "{{not json}}",
        "Like this:\n```json\n" + json.dumps({"name": "remember_fact", "arguments": TEA}) + "\n```",
        json.dumps({"name": "remember_fact", "arguments": TEA})[:-8],
        # (Ended by "]": sixty thousand "[" and nothing else is a loop, stopped as one.)
        "[" * 60_000 + "]",
        '{"name": "remember_fact", "arguments": ' + "[" * 60_000 + "}",
    ],
    ids=[
        "unknown tool",
        "missing argument",
        "extra argument",
        "extra key",
        "in prose",
        "junk",
        "fenced in prose",
        "cut off in a value",
        "nested past json's recursion limit",
        "an object nested past it",
    ],
)
async def test_it_keeps_anything_else_as_text(owner, llm, answer):
    events = await turn(owner, llm, answer)
    assert [e.event_type for e in events] == ["user_message", "assistant_response"]
    assert events[1].data["content"] == answer
    assert events[1].data["tool_calls"] == []
    assert not await Fact.objects.filter(owner=owner).aexists()


async def test_it_runs_a_call_written_again_in_the_next_round_once(owner, llm):
    call = json.dumps({"name": "remember_fact", "arguments": TEA})
    again = json.dumps({"name": "remember_fact", "arguments": dict(reversed(TEA.items()))})
    llm.script(Reply(text=call), Reply(text=again), Reply(text="never asked for"))
    await run_turn(TurnRequest(owner=owner, session_id="s1"), "I like tea.", ignore)
    events = [e async for e in Event.objects.filter(owner=owner).order_by("id")]
    assert [e.event_type for e in events] == [
        "user_message",
        "assistant_response",
        "tool_call",
        "tool_result",
        "system",
        "assistant_response",  # what the call did, said instead of the model's silence
    ]
    assert events[-2].data["kind"] == "repeated_call"
    assert "asked for remember_fact again" in events[-2].data["content"]
    assert events[-1].data["confirmation"] is True
    assert len(llm.requests) == 2


def test_a_list_written_as_the_arguments_is_the_tools_one_list():
    """The 0.5B writes remember_fact's `facts` as the arguments themselves."""
    facts = [
        {"category": "person", "key": "name", "value": "Tom Becker"},
        {"category": "place", "key": "home", "value": "Leeds"},
    ]
    text = json.dumps({"name": "remember_fact", "arguments": facts}, indent=4)
    call = tool_call_in_text(text, available_tools(), "c1")
    assert call is not None
    assert json.loads(call.arguments) == {"facts": facts}
    # A tool without exactly one list argument gets no such reading.
    listed = json.dumps({"name": "forget_fact", "arguments": [{"category": "a", "key": "b"}]})
    assert tool_call_in_text(listed, available_tools(), "c2") is None


def test_a_call_naming_no_tool_is_the_one_tool_its_arguments_fit():
    facts = [{"category": "person", "key": "name", "value": "Aiko"}]
    text = json.dumps({"name": "Aiko", "arguments": {"facts": facts}})
    call = tool_call_in_text(text, available_tools(), "c1")
    assert call is not None and call.name == "remember_fact"
    # Arguments two tools take (remember_fact's and forget_fact's category and key),
    # or none does: it stays text.
    both = json.dumps({"name": "Aiko", "arguments": {"category": "person", "key": "name"}})
    assert tool_call_in_text(both, available_tools(), "c2") is None
    neither = json.dumps({"name": "Aiko", "arguments": {"city": "Osaka"}})
    assert tool_call_in_text(neither, available_tools(), "c3") is None


def test_a_list_closed_twice_is_read_as_meant():
    facts = [{"category": "person", "key": "name", "value": "Nadia"}]
    text = json.dumps({"name": "remember_fact", "arguments": {"facts": facts}})[:-1] + "]}"
    call = tool_call_in_text(text, available_tools(), "c1")
    assert call is not None and json.loads(call.arguments) == {"facts": facts}
    # Anything else that does not parse stays text.
    assert tool_call_in_text(text[:-2] + "]]}", available_tools(), "c2") is None
