"""Isolation over the websocket: alice's chats refuse bob and anonymous visitors, and
bob's frames in his own chat cannot approve, stop or read anything of alice's."""

from __future__ import annotations

import threading

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Permission, User

from agent.models import ApprovalRequest, TerminalAllowedPrefix
from neotask_site.asgi import application
from sessions_app import chat
from sessions_app.routing import websocket_urlpatterns
from tests.support.scripted_llm import Reply
from tests.support.websocket import communicator, connect, receive, send, until
from tests.support.world import MARK, leaks, snapshot

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_has_an_isolation_case_for_every_websocket_route():
    # The chat route is the only one, tried by the tests below; a new one needs its own.
    routes = [str(route.pattern).split("(?P")[0] for route in websocket_urlpatterns]
    assert routes == ["^ws/chat/"]


async def closed_with(ws: WebsocketCommunicator) -> int:
    await ws.connect()
    message = await ws.receive_output(timeout=10)
    assert message["type"] == "websocket.close", message
    return message["code"]


async def test_it_refuses_alices_chats_to_bob(alices_world, bob):
    for key in (alices_world.chat.key, alices_world.cron.key, alices_world.archived.key):
        ws = communicator(bob, key)
        assert await closed_with(ws) == 4404, key
        # Nothing was sent before the close: no event, no meter of hers.
        assert await ws.receive_nothing(timeout=0.1)


async def test_it_closes_alices_chats_as_it_closes_chats_that_do_not_exist(alices_world, bob):
    """No existence oracle: bob learns nothing from how his socket is closed."""
    answers = []
    for key in (
        alices_world.chat.key,
        alices_world.chat.key.rsplit(":", 1)[0] + ":nosuchchat",
        "garbage",
    ):
        ws = communicator(bob, key)
        await ws.connect()
        answers.append([await ws.receive_output(timeout=10), await ws.receive_nothing(0.1)])
    assert answers == [[{"type": "websocket.close", "code": 4404}, True]] * 3


async def test_it_refuses_anonymous_visitors(alices_world):
    ws = WebsocketCommunicator(
        application,
        f"/ws/chat/{alices_world.chat.key}/",
        headers=[(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000")],
    )
    assert await closed_with(ws) == 4403


async def test_it_ignores_bobs_approval_of_alices_request(alices_world, bob):
    # Bob may approve terminal commands: only the ownership check stands in his way.
    await sync_to_async(bob.user_permissions.add)(
        await Permission.objects.aget(codename="use_terminal")
    )
    bob = await User.objects.aget(pk=bob.pk)  # fresh permission cache
    mine = await sync_to_async(chat.start_chat)(bob)
    before = await sync_to_async(snapshot)(alices_world.user)
    ws = await connect(bob, mine.key)
    for decision in ("always", "once", "deny"):
        await send(ws, type="approval", request_id=str(alices_world.approval.pk), decision=decision)
        reply = await receive(ws)
        assert reply == {"type": "error", "message": "There is no such approval request."}
    await ws.disconnect()
    approval = await ApprovalRequest.objects.aget(pk=alices_world.approval.pk)
    assert approval.status == ApprovalRequest.Status.PENDING
    assert not await TerminalAllowedPrefix.objects.filter(owner=bob).aexists()
    assert await sync_to_async(snapshot)(alices_world.user) == before


async def test_it_lets_bobs_stop_touch_only_his_own_chat(alices_world, bob, llm):
    """Alice's turn is running; bob's /stop and stop frame reach neither it nor her tabs."""
    release = threading.Event()
    llm.script(Reply(text=f"Still here {MARK}-stream", hold=release))
    alices = await connect(alices_world.user, alices_world.chat.key)
    mine = await sync_to_async(chat.start_chat)(bob)
    bobs = await connect(bob, mine.key)
    await send(alices, type="message", text="talk to me")
    assert (await receive(alices))["type"] == "started"
    assert (await receive(alices))["type"] == "status"
    assert (await receive(alices))["event"]["event_type"] == "user_message"
    await send(bobs, type="stop")
    await send(bobs, type="message", text="/stop")
    assert [await receive(bobs), await receive(bobs)] == [
        {"type": "notice", "text": "Nothing is running."}
    ] * 2
    release.set()
    frames = await until(alices)
    assert frames[-1]["status"] == "completed"
    # Bob's socket heard nothing of alice's turn.
    assert await bobs.receive_nothing(timeout=0.5)
    await alices.disconnect()
    await bobs.disconnect()


async def test_it_keeps_alices_memory_out_of_bobs_status(alices_world, bob, llm):
    mine = await sync_to_async(chat.start_chat)(bob)
    llm.script(Reply(text="I don't know."))
    ws = await connect(bob, mine.key)
    await send(ws, type="message", text="What is the vault code of the lake house?")
    frames = await until(ws)
    await send(ws, type="message", text="/status")
    status = await receive(ws)
    for frame in [*frames, status]:
        assert not leaks(str(frame), alices_world), frame
    prompt = str(llm.requests[0]["messages"])
    assert not leaks(prompt, alices_world)
    await ws.disconnect()
