"""A chat on the channel layer: the group of its tabs, which every frame of a run
reaches, and its control group, the one way processes signal each other about
the chat: /stop and a person's approval reach the process that runs the chat's
inputs, whichever it is; the end of an input, or a claim let go, reaches the
processes waiting for the chat (sessions_app.runner).

A signal says only "look again": the database stays the truth, and whoever
waits re-reads it every little while, since the channel layer may lose one
(Redis restarting).
A message's whole path, end to end: docs/chat-runtime.md#the-holder-runs-the-queue."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import BaseChannelLayer, get_channel_layer
from django.core.exceptions import ImproperlyConfigured
from django.template.loader import render_to_string
from redis.exceptions import RedisError

from agent.frames import EventFrame, Frame
from memory.models import Event

log = logging.getLogger(__name__)


def channel_layer() -> BaseChannelLayer:
    """The project's channel layer (the settings always name one)."""
    layer = get_channel_layer()
    if layer is None:
        raise ImproperlyConfigured("CHANNEL_LAYERS names no default layer")
    return layer


def group_name(owner_id: int, key: str) -> str:
    """The channel-layer group of a chat's tabs."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return f"chat.{owner_id}.{digest}"


def control_group(owner_id: int, key: str) -> str:
    """Where the chat's signals go: apart from its tabs, so frames never reach a
    listener twice nor a signal a tab."""
    return f"{group_name(owner_id, key)}.control"


# The signals, by their type on the channel layer.
STOP = "chat.stop"  # stop the running input
APPROVAL = "chat.approval"  # a decision on `request_id` was stored
INPUT = "chat.input"  # an input ended, or the claim was let go: waiters look again


def render_event(event: Event) -> str:
    """An event as the chat page shows it (no database access)."""
    return render_to_string("sessions_app/_event.html", {"event": event})


async def broadcast(owner_id: int, key: str, frame: Frame) -> None:
    """`frame` to every tab of the chat; an event with its HTML, rendered once here,
    in a worker thread: a long answer's Markdown takes up to ~0.4 s (in a process
    of its own, core/markdown.py), which the event loop's other sockets and
    requests must not wait for.

    Without the channel layer (Redis restarting) the frame is dropped and the
    run goes on: its events are stored, and pages catch up when they reconnect."""
    data = frame.as_json()
    if isinstance(frame, EventFrame) and frame.stored is not None:
        html = await sync_to_async(render_event, thread_sensitive=False)(frame.stored)
        data["event"] = {**frame.event, "html": html}
    try:
        await channel_layer().group_send(
            group_name(owner_id, key), {"type": "chat.frame", "frame": data}
        )
    except (RedisError, OSError) as exc:
        log.warning("a %s frame was not sent: the channel layer is down (%s)", frame.type, exc)


async def signal(owner_id: int, key: str, kind: str, **fields: str) -> None:
    """`kind` to every process listening on the chat; lost without the channel layer."""
    try:
        await channel_layer().group_send(control_group(owner_id, key), {"type": kind, **fields})
    except (RedisError, OSError) as exc:
        log.warning("a %s signal was not sent: the channel layer is unreachable (%s)", kind, exc)


class Signals:
    """This process listening on a chat's control group, while in its `async with`.

    A receive cancelled by a timeout would leave the channel (channels_redis drops
    a departed channel's messages), so one task receives for the whole block and
    `next` waits on what it received."""

    def __init__(self, owner_id: int, key: str) -> None:
        self.group = self.group_of(owner_id, key)
        self.received: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.channel = ""
        self.receiver: asyncio.Task | None = None

    @staticmethod
    def group_of(owner_id: int, key: str) -> str:
        return control_group(owner_id, key)

    async def __aenter__(self) -> Signals:
        layer = channel_layer()
        try:
            self.channel = await layer.new_channel()
            await layer.group_add(self.group, self.channel)
        except (RedisError, OSError) as exc:
            log.warning("not listening on %s: the channel layer is down (%s)", self.group, exc)
            self.channel = ""
        else:
            self.receiver = asyncio.create_task(self.receive())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self.receiver is not None:
            self.receiver.cancel()
        if self.channel:
            with contextlib.suppress(RedisError, OSError):
                await asyncio.shield(channel_layer().group_discard(self.group, self.channel))

    async def receive(self) -> None:
        layer = channel_layer()
        try:
            while True:
                self.received.put_nowait(await layer.receive(self.channel))
        except (RedisError, OSError) as exc:
            log.warning("stopped listening on %s: the channel layer is down (%s)", self.group, exc)

    async def next(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next signal; None if none came within `timeout` seconds."""
        try:
            return await asyncio.wait_for(self.received.get(), timeout)
        except TimeoutError:
            return None


class ChatFrames(Signals):
    """This process receiving the frames a chat's tabs get, as a tab would, while
    in its `async with` (an OpenAI-compatible client's stream): `next` returns
    `{"type": "chat.frame", "frame": {...}}`."""

    @staticmethod
    def group_of(owner_id: int, key: str) -> str:
        return group_name(owner_id, key)
