"""Retry on a failed or stopped answer: the turn runs again from the same user message."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User

from memory.models import Event
from sessions_app import chat
from sessions_app.turns import NO_SUCH, NOT_FAILED, NOT_LATEST
from tests.support.scripted_llm import Reply
from tests.support.websocket import connect, receive, send, stored, streamed, until

pytestmark = pytest.mark.django_db(transaction=True)


async def turn_texts(session) -> list[tuple[str, str]]:
    return [
        (e.event_type, e.text)
        async for e in Event.objects.filter(session_id=str(session.pk)).order_by("id")
        if e.event_type in ("user_message", "assistant_response")
    ]


async def test_it_retries_a_stopped_answer_from_the_same_message(owner, session, llm):
    llm.script(Reply(text="Earlier answer."))
    ws = await connect(owner, session.key)
    await send(ws, type="message", text="earlier")
    await until(ws)
    llm.script(Reply(deltas=["a ", "b ", "c ", "d ", "e "], delay=0.3))
    await send(ws, type="message", text="talk slowly")
    await until(ws, "delta")
    await send(ws, type="stop")
    stop = stored(await until(ws), "system")
    assert stop["data"]["kind"] == "stopped"

    llm.script(Reply(text="Fresh answer."))
    await send(ws, type="retry", event_id=stop["id"])
    frames = await until(ws)
    assert frames[-1]["status"] == "completed" and streamed(frames) == "Fresh answer."
    again = stored(frames, "user_message")
    assert again["text"] == "talk slowly" and again["data"]["retry_of"] < stop["id"]
    assert 'class="note">Retried' in again["html"]
    # The model saw the history as it was before the stopped turn, not its cut-off answer.
    sent = [m["content"] for m in llm.requests[-1]["messages"][1:]]
    assert sent == ["earlier", "Earlier answer.", "talk slowly"]
    # The stopped answer is kept, as it was.
    texts = await turn_texts(session)
    assert texts[2:] == [
        ("user_message", "talk slowly"),
        ("assistant_response", texts[3][1]),
        ("user_message", "talk slowly"),
        ("assistant_response", "Fresh answer."),
    ]
    assert texts[3][1].startswith("a ")
    assert (await Event.objects.aget(pk=stop["id"])).data["kind"] == "stopped"
    await ws.disconnect()


async def test_it_retries_a_failed_answer_and_again_if_it_fails_again(owner, session, llm):
    ws = await connect(owner, session.key)
    await send(ws, type="message", text="will fail")  # nothing scripted: the LLM answers 500
    failed = stored(await until(ws), "error")
    await send(ws, type="retry", event_id=failed["id"])
    failed_again = stored(await until(ws), "error")
    llm.script(Reply(text="It worked."))
    await send(ws, type="retry", event_id=failed_again["id"])
    frames = await until(ws)
    assert streamed(frames) == "It worked."
    assert [m["content"] for m in llm.requests[-1]["messages"][1:]] == ["will fail"]
    # The first failure's turn is no longer the latest: its Retry is refused.
    await send(ws, type="retry", event_id=failed["id"])
    assert await receive(ws) == {"type": "error", "message": NOT_LATEST}
    await ws.disconnect()


async def test_it_regenerates_a_completed_answer_keeping_the_old_one(owner, session, llm):
    llm.script(Reply(text="First try."), Reply(text="Second try."))
    ws = await connect(owner, session.key)
    await send(ws, type="message", text="hi")
    answer = stored(await until(ws), "assistant_response")
    assert 'class="regenerate small"' in answer["html"]
    await send(ws, type="retry", event_id=answer["id"])
    frames = await until(ws)
    assert streamed(frames) == "Second try."
    again = stored(frames, "user_message")
    assert again["data"]["retry_of"] < answer["id"] and "edited" not in again["data"]
    # The model was sent the message once, without the first answer.
    assert [m["content"] for m in llm.requests[-1]["messages"][1:]] == ["hi"]
    assert [text for _, text in await turn_texts(session)] == [
        "hi",
        "First try.",
        "hi",
        "Second try.",
    ]
    # Only the latest turn regenerates: the first answer's turn is not the latest any more.
    await send(ws, type="retry", event_id=answer["id"])
    assert await receive(ws) == {"type": "error", "message": NOT_LATEST}
    # A message is edited, not retried, and a retry frame naming one is refused.
    await send(ws, type="retry", event_id=again["id"])
    assert await receive(ws) == {"type": "error", "message": NOT_FAILED}
    assert len(llm.requests) == 2
    await ws.disconnect()


@pytest.mark.parametrize("event_id", [10**9, "1", None, [1], True])
async def test_it_refuses_an_unknown_answer(owner, session, event_id):
    ws = await connect(owner, session.key)
    await send(ws, type="retry", event_id=event_id)
    assert await receive(ws) == {"type": "error", "message": NO_SUCH}
    await ws.disconnect()


async def test_it_does_not_retry_another_users_answer(owner, session, llm):
    bob = await User.objects.acreate_user("bob", password="bob-password")
    bobs = await sync_to_async(chat.start_chat)(bob)
    theirs = await connect(bob, bobs.key)
    await send(theirs, type="message", text="bob's question")  # fails: nothing scripted
    failed = stored(await until(theirs), "error")
    ws = await connect(owner, session.key)
    await send(ws, type="retry", event_id=failed["id"])
    assert await receive(ws) == {"type": "error", "message": NO_SUCH}
    assert len(llm.requests) == 1
    assert await Event.objects.filter(owner=owner).acount() == 0
    await ws.disconnect()
    await theirs.disconnect()
