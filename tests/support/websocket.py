"""The chat websocket in process: channels' communicator on the chat routes, its
user set as AuthMiddleware sets it; sending frames and reading a turn's."""

from __future__ import annotations

import json
from typing import Any

from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User

from sessions_app.routing import websocket_urlpatterns

router = URLRouter(websocket_urlpatterns)


def communicator(user: User, key: str) -> WebsocketCommunicator:
    """A socket to the chat `key` as `user`, not connected yet."""
    socket = WebsocketCommunicator(router, f"/ws/chat/{key}/")
    # AuthMiddleware's key, which the stubs' test scope leaves out.
    socket.scope["user"] = user  # type: ignore[typeddict-unknown-key]
    return socket


async def connect(user: User, key: str) -> WebsocketCommunicator:
    socket = communicator(user, key)
    connected, _ = await socket.connect()
    assert connected
    return socket


async def receive(socket: WebsocketCommunicator, timeout: float = 10) -> dict[str, Any]:
    return json.loads(await socket.receive_from(timeout=timeout))


async def until(
    socket: WebsocketCommunicator, kind: str = "done", timeout: float = 10
) -> list[dict]:
    """The frames up to and including the next of type `kind`."""
    frames = []
    while True:
        frame = await receive(socket, timeout)
        frames.append(frame)
        if frame["type"] == kind:
            return frames


async def send(socket: WebsocketCommunicator, **frame: Any) -> None:
    await socket.send_to(text_data=json.dumps(frame))


def kinds(frames: list[dict]) -> list[str]:
    """Frame types, events by their type; a run of deltas counts once, since
    deltas that arrive together may be sent as one."""
    names: list[str] = []
    for frame in frames:
        name = frame["event"]["event_type"] if frame["type"] == "event" else frame["type"]
        if not (name == "delta" and names and names[-1] == "delta"):
            names.append(name)
    return names


def streamed(frames: list[dict]) -> str:
    return "".join(f["text"] for f in frames if f["type"] == "delta")


def stored(frames: list[dict], event_type: str) -> dict:
    events = [f["event"] for f in frames if f["type"] == "event"]
    return next(event for event in events if event["event_type"] == event_type)


async def ignore(frame: Any) -> None:
    """Where a turn run without a socket sends its frames."""
