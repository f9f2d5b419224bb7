"""One input at a time per chat (sessions_app.inputs): the claim, the queue, a
dead holder's turn taken over, and API turns that wait without a thread."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import HttpCommunicator
from django.contrib.auth.models import User
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agent import approvals
from agent.frames import Outcome
from agent.models import ApprovalRequest
from core.history import Actor
from memory import recording
from memory.models import Event
from neotask_site.asgi import application
from sessions_app import chat, runner
from sessions_app.broadcast import APPROVAL, INPUT, signal
from sessions_app.models import LOST, ApiToken, ChatClaim, ChatInput, Session
from tests.support.records import allow_terminal
from tests.support.scripted_llm import Reply, reply_with_tool
from tests.support.websocket import connect, receive, send, until

pytestmark = pytest.mark.django_db(transaction=True)


def turns(session: Session) -> list[tuple[str, str, str | None]]:
    events = Event.objects.filter(session_id=str(session.pk)).order_by("id")
    return [(e.event_type, e.text, e.data.get("reason")) for e in events]


def crashed_holder(owner: User, session: Session, partial: str) -> None:
    """What a process killed mid-answer leaves: its claim, past its lease, and its input."""
    ChatClaim.objects.create(
        owner=owner,
        key=session.key,
        token="a" * 32,
        lease_until=timezone.now() - timedelta(seconds=1),
        session_id=str(session.pk),
        partial=partial,
    )
    ChatInput.objects.create(
        owner=owner, key=session.key, text="tell me everything", status=ChatInput.Status.RUNNING
    )
    recording.record(owner, str(session.pk), "user_message", {"content": "tell me everything"})


async def test_it_keeps_a_dead_holders_streamed_text_and_runs_the_next_message(
    alice, alice_session, llm
):
    await sync_to_async(crashed_holder)(alice, alice_session, "The first half of")
    dead = await ChatInput.objects.aget()
    llm.script(Reply(text="Back again."))
    ws = await connect(alice, alice_session.key)
    # Opening the chat is enough: nobody has to send the next message first.
    buried = await until(ws, timeout=20)
    assert [f["type"] for f in buried] == ["error", "done"]
    assert "stopped while answering" in buried[0]["message"] and buried[1]["status"] == "error"
    assert buried[0]["input_id"] == buried[1]["input_id"] == dead.pk
    await send(ws, type="message", text="hello?")
    answered = await until(ws, timeout=20)
    assert answered[-1]["status"] == "completed"
    assert await sync_to_async(turns)(alice_session) == [
        ("user_message", "tell me everything", None),
        ("assistant_response", "The first half of", "server_stopped"),
        ("error", LOST, None),
        ("user_message", "hello?", None),
        ("assistant_response", "Back again.", None),
    ]
    assert not await ChatInput.objects.aexists()  # nothing waits, nothing is kept
    claim = await ChatClaim.objects.aget(owner=alice, key=alice_session.key)
    assert claim.token == "" and claim.partial == ""
    await ws.disconnect()


async def test_it_queues_behind_a_live_holder_and_takes_over_when_its_lease_runs_out(
    alice, alice_session, llm, monkeypatch
):
    monkeypatch.setattr(runner, "WATCH_SECONDS", 0.2)
    await ChatClaim.objects.acreate(
        owner=alice,
        key=alice_session.key,
        token="b" * 32,
        lease_until=timezone.now() + timedelta(minutes=1),
        session_id=str(alice_session.pk),
    )
    llm.script(Reply(text="Finally."))
    ws = await connect(alice, alice_session.key)
    await send(ws, type="message", text="anyone?")
    queued = await receive(ws)
    assert queued["type"] == "queued" and queued["text"] == "anyone?"
    await asyncio.sleep(0.6)  # the holder is alive: the message waits
    assert await ws.receive_nothing(timeout=0.1)
    assert llm.requests == []
    assert (await ChatInput.objects.aget()).status == ChatInput.Status.QUEUED
    await ChatClaim.objects.filter(key=alice_session.key).aupdate(
        lease_until=timezone.now() - timedelta(seconds=1)
    )
    frames = await until(ws, timeout=20)
    assert frames[0] == {"type": "started", "input_id": queued["input_id"]}
    assert frames[-1]["status"] == "completed"
    assert len(llm.requests) == 1
    await ws.disconnect()


async def test_it_runs_an_api_message_after_the_turn_before_it(alice, alice_session, llm):
    token = (await sync_to_async(ApiToken.issue)(alice, "script"))[1]
    release = threading.Event()
    llm.script(Reply(text="First answer.", hold=release), Reply(text="API answer."))
    ws = await connect(alice, alice_session.key)
    await send(ws, type="message", text="from the page")
    await until(ws, "started", timeout=20)
    api = asyncio.ensure_future(post(token, alice_session, "from a script"))
    await until(ws, "queued", timeout=20)
    release.set()
    response = await api
    assert response["status"] == "completed" and response["answer"] == "API answer."
    # The page saw the API's turn too.
    frames = await until(ws, timeout=20)
    frames += await until(ws, timeout=20)
    assert [f["event"]["text"] for f in frames if f["type"] == "event"][-2:] == [
        "from a script",
        "API answer.",
    ]
    assert [text for _, text, _ in await sync_to_async(turns)(alice_session)] == [
        "from the page",
        "First answer.",
        "from a script",
        "API answer.",
    ]
    await ws.disconnect()


async def post(token: str, session: Session, text: str) -> dict:
    communicator = HttpCommunicator(
        application,
        "POST",
        f"/api/v1/sessions/{session.pk}/messages",
        body=json.dumps({"text": text}).encode(),
        headers=[
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
            (b"host", b"127.0.0.1"),
        ],
    )
    response = await communicator.get_response(timeout=60)
    assert response["status"] == 200, response["body"]
    return json.loads(response["body"])


async def test_it_waits_for_many_api_turns_at_once_without_a_thread_each(alice, llm):
    """50 API turns on one worker are all with the model at the same moment: a
    view holding a thread per turn would stop at the thread pool's size."""
    count = 50
    token = (await sync_to_async(ApiToken.issue)(alice, "script"))[1]
    sessions = [await sync_to_async(chat.start_chat)(alice) for _ in range(count)]
    everyone_asked = threading.Event()
    llm.script(*(Reply(text=f"Answer {n}.", hold=everyone_asked) for n in range(count)))

    def release_when_all_asked() -> None:
        for _ in range(600):
            if len(llm.requests) >= count:
                everyone_asked.set()
                return
            threading.Event().wait(0.1)

    watcher = threading.Thread(target=release_when_all_asked)
    watcher.start()
    answers = await asyncio.gather(
        *(post(token, s, f"question {n}") for n, s in enumerate(sessions))
    )
    watcher.join()
    assert everyone_asked.is_set()
    assert all(answer["status"] == "completed" for answer in answers)
    assert sorted(answer["answer"] for answer in answers) == sorted(
        f"Answer {n}." for n in range(count)
    )


async def test_it_wakes_the_turn_waiting_for_approval_by_the_chats_signal(
    alice, alice_session, llm, configure, monkeypatch
):
    """The decision is stored, then only signalled on the chat's control group (as
    a click in another process is): the waiting turn goes on at once, not at its
    next re-read of the database, here put out of reach."""
    monkeypatch.setattr(approvals, "RECHECK_SECONDS", 600.0)
    configure("terminal", enabled=True)
    await sync_to_async(allow_terminal)(alice)
    llm.script(reply_with_tool("terminal", {"command": "echo signalled"}), Reply(text="Ran it."))
    ws = await connect(alice, alice_session.key)
    await send(ws, type="message", text="run it")
    request_id = (await until(ws, "approval_request"))[-1]["request_id"]
    request = await ApprovalRequest.objects.aget(pk=request_id)
    await sync_to_async(request.decide)("once", Actor.user(alice))
    await signal(alice.pk, alice_session.key, APPROVAL, request_id=request_id)
    frames = await until(ws)
    assert frames[-1]["status"] == "completed"
    results = [
        f for f in frames if f["type"] == "event" and f["event"]["event_type"] == "tool_result"
    ]
    assert "signalled" in results[0]["event"]["data"]["content"]
    await ws.disconnect()


async def test_it_tells_a_waiting_caller_its_outcome_when_the_holder_ends_the_input(
    alice, alice_session, llm, monkeypatch
):
    """An API call whose message waits behind a turn in another holder hears that
    the input ended from the holder's signal, not from its next look, here put out
    of reach."""
    monkeypatch.setattr(runner, "WATCH_SECONDS", 600.0)
    release = threading.Event()
    llm.script(Reply(text="First.", hold=release), Reply(text="Second."))
    ws = await connect(alice, alice_session.key)
    await send(ws, type="message", text="one")
    await until(ws, "started")
    waiting = asyncio.ensure_future(
        runner.submit(alice, alice_session.key, "two", commands=False, wait=True)
    )
    await until(ws, "queued")
    release.set()
    outcome = await asyncio.wait_for(waiting, 60)
    assert outcome is not None and (outcome.status, outcome.answer) == ("completed", "Second.")
    await ws.disconnect()


def test_it_hands_an_awaited_outcome_to_its_caller_when_it_runs_in_the_same_process(
    alice, alice_session, llm
):
    llm.script(Reply(text="Here."))
    with CaptureQueriesContext(connection) as queries:
        outcome = async_to_sync(runner.submit)(alice, alice_session.key, "hi", wait=True)
    assert outcome is not None and (outcome.status, outcome.answer) == ("completed", "Here.")
    # Handed over in process: the input's row went at its end, the outcome never in it.
    writes = [q["sql"] for q in queries.captured_queries if "sessions_app_chatinput" in q["sql"]]
    assert not [sql for sql in writes if sql.startswith("UPDATE") and "outcome" in sql]
    assert not ChatInput.objects.exists()
    assert not runner.WAITED_HERE


def test_a_free_claim_is_not_taken_past_an_input_left_waiting(alice, alice_session, llm):
    """An input stored just as its chat's holder let go (PostgreSQL: the holder's
    last look missed it) runs first: the next one is queued behind it."""
    llm.script(Reply(text="First."), Reply(text="Second."))
    ChatInput.objects.create(owner=alice, key=alice_session.key, text="left waiting")
    item, holder = runner.enqueue(alice, alice_session.key, {"text": "later"})
    assert item.status == ChatInput.Status.QUEUED
    if holder is None:  # SQLite: left to the waiting input's sender, whose wait takes over
        assert async_to_sync(runner.take_over)(alice, alice_session.key)
    else:  # PostgreSQL: the claim taken after storing it (queued), the queue run in order
        async_to_sync(holder.run_queue)()
    messages = Event.objects.filter(event_type="user_message").order_by("id")
    assert [event.text for event in messages] == ["left waiting", "later"]
    assert not ChatInput.objects.exists()


async def test_a_caller_reads_the_outcome_another_process_stored_for_it(alice, alice_session):
    """The input runs in another process (a holder's claim taken there): its outcome
    comes back through its row, which the caller then deletes."""
    elsewhere = await sync_to_async(ChatClaim.objects.take)(alice.pk, alice_session.key)
    waiting = asyncio.ensure_future(
        runner.submit(alice, alice_session.key, "for the other process", commands=False, wait=True)
    )
    while not await ChatInput.objects.filter(owner=alice).aexists():
        await asyncio.sleep(0.01)
    # The other process runs it and lets go, as its Holder does.
    item = await sync_to_async(ChatInput.objects.next_for)(alice.pk, alice_session.key)
    assert item is not None and item.awaited
    done = Outcome(session_id=str(alice_session.pk), answer="From afar.")
    await sync_to_async(item.finish)(done)
    assert await sync_to_async(elsewhere.release)(unless_queued=True)
    await signal(alice.pk, alice_session.key, INPUT)
    outcome = await asyncio.wait_for(waiting, 30)
    assert outcome == done
    assert not await ChatInput.objects.aexists()


async def test_it_keeps_renewing_its_lease_through_a_database_error(
    alice, alice_session, llm, monkeypatch
):
    """A renewal that fails (PostgreSQL restarting) is tried again: a holder that
    stopped renewing would lose its live turn to a successor 20 s later."""
    monkeypatch.setattr(runner, "RENEW_SECONDS", 0.05)
    renewals: list[str] = []
    real = ChatClaim.renew

    def restarting_once(claim: ChatClaim, session_id: str, partial: str) -> bool:
        renewals.append(session_id)
        if len(renewals) == 1:
            raise OperationalError("the database system is shutting down")
        return real(claim, session_id, partial)

    monkeypatch.setattr(ChatClaim, "renew", restarting_once)
    release = threading.Event()
    llm.script(Reply(text="Still here.", hold=release))
    ws = await connect(alice, alice_session.key)
    await send(ws, type="message", text="are you there?")
    await until(ws, "started")
    for _ in range(200):
        if len(renewals) >= 3:
            break
        await asyncio.sleep(0.05)
    release.set()
    assert len(renewals) >= 3
    assert (await until(ws))[-1]["status"] == "completed"
    await ws.disconnect()
