"""The chat websocket, `/ws/chat/<session_key>/` (protocol: DESIGN.md §6).

Thin: it checks frames and ownership and hands the work to sessions_app.chat.
Every frame of a turn goes to a channel-layer group per chat, so all tabs of
the user see the same stream; the turn runs as its own task and finishes (its
events stored) even if the socket that started it goes away.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import reprlib
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.template.loader import render_to_string
from redis.exceptions import RedisError

from agent.approvals import ApprovalError, decide
from agent.llm import Usage
from memory.models import Event
from sessions_app import chat
from sessions_app.compaction import CompactionError, compact
from sessions_app.lifecycle import rollover

log = logging.getLogger(__name__)

MAX_FRAME_BYTES = chat.MAX_MESSAGE_BYTES + 1024  # the message plus its JSON envelope
# Turns running in this process, by chat group: one at a time per chat.
RUNNING: dict[str, asyncio.Task] = {}
# Like HTTP 503 (daphne allows only 1000 and 3000-4999 from an application): the
# page reconnects, and catches up, once the layer is back.
LAYER_DOWN = 4503


def group_name(owner_id: int, key: str) -> str:
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return f"chat.{owner_id}.{digest}"


def render_event(owner: Any, event_id: int) -> str:
    event = Event.objects.owned_by(owner).get(pk=event_id)
    return render_to_string("sessions_app/_event.html", {"event": event})


class ChatConsumer(AsyncWebsocketConsumer):
    group = ""

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
        self.user = self.scope["user"]
        self.key = self.scope["url_route"]["kwargs"]["session_key"]
        await self.accept()
        if not self.user.is_authenticated:
            await self.close(code=4403)
            return
        try:
            await database_sync_to_async(chat.find_chat)(self.user, self.key)
        except chat.ChatError as exc:
            await self.close(code=exc.code)
            return
        self.group = group_name(self.user.pk, self.key)
        await self.channel_layer.group_add(self.group, self.channel_name)

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not self.group:
            return
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
        handlers = {"message": self.on_message, "approval": self.on_approval, "stop": self.on_stop}
        kind = frame.get("type")
        # A list or object as "type" is unhashable: looking it up would kill the consumer.
        handler = handlers.get(kind) if isinstance(kind, str) else None
        if handler is None:
            return await self.error(  # reprlib: a short echo, however big or deep the value
                f"Unknown frame type {reprlib.repr(kind)}: use message, approval or stop."
            )
        await handler(frame)

    async def on_message(self, frame: dict[str, Any]) -> None:
        try:
            text = chat.check_message(frame.get("text"))
        except ValueError as exc:
            return await self.error(str(exc))
        try:
            session = await database_sync_to_async(chat.find_chat)(self.user, self.key)
        except chat.ChatError as exc:
            return await self.error(str(exc))
        command = chat.parse_command(text)
        if command is not None:
            if command.name == "stop":
                return await self.on_stop(frame)
            if command.name == "help":
                return await self.notice(chat.HELP)
            if command.name == "status":
                return await self.notice(await database_sync_to_async(chat.status_text)(session))
            if self.group in RUNNING:
                return await self.error("Wait for the answer, or /stop it, before a reset.")
            if command.name == "compact":
                return await self.compact(session)
            session = await database_sync_to_async(rollover)(session, f"/{command.name}")
            await self.broadcast({"type": "session", "session_id": str(session.pk)})
            if not command.argument:
                return
            text = command.argument
        if self.group in RUNNING:
            return await self.error("The agent is still answering: wait, or send /stop.")
        RUNNING[self.group] = asyncio.create_task(self.turn(session, text))

    async def turn(self, session: Any, text: str) -> None:
        try:
            await chat.run_chat_turn(session, text, self.broadcast)
        except Exception:
            log.exception("chat turn failed")
            await self.broadcast(
                {"type": "error", "message": "The server failed while answering; it was logged."}
            )
            # The turn is over: without `done` the page would show it running forever.
            await self.broadcast({"type": "done", "usage": Usage().as_dict(), "status": "error"})
        finally:
            RUNNING.pop(self.group, None)

    async def compact(self, session: Any) -> None:
        await self.notice("Compacting: saving facts, then summarising older messages…")
        try:
            done = await compact(session, "/compact")
        except CompactionError as exc:
            return await self.error(f"Compaction failed: {exc}. Nothing was changed.")
        await self.broadcast(
            {"type": "session", "session_id": str(done.session.pk), "reason": "compacted"}
        )
        meter = await database_sync_to_async(chat.meter)(done.session)
        await self.broadcast({"type": "meter", "meter": meter})
        # Through the group, like the frames before it, so that it arrives after them.
        await self.broadcast(
            {
                "type": "notice",
                "text": f"Compacted: {done.summarised} messages summarised, "
                f"{done.carried_over} kept. The full transcript stays readable under Sessions.",
            }
        )

    async def on_approval(self, frame: dict[str, Any]) -> None:
        request_id, decision = frame.get("request_id"), frame.get("decision")
        if not isinstance(request_id, str) or decision not in ("once", "always", "deny"):
            return await self.error(
                "An approval needs a request_id and a decision of once, always or deny."
            )
        try:
            await database_sync_to_async(decide)(self.user, request_id, decision)
        except ApprovalError as exc:
            return await self.error(str(exc))
        await self.broadcast(
            {"type": "approval_decided", "request_id": request_id, "decision": decision}
        )

    async def on_stop(self, frame: dict[str, Any]) -> None:
        if self.group not in RUNNING:
            await self.notice("Nothing is running.")
        # Sent to the group: the turn may run in another tab's server process.
        await self.channel_layer.group_send(self.group, {"type": "chat.stop"})

    async def broadcast(self, frame: dict[str, Any]) -> None:
        if frame["type"] == "event":
            # Rendered once, here, with the page's own template.
            frame["event"]["html"] = await database_sync_to_async(render_event)(
                self.user, frame["event"]["id"]
            )
        await self.channel_layer.group_send(self.group, {"type": "chat.frame", "frame": frame})

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels closes stale database connections before every handler: a
        # thread hop per message. Streamed frames touch no database, so they
        # skip it; at 50 chats that hop was most of the added latency.
        if message["type"] == "chat.frame":
            return await self.chat_frame(message)
        return await super().dispatch(message)

    async def chat_frame(self, message: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(message["frame"]))

    async def chat_stop(self, message: dict[str, Any]) -> None:
        task = RUNNING.get(self.group)
        if task is not None:
            task.cancel()

    async def error(self, message: str) -> None:
        await self.send(text_data=json.dumps({"type": "error", "message": message}))

    async def notice(self, text: str) -> None:
        await self.send(text_data=json.dumps({"type": "notice", "text": text}))
