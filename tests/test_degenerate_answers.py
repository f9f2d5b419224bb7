"""An answer that repeats itself is stopped with a note; it, and an answer cut off at
max_answer_tokens, stay in their chat but are never recalled in a later one."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from agent.runtime import REPEATING_NOTE, TurnRequest, run_turn
from memory.models import UNRECALLED_IMPORTANCE, Event
from memory.search import search_memory
from memory.tasks import embed_missing
from tests.support.frames import Frames
from tests.support.scripted_llm import Reply
from tests.support.websocket import ignore

pytestmark = pytest.mark.django_db(transaction=True)

LOOP = "The lighthouse keeper fed the cat at the harbour. "
COPIES = 400


def looping(sent: list[str]):
    """A model that says one sentence forever (here: COPIES times), counting what it sent."""
    yield "Here is the story. "
    for _ in range(COPIES):
        sent.append(LOOP)
        yield LOOP


async def test_a_looping_answer_is_stopped_with_a_note(owner, llm):
    sent: list[str] = []
    llm.script(Reply(deltas=looping(sent), delay=0.002))
    frames = Frames(owner)
    result = await run_turn(TurnRequest(owner=owner, session_id="s1"), "Tell me a story", frames)

    assert result.status == "completed"
    # The stream was closed: the model did not get to write its 400 copies.
    assert len(sent) < COPIES // 2
    assert len(llm.requests) == 1
    # The answer kept is the text before the loop's second copy; the note says why.
    answer = await Event.objects.aget(owner=owner, event_type="assistant_response")
    assert answer.data["content"] == "Here is the story. " + LOOP.strip()
    assert answer.data["finish_reason"] == "repetition"
    assert answer.importance == UNRECALLED_IMPORTANCE
    assert frames.event_types() == ["user_message", "assistant_response", "system"]
    note = await Event.objects.aget(owner=owner, event_type="system")
    assert note.text == REPEATING_NOTE == "The answer started repeating itself and was stopped."
    # What the user saw stream stops soon after the loop began.
    streamed = "".join(frame["text"] for frame in frames.of("delta"))
    assert streamed.count(LOOP) < 20


async def test_a_list_that_repeats_its_layout_is_not_stopped(owner, llm):
    rows = "".join(f"| {n} | {n * n} | {n**3} |\n" for n in range(1, 80))
    table = "| n | square | cube |\n|---|---|---|\n" + rows
    llm.script(Reply(deltas=[table[i : i + 4] for i in range(0, len(table), 4)]))
    result = await run_turn(TurnRequest(owner=owner, session_id="s1"), "Squares?", Frames(owner))
    assert result.answer == table
    answer = await Event.objects.aget(owner=owner, event_type="assistant_response")
    assert answer.data["finish_reason"] == "stop"
    assert answer.importance > UNRECALLED_IMPORTANCE


def system_prompt(request: dict) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "system")


async def test_cut_off_and_looping_answers_are_not_recalled_later(owner, llm):
    async def chat(session: str, message: str, reply: Reply) -> None:
        llm.script(reply)
        await run_turn(TurnRequest(owner=owner, session_id=session), message, ignore)

    await chat(
        "cut",
        "Which boat do we sail?",
        Reply(text="Our sailing boat is the Albatross, moored at pier", finish="length"),
    )
    await chat("loop", "Which boat do we race?", Reply(deltas=looping([])))
    await chat("fine", "Which boat do we row?", Reply(text="Your rowing boat is the Kingfisher."))
    await sync_to_async(embed_missing)()
    answers = Event.objects.filter(owner=owner, event_type="assistant_response")
    assert await answers.filter(importance=UNRECALLED_IMPORTANCE).acount() == 2

    # A later chat about boats: the normal answer is recalled, the other two are not.
    llm.script(Reply(text="Kingfisher."), Reply(text="Kingfisher again."))
    await run_turn(TurnRequest(owner=owner, session_id="later"), "Tell me about our boat", ignore)
    await run_turn(TurnRequest(owner=owner, session_id="later"), "Which boat, again?", ignore)
    for request in llm.requests[-2:]:
        prompt = system_prompt(request)
        assert "You answered (" in prompt and "Kingfisher" in prompt
        assert "Albatross" not in prompt
        assert "lighthouse" not in prompt
    # Nor does memory search bring them back (the model's tool, the search page).
    found = await sync_to_async(search_memory)(owner, "boat Albatross lighthouse harbour", k=20)
    texts = " ".join(hit.event.text for hit in found if hasattr(hit, "event"))
    assert "Kingfisher" in texts or "boat" in texts
    assert "Albatross" not in texts and "lighthouse" not in texts


async def test_a_pinned_cut_off_answer_is_recalled_again(owner, llm):
    llm.script(Reply(text="Our sailing boat is the Albatross, moored at", finish="length"))
    await run_turn(TurnRequest(owner=owner, session_id="cut"), "Which boat?", ignore)
    answer = await Event.objects.aget(owner=owner, event_type="assistant_response")
    await sync_to_async(answer.toggle_pin)()
    await sync_to_async(embed_missing)()
    found = await sync_to_async(search_memory)(owner, "sailing boat Albatross", k=5)
    assert any(getattr(hit, "event", None) == answer for hit in found)
