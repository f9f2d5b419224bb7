"""A chat on the channel layer: the group of its tabs, which every frame of a run
reaches, and the control group through which /stop reaches the process that runs
the chat's inputs, whichever it is."""

from __future__ import annotations

import hashlib
import logging

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
    """Where /stop goes: only the holder listens, so frames never reach it twice."""
    return f"{group_name(owner_id, key)}.control"


def render_event(event: Event) -> str:
    """An event as the chat page shows it (no database access)."""
    return render_to_string("sessions_app/_event.html", {"event": event})


async def broadcast(owner_id: int, key: str, frame: Frame) -> None:
    """`frame` to every tab of the chat; an event with its HTML, rendered once here,
    in a worker thread: a long answer's Markdown takes up to ~0.4 s (in a process
    of its own, neotask_site/markdown.py), which the event loop's other sockets and
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


async def stop(owner_id: int, key: str) -> None:
    """Stop the chat's running input, in whichever process runs it."""
    try:
        await channel_layer().group_send(control_group(owner_id, key), {"type": "chat.stop"})
    except (RedisError, OSError) as exc:
        log.warning("/stop was not sent: the channel layer is unreachable (%s)", exc)
