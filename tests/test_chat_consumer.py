from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import User

from agent.models import TerminalAllowedPrefix
from agent.prompt import message_tokens
from memory.models import Event
from neotask_site.asgi import application
from sessions_app.models import Session
from tests.support.scripted_llm import Reply, reply_with_tool
from tests.support.web import client_for, session_cookie
from tests.support.websocket import (
    communicator,
    connect,
    kinds,
    receive,
    send,
    stored,
    streamed,
    until,
)

pytestmark = pytest.mark.django_db(transaction=True)


async def test_it_streams_a_turn_in_protocol_order(owner, session, llm):
    llm.script(
        Reply(deltas=["Hello", " there", "!"], usage={"prompt_tokens": 30, "completion_tokens": 3})
    )
    ws = await connect(owner, session.key)
    await send(ws, type="message", text="Hi **agent**")
    frames = await until(ws)
    assert kinds(frames) == [
        "started",
        "status",  # reading memory
        "user_message",
        "status",  # the model reading its prompt
        "delta",
        "assistant_response",
        "done",
    ]
    assert [f["stage"] for f in frames if f["type"] == "status"] == ["memory", "model"]
    assert streamed(frames) == "Hello there!"
    user_event = stored(frames, "user_message")
    assert user_event["data"]["content"] == "Hi **agent**"
    assert 'class="bubble user"' in user_event["html"]
    assert "<strong>there" not in stored(frames, "assistant_response")["html"]
    done = frames[-1]
    assert done["usage"] == {"input": 30, "output": 3, "cache_read": 0, "cache_write": 0}
    assert done["meter"]["input"] == 30
    assert done["meter"]["context_window"] == settings.NEOTASK["llm"]["context_window"]
    # The next prompt's size: the turn's last prompt and its answer, not rebuilt.
    answered = [*llm.requests[-1]["messages"], {"role": "assistant", "content": "Hello there!"}]
    assert done["meter"]["context_tokens"] == sum(map(message_tokens, answered))
    await session.arefresh_from_db()
    assert (session.input_tokens, session.output_tokens) == (30, 3)
    assert session.title == "Hi **agent**"
    await ws.disconnect()


async def test_it_fans_out_to_every_tab_of_the_chat(owner, session, llm):
    llm.script(Reply(deltas=["one", "two", "three"]))
    first = await connect(owner, session.key)
    second = await connect(owner, session.key)
    await send(first, type="message", text="hello")
    seen_first, seen_second = await asyncio.gather(until(first), until(second))
    assert kinds(seen_first) == kinds(seen_second)
    assert [f.get("text") for f in seen_first] == [f.get("text") for f in seen_second]
    await first.disconnect()
    await second.disconnect()


async def test_it_authenticates_with_the_browser_session_cookie(owner, session):
    cookie = session_cookie(await sync_to_async(client_for)(owner))
    headers = [(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000")]
    headers.append((b"cookie", cookie.encode()))
    ws = WebsocketCommunicator(application, f"/ws/chat/{session.key}/", headers=headers)
    connected, _ = await ws.connect()
    assert connected
    await send(ws, type="message", text="/help")
    assert (await receive(ws))["type"] == "notice"
    await ws.disconnect()


async def test_it_closes_for_anonymous_users(session):
    ws = WebsocketCommunicator(
        application,
        f"/ws/chat/{session.key}/",
        headers=[(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000")],
    )
    await ws.connect()
    assert (await ws.receive_output(timeout=5)) == {"type": "websocket.close", "code": 4403}


@pytest.mark.parametrize(
    ("key", "code"),
    # A foreign chat closes as one that does not exist.
    [("agent:main:web:nosuchchat", 4404), ("garbage", 4404), (None, 4404)],
)
async def test_it_closes_for_foreign_or_unknown_chats(owner, session, key, code):
    bob = await User.objects.acreate(username="bob")
    ws = communicator(bob, key or session.key)
    await ws.connect()
    assert (await ws.receive_output(timeout=5)) == {"type": "websocket.close", "code": code}


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        ("not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"type": "dance"}', "Unknown frame type 'dance'"),
        ('{"text": "no type"}', "Unknown frame type None"),
        ('{"type": "message"}', "must be a string"),
        ('{"type": "message", "text": 42}', "must be a string"),
        ('{"type": "message", "text": "   "}', "The message is empty"),
        (json.dumps({"type": "message", "text": "x" * (65 * 1024)}), "larger than"),
        (json.dumps({"type": "message", "text": "é" * 32800}, ensure_ascii=False), "than 64 KB"),
        ('{"type": "approval", "request_id": 5, "decision": "once"}', "needs a request_id"),
        ('{"type": "approval", "request_id": "x", "decision": "maybe"}', "needs a request_id"),
        ('{"type": "approval", "request_id": "nope", "decision": "once"}', "no such approval"),
    ],
)
async def test_it_answers_bad_frames_with_an_error_and_stays_open(owner, session, frame, message):
    ws = await connect(owner, session.key)
    await ws.send_to(text_data=frame)
    reply = await receive(ws)
    assert reply["type"] == "error"
    assert message in reply["message"]
    await send(ws, type="message", text="/help")
    assert (await receive(ws))["type"] == "notice"
    assert not await Event.objects.filter(owner=owner).aexists()
    await ws.disconnect()


async def test_it_rejects_binary_frames(owner, session):
    ws = await connect(owner, session.key)
    await ws.send_to(bytes_data=b"\x00\x01")
    assert "JSON text frames" in (await receive(ws))["message"]
    await ws.disconnect()


async def test_it_answers_help_status_and_compact(owner, session, llm):
    ws = await connect(owner, session.key)
    await send(ws, type="message", text="/help")
    help_frame = await receive(ws)
    assert "/reset" in help_frame["text"]
    assert "<table>" in help_frame["html"]
    await send(ws, type="message", text="/status")
    status = await receive(ws)
    assert "**Model:** scripted" in status["text"] and "**Tokens:** 0 in" in status["text"]
    # Laid out as a list, each reading an item of its own.
    assert "<li><strong>Model:</strong> scripted</li>" in status["html"]
    assert "<li><strong>Context:</strong> about " in status["html"]
    await send(ws, type="message", text="/compact")
    frames = await until(ws)
    assert kinds(frames) == ["started", "notice", "error", "done"]
    assert frames[1]["text"].startswith("Compacting")
    assert "not enough conversation" in frames[2]["message"]
    await send(ws, type="message", text="/stop")
    assert (await receive(ws))["text"] == "Nothing is running."
    await ws.disconnect()


async def test_it_starts_a_fresh_session_on_reset_and_sends_the_rest(owner, session, llm):
    llm.script(Reply(text="Fresh start."))
    ws = await connect(owner, session.key)
    await send(ws, type="message", text="/reset what now?")
    frames = await until(ws)
    assert kinds(frames) == [
        "started",
        "session",
        "status",
        "user_message",
        "status",
        "delta",
        "assistant_response",
        "done",
    ]
    fresh = await Session.objects.aget(owner=owner, key=session.key, status="active")
    assert fresh.pk != session.pk and fresh.continues_from_id == session.pk
    assert frames[1] == {"type": "session", "session_id": str(fresh.pk), "reason": "/reset"}
    await session.arefresh_from_db()
    assert session.status == "archived"
    start = await Event.objects.aget(session_id=str(fresh.pk), event_type="session_start")
    assert start.text == "New session started: /reset."
    # Only the new session's history goes to the model.
    assert llm.requests[0]["messages"][1:] == [{"role": "user", "content": "what now?"}]
    await ws.disconnect()


async def test_it_stops_a_running_turn(owner, session, llm):
    llm.script(Reply(deltas=["a ", "b ", "c ", "d ", "e "], delay=0.3))
    ws = await connect(owner, session.key)
    await send(ws, type="message", text="talk slowly")
    frames = await until(ws, "delta")
    await send(ws, type="stop")
    frames += await until(ws)
    assert frames[-1]["status"] == "stopped"
    assert kinds(frames)[-3:] == ["assistant_response", "system", "done"]
    await ws.disconnect()


async def test_it_queues_a_message_sent_while_answering_and_runs_it_next(owner, session, llm):
    llm.script(Reply(deltas=["x", "y", "z"], delay=0.3), Reply(text="Second answer."))
    ws = await connect(owner, session.key)
    await send(ws, type="message", text="first")
    first = await until(ws, "delta")
    await send(ws, type="message", text="second")
    first += await until(ws, "queued")
    queued = first.pop()
    assert queued["text"] == "second"
    first += await until(ws)
    assert streamed(first) == "xyz" and first[-1]["status"] == "completed"
    second = await until(ws)
    assert second[0] == {"type": "started", "input_id": queued["input_id"]}
    assert stored(second, "user_message")["text"] == "second"
    assert streamed(second) == "Second answer."
    # The model saw the first exchange before the second message, never interleaved.
    assert [m["content"] for m in llm.requests[1]["messages"][1:]] == ["first", "xyz", "second"]
    texts = [
        e.text
        async for e in Event.objects.filter(session_id=str(session.pk)).order_by("id")
        if e.event_type in ("user_message", "assistant_response")
    ]
    assert texts == ["first", "xyz", "second", "Second answer."]
    await ws.disconnect()


async def test_it_shows_a_queued_message_in_every_tab_until_it_starts(owner, session, llm):
    llm.script(Reply(deltas=["x", "y", "z"], delay=0.3), Reply(text="Second answer."))
    sender, other = await connect(owner, session.key), await connect(owner, session.key)
    await send(sender, type="message", text="first")
    await until(sender, "delta")
    await send(sender, type="message", text="second")
    queued = (await until(other, "queued"))[-1]
    assert queued["text"] == "second"
    # A tab opened meanwhile shows it too, from the page.
    client = await sync_to_async(client_for)(owner)
    page = await sync_to_async(client.get)(f"/chat/{session.key}/")
    assert f'id="queued-{queued["input_id"]}"' in page.content.decode()
    await until(other)
    assert (await until(other))[0] == {"type": "started", "input_id": queued["input_id"]}
    await until(sender)
    await until(sender)
    await sender.disconnect()
    await other.disconnect()


async def test_it_queues_a_reset_sent_while_answering(owner, session, llm):
    llm.script(Reply(deltas=["slow ", "answer"], delay=0.3), Reply(text="Fresh."))
    ws = await connect(owner, session.key)
    await send(ws, type="message", text="first")
    first = await until(ws, "delta")
    await send(ws, type="message", text="/new and now?")
    first += await until(ws, "queued")
    assert first.pop()["text"] == "/new and now?"
    assert streamed(first + await until(ws)) == "slow answer"
    frames = await until(ws)
    assert kinds(frames)[:4] == ["started", "session", "status", "user_message"]
    fresh = await Session.objects.aget(owner=owner, key=session.key, status="active")
    assert fresh.continues_from_id == session.pk
    assert await Event.objects.filter(session_id=str(fresh.pk), text="and now?").aexists()
    await ws.disconnect()


async def test_it_says_so_when_a_stop_comes_after_the_turn(owner, session, llm):
    llm.script(Reply(text="Quick."))
    ws = await connect(owner, session.key)
    await send(ws, type="message", text="hi")
    await until(ws)
    await send(ws, type="stop")
    assert await receive(ws) == {"type": "notice", "text": "Nothing is running."}
    assert await Event.objects.filter(event_type="system").acount() == 0
    await ws.disconnect()


async def test_it_pauses_for_approval_in_the_chat(owner, session, llm, configure):
    configure("terminal", enabled=True)
    llm.script(reply_with_tool("terminal", {"command": "echo approved"}), Reply(text="Ran it."))
    ws = await connect(owner, session.key)
    await send(ws, type="message", text="run it")
    frames = await until(ws, "approval_request")
    request = frames[-1]
    assert request["command"] == "echo approved"
    await send(ws, type="approval", request_id=request["request_id"], decision="always")
    frames = await until(ws)
    assert frames[0] == {
        "type": "approval_decided",
        "request_id": request["request_id"],
        "decision": "always",
    }
    result = next(
        f for f in frames if f["type"] == "event" and f["event"]["event_type"] == "tool_result"
    )
    assert "approved" in result["event"]["data"]["content"]
    assert await TerminalAllowedPrefix.objects.filter(owner=owner, prefix="echo").aexists()
    await ws.disconnect()


async def test_it_reports_a_dead_llm_and_stays_usable(owner, session, configure):
    configure("llm", base_url="http://127.0.0.1:9/v1")
    ws = await connect(owner, session.key)
    await send(ws, type="message", text="hello?")
    frames = await until(ws)
    assert kinds(frames) == [
        "started",
        "status",
        "user_message",
        "status",
        "error",
        "error",
        "done",
    ]
    assert "Cannot reach the LLM" in frames[5]["message"]
    assert frames[-1]["status"] == "error"
    await send(ws, type="message", text="/help")
    assert (await receive(ws))["type"] == "notice"
    await ws.disconnect()


async def test_it_renders_html_in_messages_as_text(owner, session, llm):
    llm.script(Reply(text="<script>alert(1)</script> fine"))
    ws = await connect(owner, session.key)
    await send(ws, type="message", text="<img src=x onerror=alert(1)>")
    frames = await until(ws)
    user_html = stored(frames, "user_message")["html"]
    assert "<img" not in user_html and "&lt;img src=x onerror=alert(1)&gt;" in user_html
    answer_html = stored(frames, "assistant_response")["html"]
    assert "<script" not in answer_html and "&lt;script&gt;" in answer_html
    await ws.disconnect()


async def test_it_finishes_the_turn_when_the_socket_drops(owner, session, llm):
    llm.script(Reply(deltas=["kept ", "after ", "disconnect"], delay=0.2))
    ws = await connect(owner, session.key)
    await send(ws, type="message", text="go")
    await until(ws, "delta")
    await ws.disconnect()
    for _ in range(50):
        if await Event.objects.filter(event_type="assistant_response").aexists():
            break
        await asyncio.sleep(0.1)
    answer = await Event.objects.aget(event_type="assistant_response")
    assert answer.data["content"] == "kept after disconnect"
