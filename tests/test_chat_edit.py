"""Edit and resend: a message of the chat's current branch runs again with new text;
the old branch stays, marked, and is left out of what the model is sent."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User

from memory.models import Event
from sessions_app import chat
from sessions_app.chat import MAX_MESSAGE_BYTES
from sessions_app.turns import NO_SUCH, NO_SUCH_MESSAGE, NOT_CURRENT
from tests.support.scripted_llm import Reply
from tests.support.websocket import connect, receive, send, stored, streamed, until

pytestmark = pytest.mark.django_db(transaction=True)


async def said(session) -> list[str]:
    return [
        e.text
        async for e in Event.objects.filter(session_id=str(session.pk)).order_by("id")
        if e.event_type in ("user_message", "assistant_response")
    ]


async def test_it_edits_an_earlier_message_into_a_new_branch(owner, session, llm, client):
    llm.script(Reply(text="Answer one."), Reply(text="Answer two."))
    ws = await connect(owner, session.key)
    await send(ws, type="message", text="first question")
    first = stored(await until(ws), "user_message")
    await send(ws, type="message", text="second question")
    await until(ws)

    llm.script(Reply(text="Edited answer."))
    await send(ws, type="retry", event_id=first["id"], text="  first question, better  ")
    frames = await until(ws)
    assert streamed(frames) == "Edited answer."
    edited = stored(frames, "user_message")
    assert edited["text"] == "first question, better"
    assert edited["data"]["retry_of"] == first["id"] and edited["data"]["edited"] is True
    assert 'class="bubble user"' in edited["html"] and ">Edited</p>" in edited["html"]
    # The model was sent the new branch only: nothing of the replaced one.
    assert [m["content"] for m in llm.requests[-1]["messages"][1:]] == ["first question, better"]
    # The old branch is kept in the log...
    assert await said(session) == [
        "first question",
        "Answer one.",
        "second question",
        "Answer two.",
        "first question, better",
        "Edited answer.",
    ]
    # ...and the page shows it marked, with no Edit or Regenerate left on it.
    await sync_to_async(client.force_login)(owner)
    page = (await sync_to_async(client.get)(f"/chat/{session.key}/")).content.decode()
    assert page.count('class="note earlier">Edited: earlier version') == 1
    assert page.count("superseded") == 4
    assert page.count('class="edit-message small"') == 1
    assert page.count('class="regenerate small"') == 1

    # A replaced message cannot be edited again: its latest version can.
    await send(ws, type="retry", event_id=first["id"], text="again")
    assert await receive(ws) == {"type": "error", "message": NOT_CURRENT}
    await ws.disconnect()


async def test_an_edit_of_the_latest_message_follows_further_edits(owner, session, llm):
    llm.script(Reply(text="One."), Reply(text="Two."), Reply(text="Three."))
    ws = await connect(owner, session.key)
    await send(ws, type="message", text="v1")
    message = stored(await until(ws), "user_message")
    await send(ws, type="retry", event_id=message["id"], text="v2")
    second = stored(await until(ws), "user_message")
    await send(ws, type="retry", event_id=second["id"], text="v3")
    await until(ws)
    assert [m["content"] for m in llm.requests[-1]["messages"][1:]] == ["v3"]
    await ws.disconnect()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "The message is empty."),
        ("   ", "The message is empty."),
        (5, "The message text must be a string."),
        ("x" * (MAX_MESSAGE_BYTES + 1), "The message is longer than 64 KB."),
    ],
)
async def test_it_refuses_a_bad_edit_and_stores_nothing(owner, session, llm, text, error):
    llm.script(Reply(text="Fine."))
    ws = await connect(owner, session.key)
    await send(ws, type="message", text="hello")
    message = stored(await until(ws), "user_message")
    await send(ws, type="retry", event_id=message["id"], text=text)
    assert await receive(ws) == {"type": "error", "message": error}
    assert await Event.objects.filter(owner=owner).acount() == 2
    assert len(llm.requests) == 1
    await ws.disconnect()


async def test_it_edits_only_messages(owner, session, llm):
    llm.script(Reply(text="Fine."))
    ws = await connect(owner, session.key)
    await send(ws, type="message", text="hello")
    answer = stored(await until(ws), "assistant_response")
    await send(ws, type="retry", event_id=answer["id"], text="new")
    assert await receive(ws) == {"type": "error", "message": NO_SUCH_MESSAGE}
    for event_id in (10**9, "1", None, True):
        await send(ws, type="retry", event_id=event_id, text="new")
        assert await receive(ws) == {"type": "error", "message": NO_SUCH}
    assert len(llm.requests) == 1
    await ws.disconnect()


async def test_it_does_not_edit_another_users_message(owner, session, llm):
    bob = await User.objects.acreate_user("bob", password="bob-password")
    bobs = await sync_to_async(chat.start_chat)(bob)
    llm.script(Reply(text="Hi Bob."))
    theirs = await connect(bob, bobs.key)
    await send(theirs, type="message", text="bob's question")
    message = stored(await until(theirs), "user_message")
    ws = await connect(owner, session.key)
    await send(ws, type="retry", event_id=message["id"], text="mine now")
    assert await receive(ws) == {"type": "error", "message": NO_SUCH}
    assert len(llm.requests) == 1
    assert await Event.objects.filter(owner=owner).acount() == 0
    assert await Event.objects.filter(owner=bob).acount() == 2
    await ws.disconnect()
    await theirs.disconnect()
