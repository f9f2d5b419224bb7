from __future__ import annotations

from agent.prompt import build_messages, estimate_prompt_tokens, fit_to_window, history_messages
from memory import recording
from memory.models import Fact


def record(owner, event_type, session="s1", **data):
    return recording.record(owner, session, event_type, data)


def test_it_turns_events_into_chat_messages(alice):
    call = {"id": "c1", "type": "function", "function": {"name": "x", "arguments": "{}"}}
    events = [
        record(alice, "user_message", content="hi"),
        record(alice, "assistant_response", content="", tool_calls=[call]),
        record(alice, "tool_call", id="c1", name="x", arguments="{}"),
        record(alice, "tool_result", tool_call_id="c1", content="result"),
        record(alice, "assistant_response", content="done"),
        record(alice, "error", content="LLM down"),
    ]
    assert history_messages(events) == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "result"},
        {"role": "assistant", "content": "done"},
    ]


def test_it_builds_the_prompt_from_this_session_and_the_owners_facts(alice, bob):
    Fact.objects.create(owner=alice, category="person", key="sister", value="Maya")
    Fact.objects.create(owner=bob, category="person", key="boss", value="Secret Bob Fact")
    record(alice, "user_message", content="mine")
    record(alice, "user_message", session="other", content="other session")
    record(bob, "user_message", content="bob's message in a session of the same id")
    messages = build_messages(alice, "s1", "Be brief.")
    assert [m["role"] for m in messages[:2]] == ["system", "system"]
    assert messages[0]["content"] == "Be brief."  # the same in every turn: a cached prefix
    assert "person/sister: Maya" in messages[1]["content"]
    assert "Secret Bob Fact" not in messages[1]["content"]
    assert messages[2:] == [{"role": "user", "content": "mine"}]


def test_it_drops_the_oldest_exchanges_to_fit_the_window():
    system = [{"role": "system", "content": "s"}]
    history = []
    for number in range(30):
        history.append({"role": "user", "content": f"question {number} " + "x" * 400})
        history.append({"role": "assistant", "content": "answer " + "y" * 400})
    fitted = fit_to_window(system, history, window=2048)
    assert fitted[0] is system[0]
    assert fitted[1]["role"] == "user"
    assert fitted[-1] == history[-1]
    assert 2 < len(fitted) < len(history)
    budget = 2048 * 0.75
    assert estimate_prompt_tokens(fitted) <= budget
    # ...and only as many as it must: one more exchange would not fit.
    kept = len(fitted) - 1
    older = history[-kept - 2 : -kept]
    assert estimate_prompt_tokens([*system, *older, *fitted[1:]]) > budget


def test_it_keeps_the_newest_message_even_when_it_alone_is_too_long():
    system = [{"role": "system", "content": "s"}]
    history = [{"role": "user", "content": "z" * 100_000}]
    assert fit_to_window(system, history, window=512) == [*system, *history]
