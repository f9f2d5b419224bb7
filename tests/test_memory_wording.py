"""Memory in the prompt says who said it, and the instructions are a fixed text
that tells the model to talk to the user as "you" (agent/prompt.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from agent.prompt import (
    DEFAULT_SYSTEM_PROMPT,
    memory_blocks,
    recalled_line,
    session_recall_line,
    system_prompt,
)
from memory.models import Event, EventType
from memory.retrieval import Context, ContextItem, RecalledItem

DAY = datetime(2026, 11, 3, 9, 30, tzinfo=UTC)


def event(event_type: str, text: str, **fields) -> Event:
    return Event(event_type=event_type, text=text, created_at=DAY, **fields)


def test_a_recalled_line_says_who_said_it():
    said = event(EventType.USER_MESSAGE, "I'm allergic to peanuts.\nI live in  Porto.")
    assert (
        recalled_line(said)
        == "- The user said (2026-11-03): I'm allergic to peanuts. I live in Porto."
    )
    answered = event(EventType.ASSISTANT_RESPONSE, "Noted: no peanuts.")
    assert recalled_line(answered) == "- You answered (2026-11-03): Noted: no peanuts."
    summary = event(EventType.SUMMARY, "They planned a trip.")
    assert recalled_line(summary) == (
        "- Summary of an earlier conversation (2026-11-03): They planned a trip."
    )
    # A named speaker (an imported group chat) is named; an import is marked.
    maya = event(
        EventType.USER_MESSAGE, "See you at six.", speaker="Maya", imported_from="openclaw"
    )
    assert recalled_line(maya) == "- Maya said (2026-11-03, imported): See you at six."


def test_a_line_recalled_when_the_session_started_says_who_said_it():
    user: RecalledItem = {
        "source": "session a, event 1",
        "event_id": 1,
        "date": "2026-11-03",
        "text": "My partner is João.",
        "score": 0.7,
        "event_type": EventType.USER_MESSAGE,
    }
    assert session_recall_line(user) == "- The user said (2026-11-03): My partner is João."
    answer = RecalledItem(
        **{**user, "event_type": EventType.ASSISTANT_RESPONSE, "text": "Hi João!"}
    )
    assert session_recall_line(answer) == "- You answered (2026-11-03): Hi João!"
    maya = RecalledItem(**{**user, "text": "Maya: See you at six.", "speaker": "Maya"})
    assert session_recall_line(maya) == "- Maya said (2026-11-03): See you at six."
    # Kept before recall named who said it: said, not attributed.
    old: RecalledItem = {k: v for k, v in user.items() if k != "event_type"}  # type: ignore[assignment]
    assert session_recall_line(old) == (
        "- Said in an earlier conversation (2026-11-03): My partner is João."
    )


def test_the_memory_block_explains_the_lines():
    context = Context([ContextItem(event(EventType.USER_MESSAGE, "I live in Porto."), "search")])
    [block] = memory_blocks(context)
    heading, line = block.splitlines()
    assert '"The user said" lines are the user\'s own words' in heading
    assert '"You answered" lines are your earlier answers' in heading
    assert line == "- The user said (2026-11-03): I live in Porto."


def test_the_instructions_talk_to_the_user_and_stay_fixed():
    instructions = system_prompt("")
    assert instructions == DEFAULT_SYSTEM_PROMPT
    assert 'call the user "you"' in instructions
    assert "never write as if you were the user" in instructions
    assert "Do what the user's latest message asks" in instructions
    assert "do not repeat it unless asked" in instructions
    assert "`facts`" in instructions  # several facts in one remember_fact call
    # Nothing that changes from turn to turn: a prompt cache reuses the text.
    assert not any(char.isdigit() for char in instructions)
    # An agent's own prompt replaces them.
    assert system_prompt("  You are a pirate.  ") == "You are a pirate."
