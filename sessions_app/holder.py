"""The process that holds a chat's claim runs its queued inputs, one at a time.

While it runs them it renews its lease (saving the text streamed so far, which
a successor keeps if this process dies), listens for /stop on the chat's control
group, and sends each input's frames to the chat's tabs; it lets go of the claim
when the queue is empty.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from channels.db import database_sync_to_async
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
    SessionChanged,
    Started,
)
from agent.llm import Usage
from memory.models import EventType
from sessions_app import chat
from sessions_app.broadcast import broadcast, channel_layer, control_group
from sessions_app.claims import (
    AGAIN,
    LOST,
    NEXT,
    bury_turn,
    end_input,
    finish_input,
    next_input,
    release_claim,
    renew_claim,
    take_claim,
)
from sessions_app.compaction import CompactionError, compact
from sessions_app.lifecycle import rollover
from sessions_app.models import ChatClaim, ChatInput
from sessions_app.retries import RetryError, find_retry

log = logging.getLogger(__name__)

Reply = Callable[[Frame], Awaitable[None]]

RENEW_SECONDS = 5.0  # the holder renews its lease (and saves the streamed text) this often
FAILED = "The server failed while answering; it was logged."
NOTHING_RUNNING = "Nothing is running."
ANSWERS = (EventType.ASSISTANT_RESPONSE,)


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
            retry_of = None
            if item.kind == ChatInput.Kind.RETRY:  # checked again: has the chat moved on?
                check = database_sync_to_async(find_retry)
                retry_of = (await check(self.owner, self.key, item.retry_of)).pk
            if item.text and item.kind != ChatInput.Kind.COMPACT:
                result = await chat.run_chat_turn(
                    session,
                    item.text,
                    emit,
                    trusted=item.trusted,
                    approval_timeout=item.approval_timeout,
                    retry_of=retry_of,
                )
                outcome.answer, outcome.error = result.answer, result.error or None
                return outcome, result.done()
            return outcome, Done(Usage().as_dict(), "completed")
        except (chat.ChatError, RetryError) as exc:  # the chat was deleted or moved on meanwhile
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
        layer = channel_layer()
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
