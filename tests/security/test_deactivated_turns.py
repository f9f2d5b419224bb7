"""A deactivated account's running turn stops (issue 40, L5): the model's stream
is not read to its end, the text so far is kept as an interrupted answer, and
what the account had queued does not run."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User

from memory.models import Event, EventType
from sessions_app import chat, runner
from sessions_app.deactivation import STOPPED
from sessions_app.models import ChatInput
from tests.support.scripted_llm import Reply
from tests.support.websocket import connect, send, until

pytestmark = pytest.mark.django_db(transaction=True)

WORDS = 400  # 0.05 s apart: 20 s, were the stream read to its end


async def answers(session_id: str) -> list[Event]:
    return [
        event
        async for event in Event.objects.filter(
            session_id=session_id, event_type=EventType.ASSISTANT_RESPONSE
        )
    ]


async def test_deactivating_an_account_stops_its_running_turn_and_drops_its_queue(llm):
    alice = await User.objects.acreate(username="alice")
    session = await sync_to_async(chat.start_chat)(alice)
    llm.script(
        Reply(deltas=[f"word{n} " for n in range(WORDS)], delay=0.05),
        Reply(text="Never asked for."),
    )
    socket = await connect(alice, session.key)
    await send(socket, type="message", text="Talk for a long time.")
    await until(socket, "delta", timeout=20)
    # Queued behind it, by a program waiting for its answer.
    waiting = asyncio.ensure_future(runner.submit(alice, session.key, "And then this.", wait=True))
    while not await ChatInput.objects.filter(status=ChatInput.Status.QUEUED).aexists():
        await asyncio.sleep(0.05)

    alice.is_active = False
    await sync_to_async(alice.save)()  # as the admin's "Active" checkbox does

    outcome = await asyncio.wait_for(waiting, 30)
    assert outcome is not None and (outcome.status, outcome.error) == ("error", STOPPED)
    for _ in range(200):
        if stored := await answers(str(session.pk)):
            break
        await asyncio.sleep(0.1)
    assert len(stored) == 1
    kept = stored[0]
    assert kept.data["interrupted"] and kept.text.startswith("word0 word1")
    assert len(kept.text.split()) < WORDS  # not read to its end
    assert len(llm.requests) == 1  # the queued message never reached the model
    await socket.disconnect()
