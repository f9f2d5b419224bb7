from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User

from agent.prompt import build_messages
from memory import recording
from memory.models import Event, Fact
from memory.search import search_memory
from sessions_app import chat
from sessions_app.compaction import CompactionError, compact
from sessions_app.meter import meter, status
from sessions_app.models import Session
from tests.support.chat_turns import converse
from tests.support.scripted_llm import Reply, reply_with_tool

pytestmark = pytest.mark.django_db(transaction=True)

SUMMARY = "- The user plans a trip to Kyoto in April\n- Their sister Maya joins"


def conversation(owner: User, turns: int = 15) -> Session:
    session = chat.start_chat(owner)
    for number in range(turns):
        recording.record(
            owner,
            str(session.pk),
            "user_message",
            {"content": f"question {number} about the Kyoto trip " + "x" * 200},
        )
        recording.record(
            owner,
            str(session.pk),
            "assistant_response",
            {"content": f"answer {number} " + "y" * 200},
        )
    return session


async def test_it_compacts_without_losing_anything(alice, llm, configure):
    configure("sessions", compaction_keep_recent=4)
    session = await sync_to_async(conversation)(alice)
    before = await sync_to_async(meter)(session)
    llm.script(
        reply_with_tool("remember_fact", {"category": "plan", "key": "trip", "value": "Kyoto"}),
        Reply(text="DONE"),
        Reply(text=SUMMARY),
    )
    done = await compact(session)

    assert (done.summarised, done.carried_over) == (26, 4)
    old = await Session.objects.aget(pk=session.pk)
    assert old.status == "archived"
    fresh = done.session
    assert fresh.status == "active" and fresh.key == session.key
    assert fresh.continues_from_id == session.pk and fresh.compaction_count == 1
    # Every old event is still there and searchable.
    assert await Event.objects.filter(session_id=str(session.pk)).acount() == 30
    # The summary links what it condensed: the older events, not the ones carried over.
    compaction = await Event.objects.aget(session_id=str(fresh.pk), event_type="compaction")
    condensed = [event.data["content"][:12] async for event in compaction.condensed.all()]
    assert len(condensed) == 26 and "question 13 " not in condensed
    hits = await sync_to_async(search_memory)(
        alice, "question 3 about the Kyoto trip", branch="lexical"
    )
    assert any(hit.event.text.startswith("question 3 ") for hit in hits)
    # The memory flush saved a fact before summarising.
    assert (
        await Fact.objects.filter(owner=alice, key="trip", value="kyoto").aexists()
        or await Fact.objects.filter(owner=alice, key="trip").aexists()
    )
    # The summary call got the older messages, not the kept ones.
    summary_request = llm.requests[2]["messages"][1]["content"]
    assert "question 0 " in summary_request and "question 14 " not in summary_request
    # The fresh session opens with the summary plus the recent messages.
    messages = await sync_to_async(build_messages)(alice, str(fresh.pk), "")
    context = [m["content"] for m in messages if m["role"] == "system"][1]
    assert SUMMARY in context
    assert [m["content"][:12] for m in messages if m["role"] != "system"] == [
        "question 13 ",
        "answer 13 yy",
        "question 14 ",
        "answer 14 yy",
    ]
    after = await sync_to_async(meter)(fresh)
    assert after.context_tokens < before.context_tokens
    assert "compacted 1 time)" in await status(fresh)


async def test_it_leaves_the_session_unchanged_when_the_summary_fails(alice, llm):
    session = await sync_to_async(conversation)(alice)
    llm.script(Reply(text="DONE"), Reply(status=500, error="summariser down"))
    with pytest.raises(CompactionError, match="summary could not be written"):
        await compact(session)
    await session.arefresh_from_db()
    assert session.status == "active"
    assert await Session.objects.acount() == 1
    assert not await Event.objects.filter(event_type="compaction").aexists()


async def test_it_refuses_to_compact_a_short_conversation(alice, llm):
    session = await sync_to_async(conversation)(alice, turns=2)
    with pytest.raises(CompactionError, match="not enough conversation"):
        await compact(session)
    assert llm.requests == []


async def test_it_compacts_by_itself_when_the_context_fills_up(alice, llm, configure):
    configure("llm", context_window=1024, max_answer_tokens=256)
    configure(
        "sessions", compaction_threshold=0.5, compaction_min_messages=10, compaction_keep_recent=2
    )
    session = await sync_to_async(conversation)(alice)
    llm.script(Reply(text="Sure."), Reply(text="DONE"), Reply(text=SUMMARY))
    frames: list = []

    async def emit(frame) -> None:
        frames.append(frame)

    result = await converse(session, "one more question", emit)
    assert frames[-1].type == "session"
    fresh = await Session.objects.aget(owner=alice, status="active")
    assert frames[-1].session_id == str(fresh.pk) and fresh.compaction_count == 1
    assert result.done().meter["context_tokens"] < 0.5 * 1024
