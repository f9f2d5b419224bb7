"""An input arrives in a chat: the one entry point for the websocket, the API and the scheduler.

/help, /status, /stop and the commands that run a memory or schedule tool
(sessions_app.commands) answer at once. Everything else that changes the
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

The queue and the claim in the database are in `claims.py`, the holder that runs
the queue in `holder.py`, the chat's groups on the channel layer in `broadcast.py`.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from agent.frames import Error, Notice, Outcome, Queued
from sessions_app import chat
from sessions_app.broadcast import broadcast, stop
from sessions_app.claims import enqueue, has_queued, is_queued, is_running
from sessions_app.commands import HELP, Command, parse_command, run_tool
from sessions_app.holder import NOTHING_RUNNING, Holder, Reply
from sessions_app.models import ChatInput

WATCH_SECONDS = 5.0  # a queued input's process checks on the holder this often
POLL_SECONDS = 0.25  # a waiter whose input runs in another process reads its outcome

# Runs started in the background, kept from the garbage collector until they end.
BACKGROUND: set[asyncio.Task] = set()


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

    `reply` answers the sender alone (the commands that answer at once). With `wait`, the
    input's `Outcome` once it has run (the API and the scheduler); else the
    run goes on in the background and its frames reach the chat's tabs."""
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
    return await queue(owner, key, fields, wait=wait)


async def retry(owner: Any, key: str, event_id: int, text: str) -> None:
    """The turn that ended with event `event_id` runs again from its message
    `text` (sessions_app.retries checked it), in its turn like any input."""
    fields = {"kind": ChatInput.Kind.RETRY, "text": text, "retry_of": event_id}
    await queue(owner, key, fields)


async def queue(
    owner: Any, key: str, fields: dict[str, Any], *, wait: bool = False
) -> Outcome | None:
    """The input stored; run here if the chat's claim is free, else announced
    and left to its holder. With `wait`, its `Outcome` once it has run."""
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


async def answer_now(owner: Any, key: str, command: Command, reply: Reply | None) -> None:
    if reply is None:
        return
    if command.slash.tool:
        # Off the shared database thread, as the agent runs them: a search may embed.
        answer = await sync_to_async(run_tool, thread_sensitive=False)(owner, key, command)
        return await reply(answer)
    if command.name == "help":
        return await reply(Notice(HELP))
    if command.name == "status":
        try:
            session = await database_sync_to_async(chat.find_chat)(owner, key)
        except chat.ChatError as exc:
            return await reply(Error(str(exc)))
        return await reply(Notice(await chat.status(session)))
    if not await database_sync_to_async(is_running)(owner, key):
        return await reply(Notice(NOTHING_RUNNING))
    await stop(owner.pk, key)


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
    await broadcast(owner.pk, key, Queued(item.pk, item.shown))


async def watch(owner: Any, key: str, input_id: int) -> None:
    """Until input `input_id` has started: take over the chat if its holder died."""
    while await database_sync_to_async(is_queued)(input_id):
        await asyncio.sleep(WATCH_SECONDS)
        holder = await Holder.take(owner, key)
        if holder is not None:
            return await holder.drain()


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
