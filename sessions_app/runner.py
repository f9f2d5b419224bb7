"""Inputs arriving in a chat, and the process that runs them: the one entry
point for the websocket, the API and the scheduler.

/help, /status, /stop and the commands that run a memory or schedule tool
(sessions_app.commands) answer at once. Everything else that changes the chat —
a message, /new and /reset, /compact, a retry — is stored as a `ChatInput` and
run in order, one at a time, by whichever process holds the chat's claim
(`ChatClaim`: a conditional UPDATE with a random token and a lease the holder
renews). What an input does to the chat is decided in sessions_app.turns; here
it is only leased, run and broadcast. An input is counted against its owner's
quota (sessions_app.quotas), and reserves its tokens, in the transaction that
stores it: a refused one is never stored, and its sender is told
(quotas.QuotaExceeded); the reservation is given back when it finishes.

A process that cannot take the claim leaves its input queued, says so to the
chat's tabs, and waits (`wait_for`): the holder runs the input next, or, if the
holder's process died and its lease ran out, the waiter takes the claim, keeps
the dead turn's streamed text as an interrupted answer, and runs the queue
itself. Processes signal each other on the chat's control group
(sessions_app.broadcast): /stop and approvals reach the holder, the end of each
input the waiters.

Every run ends with one `done` frame; its frames go to all tabs of the chat and
into an `Outcome`, which the API and the scheduler wait for.
A message's whole path, end to end: docs/chat-runtime.md#the-holder-runs-the-queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.db import DatabaseError, connection, transaction

from agent import approvals
from agent.frames import (
    ApprovalDecided,
    Delta,
    Done,
    Emit,
    Error,
    EventFrame,
    Frame,
    Notice,
    Outcome,
    Queued,
    SessionChanged,
    Started,
)
from agent.llm import Usage
from core.ownership import Owner
from memory.models import EventType
from monitoring import counters, logs
from sessions_app import quotas, turns
from sessions_app.broadcast import APPROVAL, INPUT, STOP, Signals, broadcast, signal
from sessions_app.chat import ChatError
from sessions_app.commands import NOTHING_RUNNING, answer_now, parse_command
from sessions_app.models import LOST, ChatClaim, ChatInput

log = logging.getLogger(__name__)
turn_log = logging.getLogger("neotask.turns")  # one line a turn, in JSON logs

WATCH_SECONDS = 5.0  # a waiter looks again this often, signalled or not
# The holder renews its lease, saving the text streamed so far, this often, and at
# an input's first streamed text: a crash then loses at most this much of an answer.
RENEW_SECONDS = 5.0
FAILED = "The server failed while answering; it was logged."
UNSAVED = "The answer could not be saved: the database failed (it was logged)."
DELETED = "The chat was deleted."
ANSWERS = (EventType.ASSISTANT_RESPONSE,)  # a stored answer: the streamed text is kept

# Runs started in the background, kept from the garbage collector until they end.
BACKGROUND: set[asyncio.Task] = set()
# The inputs a caller in this process waits for (`queue` with `wait`), by id: one
# that runs here has its outcome handed over in this, not stored in its row
# for the caller to read back.
WAITED_HERE: dict[int, Outcome | None] = {}


async def submit(
    owner: Owner,
    key: str,
    text: str,
    reply: Emit | None = None,
    *,
    commands: bool = True,
    wait: bool = False,
    trusted: bool = False,
    approval_timeout: float | None = None,
    scheduled: bool = False,
) -> Outcome | None:
    """`text` (already checked by chat.check_message) arrives in the chat `key`.

    `reply` answers the sender alone (the commands that answer at once). With `wait`, the
    input's `Outcome` once it has run (the API and the scheduler); else the
    run goes on in the background and its frames reach the chat's tabs.
    Raises quotas.QuotaExceeded, having stored nothing, when the owner's quota
    is used up (a `scheduled` run is not held to the per-minute limit)."""
    command = parse_command(text) if commands else None
    kind, body, typed = ChatInput.Kind.MESSAGE, text, ""
    if command is not None:
        if not command.slash.queued:
            await answer_now(owner, key, command, reply)
            return None
        kind = ChatInput.Kind.COMPACT if command.name == "compact" else ChatInput.Kind.RESET
        body, typed = command.argument, command.name
    fields = {
        "kind": kind,
        "text": body,
        "command": typed,
        "trusted": trusted,
        "approval_timeout": approval_timeout,
        "awaited": wait,
    }
    return await queue(owner, key, fields, wait=wait, paced=not scheduled)


async def retry(owner: Owner, key: str, event_id: int, text: str) -> None:
    """The turn that ended with event `event_id` runs again from its message
    `text` (turns.check_retry checked it), in its turn like any input."""
    fields = {"kind": ChatInput.Kind.RETRY, "text": text, "retry_of": event_id}
    await queue(owner, key, fields)


def enqueue(
    owner: Owner, key: str, fields: dict[str, Any], *, paced: bool = True
) -> tuple[ChatInput, Holder | None]:
    """The input counted against its owner's quota and stored with the chat's
    claim tried, in one transaction: in the common case, a chat nobody is
    answering in, it is stored running. The holder that took the claim, with the
    first input of the queue started. Raises quotas.QuotaExceeded, having stored
    nothing.

    A free claim is taken only if no input waits (`idle`): one stored while its
    holder let go (on PostgreSQL a holder's last look may miss an input whose
    transaction had not committed) is run first, by its sender (`wait_for`).
    On PostgreSQL all this is one statement when the chat is idle
    (ChatInput.objects.store)."""
    kind, text = fields.get("kind", ChatInput.Kind.MESSAGE), fields.get("text", "")
    if connection.vendor == "postgresql":
        return enqueue_in_one_statement(owner, key, fields, paced=paced)
    with transaction.atomic():  # a refused input is not stored; a failed store not counted
        reservation = quotas.admit_input(owner, kind, text, paced=paced)
        claim = ChatClaim.objects.take(owner.pk, key, idle=True)
        starts = claim is not None and claim.abandoned is None
        status = ChatInput.Status.RUNNING if starts else ChatInput.Status.QUEUED
        fields = {**fields, **reservation.fields(), "status": status}
        item = ChatInput.objects.create(owner=owner, key=key, **fields)
    return item, holder_of(owner, key, claim, item)


def enqueue_in_one_statement(
    owner: Owner, key: str, fields: dict[str, Any], *, paced: bool
) -> tuple[ChatInput, Holder | None]:
    kind, text = fields.get("kind", ChatInput.Kind.MESSAGE), fields.get("text", "")
    counting = quotas.input_admission(owner, kind, text, paced=paced)
    reservation = counting.reservation if counting is not None else quotas.Reservation()
    fields = {**fields, **reservation.fields()}
    stored = ChatInput.objects.store(owner, key, fields, counting)
    if stored is None:
        assert counting is not None  # only a count refuses
        raise counting.refused(owner)
    item, claim = stored
    if claim is None:  # held, a dead holder's, never taken yet, or an input waits: queued
        claim = ChatClaim.objects.take(owner.pk, key)
        if claim is not None and claim.abandoned is None:
            return item, Holder(owner, key, claim, ChatInput.objects.next_for(owner.pk, key))
    return item, holder_of(owner, key, claim, item)


def holder_of(owner: Owner, key: str, claim: ChatClaim | None, item: ChatInput) -> Holder | None:
    """The holder of the `claim` just taken, with `item` started if it is running."""
    if claim is None:
        return None
    if claim.abandoned is not None:  # what a dead holder left is buried first
        return Holder(owner, key, claim)
    return Holder(owner, key, claim, item)


async def queue(
    owner: Owner,
    key: str,
    fields: dict[str, Any],
    *,
    wait: bool = False,
    paced: bool = True,
    stored: Callable[[ChatInput], None] | None = None,
) -> Outcome | None:
    """The input stored; run here if the chat's claim is free, else announced
    and left to its holder. With `wait`, its `Outcome` once it has run. `stored`
    learns the input before it starts (a stream picks its frames by its id)."""
    item, holder = await database_sync_to_async(enqueue)(owner, key, fields, paced=paced)
    if stored is not None:
        stored(item)
    if not wait:
        background(start(owner, key, item, holder))
        return None
    WAITED_HERE[item.pk] = None
    try:
        if holder is not None:
            await holder.run_queue()
        else:
            await announce(owner, key, item)
        return await wait_for(owner, key, item.pk, outcome=True)
    finally:
        del WAITED_HERE[item.pk]


async def start(owner: Owner, key: str, item: ChatInput, holder: Holder | None) -> None:
    if holder is not None:
        return await holder.run_queue()
    await announce(owner, key, item)
    await wait_for(owner, key, item.pk)


def answer_approval(user: Owner, key: str, request_id: str, decision: str) -> None:
    """A person's decision on a terminal command, from a click or a socket frame:
    applied (agent.approvals.decide: the owner's, with the permission, once), then
    the turn waiting for it told, in whichever process it runs, and every tab of
    the chat, whose cards then go. Raises ApprovalError."""
    approvals.decide(user, request_id, decision)
    approvals.wake(request_id)  # the turn, if it runs in this process
    async_to_sync(decided)(user.pk, key, request_id, decision)


async def decided(owner_id: int, key: str, request_id: str, decision: str) -> None:
    await signal(owner_id, key, APPROVAL, request_id=request_id)
    await broadcast(owner_id, key, ApprovalDecided(request_id, decision))


def background(coroutine: Awaitable[None]) -> None:
    task = asyncio.ensure_future(coroutine)
    BACKGROUND.add(task)
    task.add_done_callback(BACKGROUND.discard)


async def announce(owner: Owner, key: str, item: ChatInput) -> None:
    await broadcast(owner.pk, key, Queued(item.pk, item.shown))


async def wait_for(
    owner: Owner, key: str, input_id: int, *, outcome: bool = False
) -> Outcome | None:
    """Until input `input_id` has started — with `outcome`, until it has run, and
    its outcome, read — running the chat's queue here whenever nobody holds the
    claim (its holder died, or let go just as the input arrived)."""
    read = database_sync_to_async(ChatInput.objects.filter(pk=input_id).first)

    def handed() -> Outcome | None:  # run here, and ended
        return WAITED_HERE.get(input_id) if outcome else None

    async with Signals(owner.pk, key) as signals:
        while True:
            if (here := handed()) is not None:
                return here
            item = await read()
            # Handed over before its row goes: looked for again if the read missed it.
            if (here := handed()) is not None:
                return here
            if item is None:  # ended, and not kept (or the chat was deleted meanwhile)
                return Outcome(session_id="", status="error", error=DELETED) if outcome else None
            if item.status == ChatInput.Status.DONE:
                await database_sync_to_async(item.delete)()
                return Outcome.from_json(item.outcome)
            if item.status == ChatInput.Status.RUNNING and not outcome:
                return None
            if not await take_over(owner, key):
                await signals.next(WATCH_SECONDS)


async def resume(owner: Owner, key: str) -> None:
    """A page opened the chat: run what waits in it if nobody runs it, and end what
    a dead holder left running as soon as its lease runs out (meanwhile this
    watches, as a waiter does, until the socket closes and cancels it). Its tabs
    then learn how that input ended."""
    unfinished = database_sync_to_async(ChatInput.objects.unfinished(owner.pk, key).exists)
    take = database_sync_to_async(ChatClaim.objects.take)
    if not await unfinished():
        return
    async with Signals(owner.pk, key) as signals:
        while (claim := await take(owner.pk, key)) is None:
            await signals.next(WATCH_SECONDS)
            if not await unfinished():  # its holder, alive, ended it
                return
    # In the background: the socket that opened may close (and cancel the watch).
    background(Holder(owner, key, claim).run_queue())


async def take_over(owner: Owner, key: str) -> bool:
    """Run the chat's queue here if its claim is free or its holder died; whether it did."""
    claim = await database_sync_to_async(ChatClaim.objects.take)(owner.pk, key)
    if claim is None:
        return False
    await Holder(owner, key, claim).run_queue()
    return True


class Holder:
    """This process's hold on a chat's claim, while it runs the chat's queue.

    While it runs it renews its lease (saving the text streamed so far, which a
    successor keeps if this process dies), listens for /stop and approvals on
    the chat's control group, and sends each input's frames to the chat's tabs;
    it lets go of the claim when the queue is empty."""

    def __init__(
        self, owner: Owner, key: str, claim: ChatClaim, first: ChatInput | None = None
    ) -> None:
        self.owner, self.key, self.claim = owner, key, claim
        self.first = first  # the queue's first input, already started (enqueue)
        self.session_id = ""  # where the running input writes
        self.partial = ""  # its answer streamed so far
        self.current: asyncio.Task | None = None
        self.started = 0.0  # when the running input started (time.monotonic)
        self.first_token: float | None = None  # seconds to its first streamed token
        self.input_id: int | None = None  # the running input's
        self.save_now = asyncio.Event()  # renew the lease at once (the first streamed text)

    async def run_queue(self) -> None:
        """Run the chat's inputs, one at a time, until none waits; then let go."""
        db = database_sync_to_async
        async with Signals(self.owner.pk, self.key) as signals:
            renewing = asyncio.create_task(self.renew())
            listening = asyncio.create_task(self.listen(signals))
            item = self.first
            try:
                if self.claim.abandoned is not None:
                    await self.bury()
                if item is None:
                    item = await db(self.claim.hand_on)()
                while item is not None:
                    # Every line logged while the input runs names it (the run's
                    # task and `end` copy this context).
                    logs.bind_chat(self.owner.pk, self.key, item.pk)
                    # Its own task, so that /stop cancels the run and not this loop.
                    self.current = asyncio.create_task(self.run(item))
                    outcome, done = await self.current
                    self.current = None
                    done = dataclasses.replace(done, input_id=item.pk)
                    outcome.take(done)
                    # Finished and, if nothing waits, let go before `done` goes out: a
                    # client that sends its next message on `done` then finds the chat
                    # free, and a /stop after `done` finds nothing running. `done` goes
                    # out whatever the database says.
                    ran = item
                    try:
                        item = await db(self.end)(ran, outcome)
                    except DatabaseError:
                        await self.unsaved(ran, outcome)
                        item = None  # nothing more runs here
                    finally:
                        await broadcast(self.owner.pk, self.key, done)
                        await signal(self.owner.pk, self.key, INPUT)
            finally:
                renewing.cancel()
                listening.cancel()
                if item is not None:  # left early (a failure): nothing more runs here
                    await db(self.claim.release)()
                    await signal(self.owner.pk, self.key, INPUT)

    async def unsaved(self, item: ChatInput, outcome: Outcome) -> None:
        """The input ran but could not be marked finished (a full disk, a lost
        database): its tabs are told, and the claim is kept, not let go, so that
        its lease runs out and whoever takes it next ends the input as a dead
        holder's (`bury`), with the answer streamed so far, if that can be saved."""
        log.exception("chat input %s ran, but could not be marked finished", item.pk)
        if outcome.error != UNSAVED:  # the turn itself could not store its answer: said
            await broadcast(self.owner.pk, self.key, Error(UNSAVED, item.pk))
        with contextlib.suppress(DatabaseError):
            await database_sync_to_async(self.claim.renew)(self.session_id, self.partial)

    def end(self, item: ChatInput, outcome: Outcome) -> ChatInput | None:
        waited_here = item.pk in WAITED_HERE
        if waited_here:  # handed to its caller, not kept for it to read back
            WAITED_HERE[item.pk] = outcome
        item.finish(outcome, keep=item.awaited and not waited_here)
        following = self.claim.hand_on()
        counters.count_turn(outcome.status, self.first_token)
        turn_log.info(
            "turn", extra={"status": outcome.status, "first_token_seconds": self.first_token}
        )
        return following

    async def run(self, item: ChatInput) -> tuple[Outcome, Done]:
        """One input, to the frame that ends it; never raises."""
        outcome = Outcome(session_id="")

        async def emit(frame: Frame) -> None:
            await self.emit(outcome, frame)

        self.started, self.first_token, self.input_id = time.monotonic(), None, item.pk
        await emit(Started(item.pk))
        try:
            opened = await database_sync_to_async(turns.open_input)(self.owner, self.key, item)
            self.session_id = outcome.session_id = str(opened.session.pk)
            ended = await turns.run(opened, item, emit)
            outcome.answer, outcome.error = ended.answer, ended.error or None
            return outcome, ended.done()
        except (ChatError, turns.RetryError) as exc:  # deleted, or moved on, meanwhile
            outcome.error = str(exc)
            await emit(Error(str(exc)))
        except asyncio.CancelledError:  # /stop outside the agent's turn (which handles its own)
            return outcome, Done(Usage().as_dict(), "stopped")
        except DatabaseError:  # a full disk, a lost database: what was streamed is not kept
            log.exception("chat input %s failed: the database did", item.pk)
            outcome.error = UNSAVED
            await emit(Error(UNSAVED))
        except Exception:
            log.exception("chat input %s failed", item.pk)
            outcome.error = FAILED
            await emit(Error(FAILED))
        return outcome, Done(Usage().as_dict(), "error")

    async def emit(self, outcome: Outcome, frame: Frame) -> None:
        if isinstance(frame, Error) and frame.input_id is None:
            frame = dataclasses.replace(frame, input_id=self.input_id)
        outcome.take(frame)
        if isinstance(frame, Delta):
            self.partial += frame.text
            if self.first_token is None:
                self.first_token = time.monotonic() - self.started
                self.save_now.set()  # kept from the first text on, not from the first renewal
        elif isinstance(frame, EventFrame) and frame.event["event_type"] in ANSWERS:
            self.partial = ""
        elif isinstance(frame, SessionChanged):
            self.session_id = frame.session_id
        await broadcast(self.owner.pk, self.key, frame)

    async def renew(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.save_now.wait(), RENEW_SECONDS)
            self.save_now.clear()
            try:
                held = await database_sync_to_async(self.claim.renew)(self.session_id, self.partial)
            except DatabaseError as exc:  # restarting: the lease has 20 s, try again in 5
                log.warning("could not renew the claim on chat %s (%s)", self.key, exc)
                continue
            if not held:  # this process stalled past its lease and another took over
                log.warning("lost the claim on chat %s; its input is stopped", self.key)
                if self.current is not None:
                    self.current.cancel()
                return

    async def listen(self, signals: Signals) -> None:
        while True:
            message = await signals.next()
            if message is None:
                continue
            if message["type"] == APPROVAL:
                approvals.wake(message["request_id"])
            elif message["type"] == STOP:
                if self.current is not None and not self.current.done():
                    self.current.cancel()
                else:  # between two inputs, or just after one ended
                    await broadcast(self.owner.pk, self.key, Notice(NOTHING_RUNNING))

    async def bury(self) -> None:
        """End what a crashed holder left running: keep its streamed text."""
        abandoned = self.claim.abandoned
        assert abandoned is not None
        running = await database_sync_to_async(self.claim.bury)()
        for item in running:
            outcome = Outcome(session_id=abandoned.session_id, status="error", error=LOST)
            await database_sync_to_async(item.finish)(outcome)
            await broadcast(self.owner.pk, self.key, Error(LOST, item.pk))
            done = Done(Usage().as_dict(), "error", input_id=item.pk)
            await broadcast(self.owner.pk, self.key, done)
