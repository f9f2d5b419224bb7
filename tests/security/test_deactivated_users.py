"""A deactivated account stops: its open chat sockets close (at once, and in any
case on their next frame), its scheduled tasks do not run, its API tokens and
browser sessions get nothing more."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client

from scheduler import due_tasks
from scheduler.models import ScheduledTask
from sessions_app import chat
from sessions_app.models import ApiToken, Session
from tests.support.records import MONDAY_9, make_task
from tests.support.scripted_llm import Reply
from tests.support.websocket import communicator, connect, receive, send


async def closed(ws: WebsocketCommunicator) -> dict:
    """What the server sent next, skipping frames of a turn that was under way."""
    while (message := await ws.receive_output(timeout=10))["type"] != "websocket.close":
        pass
    return message


@pytest.mark.django_db(transaction=True)
async def test_it_closes_an_open_socket_on_its_next_frame(alice):
    session = await sync_to_async(chat.start_chat)(alice)
    ws = await connect(alice, session.key)
    await send(ws, type="message", text="/help")
    assert (await receive(ws))["type"] == "notice"
    # No save signal (a bulk update, or a close lost with the channel layer):
    # the frame itself finds the account inactive.
    await User.objects.filter(pk=alice.pk).aupdate(is_active=False)
    await send(ws, type="message", text="/help")
    assert await closed(ws) == {"type": "websocket.close", "code": 4403}


@pytest.mark.django_db(transaction=True)
async def test_it_closes_every_open_socket_when_the_account_is_deactivated(alice, bob):
    first, second = [await sync_to_async(chat.start_chat)(alice) for _ in range(2)]
    sockets = [await connect(alice, first.key), await connect(alice, second.key)]
    bobs = await connect(bob, (await sync_to_async(chat.start_chat)(bob)).key)
    alice.is_active = False
    await sync_to_async(alice.save)()  # as the admin's "Active" checkbox does
    for ws in sockets:
        assert await ws.receive_output(timeout=10) == {"type": "websocket.close", "code": 4403}
    # Bob's socket is his own.
    await send(bobs, type="message", text="/help")
    assert (await receive(bobs))["type"] == "notice"
    await bobs.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_it_refuses_a_socket_for_an_inactive_account(alice):
    session = await sync_to_async(chat.start_chat)(alice)
    alice.is_active = False
    ws = communicator(alice, session.key)
    await ws.connect()
    assert await ws.receive_output(timeout=5) == {"type": "websocket.close", "code": 4403}


@pytest.mark.django_db(transaction=True)
def test_it_does_not_run_an_inactive_owners_tasks(alice, bob, llm):
    llm.script(Reply(text="Done."))
    make_task(alice, "Alice's report")
    bobs = make_task(bob, "Bob's report")
    User.objects.filter(pk=alice.pk).update(is_active=False)
    report = due_tasks.run_due_tasks(now=MONDAY_9)
    assert [run.task_id for run in report.runs] == [str(bobs.pk)]
    assert not Session.objects.filter(owner=alice).exists()


@pytest.mark.django_db(transaction=True)
def test_it_does_not_run_an_inactive_owners_task_queued_to_run_now(alice, llm):
    task = make_task(alice)
    User.objects.filter(pk=alice.pk).update(is_active=False)
    assert due_tasks.run_now(str(task.pk)) is None
    assert not Session.objects.filter(owner=alice).exists()
    # Reactivated, the task is due again as after any downtime: it runs once.
    User.objects.filter(pk=alice.pk).update(is_active=True)
    llm.script(Reply(text="Done."))
    assert [run.task_id for run in due_tasks.run_due_tasks(now=MONDAY_9).runs] == [str(task.pk)]
    assert ScheduledTask.objects.get(pk=task.pk).next_run_at > MONDAY_9


def test_it_refuses_an_inactive_owners_token_and_session(alice, alice_client):
    token = ApiToken.issue(alice, "script")[1]
    bearer = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert bearer.get("/api/v1/sessions/").status_code == 200
    User.objects.filter(pk=alice.pk).update(is_active=False)
    assert bearer.get("/api/v1/sessions/").status_code == 401
    assert alice_client.get("/api/v1/sessions/").status_code == 401
    assert alice_client.get("/sessions/")["Location"].startswith("/accounts/login/")
