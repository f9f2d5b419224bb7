"""A chat socket's frame rate is limited (issue 40, L12): one socket flooding junk
frames (20,000 had slowed another user's turn 60 → 424 ms, each costing a
database query) is closed with 4429 once past its burst, and nothing it sends
after that is read; a person's pace is never limited."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User

from sessions_app import chat
from sessions_app.consumers import FRAME_BURST, TOO_FAST
from tests.support.scripted_llm import Reply
from tests.support.websocket import connect, receive, send, until

pytestmark = pytest.mark.django_db(transaction=True)


async def outputs_until_closed(socket: WebsocketCommunicator) -> tuple[list[dict], dict]:
    """The frames the server sent, and its close message."""
    frames: list[dict] = []
    while True:
        output = await socket.receive_output(timeout=10)
        if output["type"] == "websocket.close":
            return frames, output
        frames.append(json.loads(output["text"]))


async def test_a_socket_flooding_frames_is_closed_past_its_burst(llm):
    flooder = await User.objects.acreate(username="flooder")
    other = await User.objects.acreate(username="other")
    flooding = await connect(flooder, (await sync_to_async(chat.start_chat)(flooder)).key)
    for _ in range(FRAME_BURST * 20):
        await flooding.send_to(text_data="junk")
    answered, closed = await outputs_until_closed(flooding)
    assert closed["code"] == TOO_FAST and "Too many frames" in closed.get("reason", "")
    # Each frame within the burst was read (and refused); none after it.
    assert FRAME_BURST <= len(answered) < 2 * FRAME_BURST  # (refilled while it was read)
    assert {frame["message"] for frame in answered} == {"The frame is not valid JSON."}
    await flooding.disconnect()

    # Another user's chat is untouched.
    llm.script(Reply(text="Hello."))
    session = await sync_to_async(chat.start_chat)(other)
    socket = await connect(other, session.key)
    await send(socket, type="message", text="hi")
    assert (await until(socket, timeout=20))[-1]["status"] == "completed"
    await socket.disconnect()


async def test_a_person_sending_a_few_frames_at_once_is_not_limited():
    person = await User.objects.acreate(username="person")
    socket = await connect(person, (await sync_to_async(chat.start_chat)(person)).key)
    for _ in range(FRAME_BURST - 1):  # e.g. a quick series of /help and clicks
        await send(socket, type="message", text="/help")
        assert (await receive(socket))["type"] == "notice"
    assert await socket.receive_nothing(timeout=0.2)
    await socket.disconnect()
