"""An input arrives in a chat: the one entry point for the websocket, the API and the scheduler.

/help, /status and /stop answer at once. Everything else that changes the
chat — a message, /new and /reset, /compact — is stored as a `ChatInput` and
run in order, one at a time, by whichever process holds the chat's claim
(`ChatClaim`: a conditional UPDATE with a random token and a lease the holder
renews). A process that cannot take the claim leaves its input queued, says so
to the chat's tabs, and keeps an eye on the holder: the holder runs the input
next, or, if the holder's process died and its lease ran out, the watcher takes
the claim, keeps the dead turn's streamed text as an interrupted answer, and
runs the queue itself. /stop reaches the holder from any process through the
chat's control group on the channel layer.

Every run ends with one `done` frame; its frames go to all tabs of the chat
and into an `Outcome`, which the API and the scheduler wait for.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.db.models import Q
from django.template.loader import render_to_string
from django.utils import timezone
from redis.exceptions import RedisError

from agent.frames import (
    Delta,
    Done,
    Error,
    EventFrame,
    Frame,
    Meter,
    Notice,
    Outcome,
    Queued,
    SessionChanged,
    Started,
)
from agent.llm import Usage
from memory import recording
from memory.models import Event, EventType
from sessions_app import chat
from sessions_app.compaction import CompactionError, compact
from sessions_app.lifecycle import rollover
from sessions_app.models import ChatClaim, ChatInput, Session

log = logging.getLogger(__name__)

Reply = Callable[[Frame], Awaitable[None]]

LEASE = timedelta(seconds=20)
RENEW_SECONDS = 5.0  # the holder renews its lease (and saves the streamed text) this often
WATCH_SECONDS = 5.0  # a queued input's process checks on the holder this often
POLL_SECONDS = 0.25  # a waiter whose input runs in another process reads its outcome
FAILED = "The server failed while answering; it was logged."
NOTHING_RUNNING = "Nothing is running."
LOST = "The server stopped while answering; the text streamed until then is kept."

# Runs started in the background, kept from the garbage collector until they end.
BACKGROUND: set[asyncio.Task] = set()


def group_name(owner_id: int, key: str) -> str:
    """The channel-layer group of a chat's tabs."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return f"chat.{owner_id}.{digest}"


def control_group(owner_id: int, key: str) -> str:
    """Where /stop goes: only the holder listens, so frames never reach it twice."""
    return f"{group_name(owner_id, key)}.control"


def render_event(event: Event) -> str:
    """An event as the chat page shows it (no database access: safe in the event loop)."""
    return render_to_string("sessions_app/_event.html", {"event": event})


async def broadcast(owner_id: int, key: str, frame: Frame) -> None:
    """`frame` to every tab of the chat; an event with its HTML, rendered once here.

    Without the channel layer (Redis restarting) the frame is dropped and the
    run goes on: its events are stored, and pages catch up when they reconnect."""
    data = frame.as_json()
    if isinstance(frame, EventFrame) and frame.stored is not None:
        data["event"] = {**frame.event, "html": render_event(frame.stored)}
    try:
        await get_channel_layer().group_send(
            group_name(owner_id, key), {"type": "chat.frame", "frame": data}
        )
    except (RedisError, OSError) as exc:
        log.warning("a %s frame was not sent: the channel layer is down (%s)", frame.type, exc)


async def submit(
    owner: Any,
    key: str,
    text: str,
    reply: Reply | None = None,
    *,
    commands: bool = True,
    wait: bool = False,
    trusted: bool = False,
    approval_timeout: float | None = None,
) -> Outcome | None:
    """`text` (already checked by chat.check_message) arrives in the chat `key`.

    `reply` answers the sender alone (/help, /status, /stop). With `wait`, the
    input's `Outcome` once it has run (the API and the scheduler); else the
    run goes on in the background and its frames reach the chat's tabs."""
    command = chat.parse_command(text) if commands else None
    kind, body, typed = ChatInput.Kind.MESSAGE, text, ""
    if command is not None:
        if command.name in ("help", "status", "stop"):
            await answer_now(owner, key, command.name, reply)
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
    token = secrets.token_hex(16)
    # Stored and the claim tried in one database hop: the common case, a chat
    # nobody is answering in, costs no more.
    item, won, dead = await database_sync_to_async(enqueue)(owner, key, fields, token)
    holder = Holder(owner, key, token, dead) if won else None
    if wait:
        if holder is not None:
            await holder.drain()
        else:
            await announce(owner, key, item)
        return await outcome_of(owner, key, item.pk)
    background(start(owner, key, item, holder))
    return None


async def answer_now(owner: Any, key: str, name: str, reply: Reply | None) -> None:
    if reply is None:
        return
    if name == "help":
        return await reply(Notice(chat.HELP))
    if name == "status":
        try:
            session = await database_sync_to_async(chat.find_chat)(owner, key)
        except chat.ChatError as exc:
            return await reply(Error(str(exc)))
        return await reply(Notice(await database_sync_to_async(chat.status_text)(session)))
    if not await database_sync_to_async(is_running)(owner, key):
        return await reply(Notice(NOTHING_RUNNING))
    await stop(owner.pk, key)


async def stop(owner_id: int, key: str) -> None:
    """Stop the chat's running input, in whichever process runs it."""
    try:
        await get_channel_layer().group_send(control_group(owner_id, key), {"type": "chat.stop"})
    except (RedisError, OSError) as exc:
        log.warning("/stop was not sent: the channel layer is unreachable (%s)", exc)


def is_running(owner: Any, key: str) -> bool:
    return (
        ChatClaim.objects.filter(owner=owner, key=key, lease_until__gt=timezone.now())
        .exclude(token="")
        .exists()
    )


def background(coroutine: Awaitable[None]) -> None:
    task = asyncio.ensure_future(coroutine)
    BACKGROUND.add(task)
    task.add_done_callback(BACKGROUND.discard)


async def start(owner: Any, key: str, item: ChatInput, holder: Holder | None) -> None:
    if holder is not None:
        return await holder.drain()
    await announce(owner, key, item)
    await watch(owner, key, item.pk)


async def announce(owner: Any, key: str, item: ChatInput) -> None:
    shown = item.text if item.kind == ChatInput.Kind.MESSAGE else f"/{item.command} {item.text}"
    await broadcast(owner.pk, key, Queued(item.pk, shown.strip()))


async def watch(owner: Any, key: str, input_id: int) -> None:
    """Until input `input_id` has started: take over the chat if its holder died."""
    while await database_sync_to_async(is_queued)(input_id):
        await asyncio.sleep(WATCH_SECONDS)
        holder = await Holder.take(owner, key)
        if holder is not None:
            return await holder.drain()


def is_queued(input_id: int) -> bool:
    return ChatInput.objects.filter(pk=input_id, status=ChatInput.Status.QUEUED).exists()


async def outcome_of(owner: Any, key: str, input_id: int) -> Outcome:
    """The outcome of an awaited input, once it has run here or elsewhere."""
    waited = 0.0
    while True:
        item = await database_sync_to_async(ChatInput.objects.filter(pk=input_id).first)()
        if item is None:  # the chat was deleted meanwhile
            return Outcome(session_id="", status="error", error="The chat was deleted.")
        if item.status == ChatInput.Status.DONE:
            await database_sync_to_async(item.delete)()
            return Outcome.from_json(item.outcome)
        await asyncio.sleep(POLL_SECONDS)
        waited += POLL_SECONDS
        if item.status == ChatInput.Status.QUEUED and waited >= WATCH_SECONDS:
            waited = 0.0
            holder = await Holder.take(owner, key)
            if holder is not None:
                await holder.drain()


async def resume(owner: Any, key: str) -> None:
    """Run what waits in the chat, if nobody is running it (a page opened)."""
    if await database_sync_to_async(has_queued)(owner, key):
        holder = await Holder.take(owner, key)
        if holder is not None:
            await holder.drain()


def has_queued(owner: Any, key: str) -> bool:
    return ChatInput.objects.filter(owner=owner, key=key, status=ChatInput.Status.QUEUED).exists()


class Holder:
    """This process's hold on a chat's claim, while it runs the chat's queue."""

    def __init__(self, owner: Any, key: str, token: str, dead: ChatClaim | None) -> None:
        self.owner, self.key, self.token = owner, key, token
        self.dead = dead  # the claim as a crashed holder left it
        self.session_id = ""
        self.partial = ""
        self.current: asyncio.Task | None = None

    @classmethod
    async def take(cls, owner: Any, key: str) -> Holder | None:
        token = secrets.token_hex(16)
        won, dead = await database_sync_to_async(take_claim)(owner, key, token)
        return cls(owner, key, token, dead) if won else None

    async def drain(self) -> None:
        """Run the queue until it is empty, then let go; and again if an input
        arrived while letting go."""
        holder: Holder | None = self
        while holder is not None:
            if not await holder.run_queue():
                return
            holder = await Holder.take(self.owner, self.key)

    async def run_queue(self) -> bool:
        """Run queued inputs until none is left; let go. True if one arrived
        while letting go (another claim is needed for it)."""
        renewing = asyncio.create_task(self.renew())
        listening = asyncio.create_task(self.listen())
        held = True
        try:
            if self.dead is not None:
                await self.bury()
            while found := await database_sync_to_async(next_input)(self.owner, self.key):
                item, session = found
                # Its own task, so that /stop cancels the run and not this loop.
                self.current = asyncio.create_task(self.run(item, session))
                outcome, done = await self.current
                outcome.take(done)
                # Finished and, if nothing waits, let go before `done` goes out: a
                # client that sends its next message on `done` then finds the chat
                # free, and a /stop after `done` finds nothing running.
                after = await database_sync_to_async(end_input)(item, outcome, self.token)
                held = after == NEXT
                await broadcast(self.owner.pk, self.key, done)
                if not held:
                    return after == AGAIN
            return False
        finally:
            self.current = None
            renewing.cancel()
            listening.cancel()
            if held:
                await database_sync_to_async(release_claim)(self.owner, self.key, self.token)

    async def emit(self, outcome: Outcome, frame: Frame) -> None:
        outcome.take(frame)
        if isinstance(frame, Delta):
            self.partial += frame.text
        elif isinstance(frame, EventFrame) and frame.event["event_type"] in ANSWERS:
            self.partial = ""
        elif isinstance(frame, SessionChanged):
            self.session_id = frame.session_id
        await broadcast(self.owner.pk, self.key, frame)

    async def run(self, item: ChatInput, session: Any) -> tuple[Outcome, Done]:
        """One input in the chat's `session` (a ChatError if the chat is gone),
        to the frame that ends it; never raises."""
        outcome = Outcome(session_id="")

        async def emit(frame: Frame) -> None:
            await self.emit(outcome, frame)

        await emit(Started(item.pk))
        try:
            if isinstance(session, chat.ChatError):
                raise session
            self.session_id = outcome.session_id = str(session.pk)
            if item.kind == ChatInput.Kind.COMPACT:
                await run_compaction(session, emit)
            elif item.kind == ChatInput.Kind.RESET:
                reason = f"/{item.command}"
                session = await database_sync_to_async(rollover)(session, reason)
                await emit(SessionChanged(str(session.pk), reason))
            if item.text and item.kind != ChatInput.Kind.COMPACT:
                result = await chat.run_chat_turn(
                    session,
                    item.text,
                    emit,
                    trusted=item.trusted,
                    approval_timeout=item.approval_timeout,
                )
                outcome.answer, outcome.error = result.answer, result.error or None
                return outcome, result.done()
            return outcome, Done(Usage().as_dict(), "completed")
        except chat.ChatError as exc:  # the chat was deleted while the input waited
            outcome.error = str(exc)
            await emit(Error(str(exc)))
        except asyncio.CancelledError:  # /stop outside the agent's turn (which handles its own)
            return outcome, Done(Usage().as_dict(), "stopped")
        except Exception:
            log.exception("chat input %s failed", item.pk)
            outcome.error = FAILED
            await emit(Error(FAILED))
        return outcome, Done(Usage().as_dict(), "error")

    async def renew(self) -> None:
        while True:
            await asyncio.sleep(RENEW_SECONDS)
            held = await database_sync_to_async(renew_claim)(
                self.owner, self.key, self.token, self.session_id, self.partial
            )
            if not held:  # this process stalled past its lease and another took over
                log.warning("lost the claim on chat %s; its input is stopped", self.key)
                if self.current is not None:
                    self.current.cancel()
                return

    async def listen(self) -> None:
        layer = get_channel_layer()
        group = control_group(self.owner.pk, self.key)
        try:
            channel = await layer.new_channel()
            await layer.group_add(group, channel)
            try:
                while True:
                    message = await layer.receive(channel)
                    if message.get("type") != "chat.stop":
                        continue
                    if self.current is not None and not self.current.done():
                        self.current.cancel()
                    else:  # between two inputs, or just after one ended
                        await broadcast(self.owner.pk, self.key, Notice(NOTHING_RUNNING))
            finally:
                await asyncio.shield(layer.group_discard(group, channel))
        except (RedisError, OSError) as exc:
            log.warning("/stop cannot reach chat %s: the channel layer is down (%s)", self.key, exc)

    async def bury(self) -> None:
        """End what a crashed holder left running: keep its streamed text."""
        dead, self.dead = self.dead, None
        assert dead is not None
        running = await database_sync_to_async(bury_turn)(self.owner, self.key, dead)
        for item in running:
            outcome = Outcome(session_id=dead.session_id, status="error", error=LOST)
            await broadcast(self.owner.pk, self.key, Error(LOST))
            await broadcast(self.owner.pk, self.key, Done(Usage().as_dict(), "error"))
            await database_sync_to_async(finish_input)(item, outcome)


ANSWERS = (EventType.ASSISTANT_RESPONSE,)


async def run_compaction(session: Any, emit: Reply) -> None:
    await emit(Notice("Compacting: saving facts, then summarising older messages…"))
    try:
        done = await compact(session, "/compact")
    except CompactionError as exc:
        await emit(Error(f"Compaction failed: {exc}. Nothing was changed."))
        return
    await emit(SessionChanged(str(done.session.pk), "compacted"))
    await emit(Meter(await database_sync_to_async(chat.meter)(done.session)))
    await emit(
        Notice(
            f"Compacted: {done.summarised} messages summarised, {done.carried_over} kept. "
            "The full transcript stays readable under Sessions."
        )
    )


def take_claim(owner: Any, key: str, token: str) -> tuple[bool, ChatClaim | None]:
    """(won, the claim as a dead holder left it) — a conditional UPDATE, so of
    two processes that read the same free or expired claim only one wins."""
    now = timezone.now()
    claim, _ = ChatClaim.objects.get_or_create(owner=owner, key=key)
    if claim.token and claim.lease_until is not None and claim.lease_until > now:
        return False, None
    won = (
        ChatClaim.objects.filter(pk=claim.pk, token=claim.token)
        .filter(Q(token="") | Q(lease_until__lt=now))
        .update(token=token, lease_until=now + LEASE, session_id="", partial="")
    )
    return bool(won), (claim if won and claim.token else None)


def renew_claim(owner: Any, key: str, token: str, session_id: str, partial: str) -> bool:
    return bool(
        ChatClaim.objects.filter(owner=owner, key=key, token=token).update(
            lease_until=timezone.now() + LEASE, session_id=session_id, partial=partial
        )
    )


def release_claim(owner: Any, key: str, token: str) -> None:
    ChatClaim.objects.filter(owner=owner, key=key, token=token).update(
        token="", lease_until=None, session_id="", partial=""
    )


def enqueue(
    owner: Any, key: str, fields: dict[str, Any], token: str
) -> tuple[ChatInput, bool, ChatClaim | None]:
    """The input stored, and the chat's claim tried: (input, won, dead claim)."""
    item = ChatInput.objects.create(owner=owner, key=key, **fields)
    return (item, *take_claim(owner, key, token))


def next_input(owner: Any, key: str) -> tuple[ChatInput, Session | chat.ChatError] | None:
    """The oldest queued input, marked running (only the claim's holder calls
    this), and the session it runs in (or why there is none)."""
    queued = ChatInput.objects.filter(owner=owner, key=key, status=ChatInput.Status.QUEUED)
    item = queued.order_by("id").first()
    if item is None:
        return None
    ChatInput.objects.filter(pk=item.pk).update(status=ChatInput.Status.RUNNING)
    try:
        return item, chat.find_chat(owner, key)
    except chat.ChatError as exc:
        return item, exc


NEXT, FREE, AGAIN = "next", "free", "again"


def end_input(item: ChatInput, outcome: Outcome, token: str) -> str:
    """After an input ran: NEXT if another waits (the claim is kept), else the
    claim let go, and AGAIN if an input arrived meanwhile, FREE if not."""
    finish_input(item, outcome)
    if has_queued(item.owner_id, item.key):
        return NEXT
    release_claim(item.owner_id, item.key, token)
    return AGAIN if has_queued(item.owner_id, item.key) else FREE


def finish_input(item: ChatInput, outcome: Outcome) -> None:
    """Keep the outcome for whoever waits for it; forget the input otherwise."""
    if item.awaited:
        ChatInput.objects.filter(pk=item.pk).update(
            status=ChatInput.Status.DONE, outcome=outcome.as_json()
        )
    else:
        ChatInput.objects.filter(pk=item.pk).delete()


def bury_turn(owner: Any, key: str, dead: ChatClaim) -> list[ChatInput]:
    """The inputs a crashed holder left running (`dead` is its claim as it
    left it); its streamed text stored as an interrupted answer and the cause
    as an error, in the session it wrote to."""
    running = list(ChatInput.objects.filter(owner=owner, key=key, status=ChatInput.Status.RUNNING))
    if dead.session_id:
        if dead.partial:
            recording.record(
                owner,
                dead.session_id,
                EventType.ASSISTANT_RESPONSE,
                {"content": dead.partial, "interrupted": True, "reason": "server_stopped"},
            )
        if running:
            recording.record(
                owner, dead.session_id, EventType.ERROR, {"content": LOST, "kind": "server_stopped"}
            )
    return running
