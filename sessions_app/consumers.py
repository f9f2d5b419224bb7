"""The chat websocket, `/ws/chat/<session_key>/` (protocol: docs/api.md, "The websocket protocol").

Thin: it checks frames and ownership and hands every input to
sessions_app.runner, which runs it wherever the chat's claim is held. The
socket joins its chat's channel-layer group, so all tabs of the user see the
same stream, whichever process runs the turn.
A message's whole path, end to end: docs/chat-runtime.md#the-frame-arrives.
"""

from __future__ import annotations

import asyncio
import json
import logging
import reprlib
import time
from typing import Any, cast

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from redis.exceptions import RedisError

from agent.approvals import ApprovalError
from agent.frames import Error, Frame
from core.ownership import Owner
from sessions_app import broadcast, chat, deactivation, quotas, runner
from sessions_app.turns import RetryError, check_retry

log = logging.getLogger(__name__)

MAX_FRAME_BYTES = chat.MAX_MESSAGE_BYTES + 1024  # the message plus its JSON envelope
# Like HTTP 503 (daphne allows only 1000 and 3000-4999 from an application): the
# page reconnects, and catches up, once the layer is back.
LAYER_DOWN = 4503
# Frames a socket may send: a burst of FRAME_BURST, then FRAMES_PER_SECOND (a
# person sends a few a minute; the page, one per click). Past that the socket is
# closed with TOO_FAST (like HTTP 429), before any frame costs a database query:
# 20,000 junk frames from one socket had slowed another user's turn 60 → 424 ms.
FRAMES_PER_SECOND = 10.0
FRAME_BURST = 30
TOO_FAST = 4429


class FrameBucket:
    """A token bucket: `burst` frames at once, refilled at `rate` a second."""

    def __init__(self, rate: float = FRAMES_PER_SECOND, burst: int = FRAME_BURST) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.at = float(burst), time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class ChatConsumer(AsyncWebsocketConsumer):
    group = ""
    user_id = 0  # of a socket that joined its chat
    resuming: asyncio.Task | None = None  # runner.resume, while the socket is open
    too_fast = False  # closed for sending too many frames

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # Without its channel layer (Redis down) a socket can neither join its chat
        # nor hear it: close it so that the page reconnects, with one log line
        # instead of a traceback per attempt.
        try:
            await super().__call__(scope, receive, send)
        except (RedisError, OSError) as exc:
            log.warning("chat socket closed: the channel layer is unreachable (%s)", exc)
            await send({"type": "websocket.close", "code": LAYER_DOWN})

    async def connect(self) -> None:
        self.frames = FrameBucket()
        self.user = self.scope["user"]
        self.key = self.scope["url_route"]["kwargs"]["session_key"]
        await self.accept()
        if self.user is None or not self.user.is_authenticated or not self.user.is_active:
            await self.close(code=deactivation.NOT_ALLOWED)
            return
        # Authenticated: channels' lazy user stands for the account itself.
        self.owner = cast(Owner, self.user)
        try:
            await database_sync_to_async(chat.find_chat)(self.owner, self.key)
        except chat.ChatError as exc:
            await self.close(code=exc.code)
            return
        self.user_id = self.user.pk
        self.group = broadcast.group_name(self.user_id, self.key)
        await self.channel_layer.group_add(self.group, self.channel_name)
        # Deactivating the account closes this socket (sessions_app.deactivation).
        await self.channel_layer.group_add(deactivation.user_group(self.user_id), self.channel_name)
        # Inputs left queued or running by a process that went away run, or end, now.
        self.resuming = asyncio.ensure_future(runner.resume(self.owner, self.key))

    async def disconnect(self, code: int) -> None:
        if self.resuming is not None:
            self.resuming.cancel()
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            await self.channel_layer.group_discard(
                deactivation.user_group(self.user_id), self.channel_name
            )

    async def user_deactivated(self, message: dict[str, Any]) -> None:
        await self.close(code=deactivation.NOT_ALLOWED)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not self.group or self.too_fast:  # (what it sends until it notices is ignored)
            return
        if not self.frames.take():
            self.too_fast = True
            log.warning("chat socket of user %s closed: too many frames", self.user_id)
            return await self.close(code=TOO_FAST, reason="Too many frames: slow down.")
        # The account may have been deactivated since the socket connected (and
        # the group's close lost, with the channel layer down).
        if not await database_sync_to_async(deactivation.is_active)(self.user_id):
            return await self.close(code=deactivation.NOT_ALLOWED)
        if text_data is None:
            return await self.error("Send JSON text frames, not binary ones.")
        if len(text_data.encode()) > MAX_FRAME_BYTES:
            return await self.error(f"The frame is larger than {MAX_FRAME_BYTES // 1024} KB.")
        try:
            frame = json.loads(text_data)
        except ValueError:
            return await self.error("The frame is not valid JSON.")
        except RecursionError:  # e.g. "[[[[…": not a ValueError, and it killed the consumer
            return await self.error("The frame's JSON is nested too deeply.")
        if not isinstance(frame, dict):
            return await self.error("The frame must be a JSON object with a 'type'.")
        handlers = {
            "message": self.on_message,
            "approval": self.on_approval,
            "retry": self.on_retry,
            "stop": self.on_stop,
        }
        kind = frame.get("type")
        # A list or object as "type" is unhashable: looking it up would kill the consumer.
        handler = handlers.get(kind) if isinstance(kind, str) else None
        if handler is None:
            return await self.error(  # reprlib: a short echo, however big or deep the value
                f"Unknown frame type {reprlib.repr(kind)}: use message, approval, retry or stop."
            )
        await handler(frame)

    async def on_message(self, frame: dict[str, Any]) -> None:
        try:
            text = chat.check_message(frame.get("text"))
        except ValueError as exc:
            return await self.reply(Error(str(exc)))
        try:
            await runner.submit(self.owner, self.key, text, self.reply)
        except quotas.QuotaExceeded as exc:  # not stored: the page puts the text back
            await self.reply(exc.frame(text))

    async def on_approval(self, frame: dict[str, Any]) -> None:
        request_id, decision = frame.get("request_id"), frame.get("decision")
        if not isinstance(request_id, str) or decision not in ("once", "always", "deny"):
            return await self.error(
                "An approval needs a request_id and a decision of once, always or deny."
            )
        try:
            await database_sync_to_async(runner.answer_approval)(
                self.owner, self.key, request_id, decision
            )
        except ApprovalError as exc:
            return await self.error(str(exc))

    async def on_retry(self, frame: dict[str, Any]) -> None:
        """Retry, Regenerate and Edit: the turn of `event_id` runs again, queued like
        a message — with `text`, the user message `event_id` edited (a new branch)."""
        event_id, edit = frame.get("event_id"), frame.get("text") is not None
        text = ""
        if edit:
            try:
                text = chat.check_message(frame["text"])
            except ValueError as exc:
                return await self.error(str(exc))
        try:
            message = await database_sync_to_async(check_retry)(
                self.owner, self.key, event_id, edit=edit
            )
        except RetryError as exc:
            return await self.error(str(exc))
        assert isinstance(event_id, int)  # find_retry found it
        try:
            await runner.retry(self.owner, self.key, event_id, text if edit else message.text)
        except quotas.QuotaExceeded as exc:
            await self.reply(exc.frame(text))

    async def on_stop(self, frame: dict[str, Any]) -> None:
        await runner.submit(self.owner, self.key, "/stop", self.reply)

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels closes stale database connections before every handler: a
        # thread hop per message. Streamed frames touch no database, so they
        # skip it; at 50 chats that hop was most of the added latency.
        if message["type"] == "chat.frame":
            return await self.chat_frame(message)
        return await super().dispatch(message)

    async def chat_frame(self, message: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(message["frame"]))

    async def reply(self, frame: Frame) -> None:
        """To this socket only."""
        await self.send(text_data=json.dumps(frame.as_json()))

    async def error(self, message: str) -> None:
        await self.reply(Error(message))
