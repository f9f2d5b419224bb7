"""The load's chats (bench/load_chat.py): websocket clients, each sending its
messages one after another, each after the previous answer's `done`, and checking
every turn's frames: all the scripted deltas, the stored message and answer."""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

STORED_PER_TURN = ("user_message", "assistant_response")
STAMP = re.compile(r"\[\d+@\d+\]")
TURN_TIMEOUT = 120.0  # seconds without a frame before a chat gives up
STALL_SECONDS = 30.0  # seconds without a frame that count as a stall


@dataclass(frozen=True)
class Chat:
    cookie: str
    key: str


@dataclass
class ChatResult:
    sent: list[str] = field(default_factory=list)
    completed: int = 0
    first_delta_ms: list[float] = field(default_factory=list)
    frames_lost: int = 0
    errors: list[str] = field(default_factory=list)
    stalls: list[str] = field(default_factory=list)


# Called at a stall (once per run): dumps the servers' stacks.
on_stall: list[Any] = []


def message_text(chat: int, number: int) -> str:
    # Unique per message, so the database count can tell lost from duplicated.
    return f"Hello from chat {chat}, message {number}."


async def one_chat(url: str, chat: Chat, number: int, messages: int, deltas: int) -> ChatResult:
    import websockets

    result = ChatResult()
    waiting_for = "the connection"
    try:
        async with websockets.connect(
            f"{url}/ws/chat/{chat.key}/",
            additional_headers={"Cookie": chat.cookie, "Origin": "http" + url.removeprefix("ws")},
            max_size=2**20,
            open_timeout=TURN_TIMEOUT,  # a browser waits, too: slow is measured, not an error
        ) as socket:
            for message in range(messages):
                text = message_text(number, message)
                started = time.perf_counter()
                await socket.send(json.dumps({"type": "message", "text": text}))
                result.sent.append(text)
                waiting_for = f"the answer to message {message}"
                first_delta: float | None = None
                streamed: set[str] = set()
                stored: set[str] = set()
                while True:
                    frame = json.loads(
                        await receive(socket, result, f"chat {number} {waiting_for}")
                    )
                    if frame["type"] == "delta":
                        if first_delta is None:
                            first_delta = (time.perf_counter() - started) * 1000
                        # "[<number>@<time>]" each, several in a frame when coalesced
                        streamed.update(STAMP.findall(frame["text"]))
                    elif frame["type"] == "event":
                        stored.add(frame["event"]["event_type"])
                    elif frame["type"] == "error":
                        result.errors.append(f"error frame: {frame['message']}")
                    elif frame["type"] == "done":
                        break
                # The scripted LLM streams exactly --deltas deltas; every turn
                # must show its message and its answer as stored events.
                missing = deltas - len(streamed) + len(set(STORED_PER_TURN) - stored)
                result.frames_lost += max(0, missing)
                if frame.get("status") != "completed":
                    result.errors.append(f"turn ended {frame.get('status')!r}")
                    continue
                result.completed += 1
                if first_delta is not None:
                    result.first_delta_ms.append(first_delta)
    except (OSError, TimeoutError, websockets.WebSocketException) as exc:
        result.errors.append(f"disconnected waiting for {waiting_for}: {exc!r}")
    return result


async def receive(socket: Any, result: ChatResult, what: str) -> str:
    """The next frame; a wait past STALL_SECONDS is noted as a stall, and one past
    TURN_TIMEOUT gives up (TimeoutError)."""
    waited = 0.0
    while True:
        try:
            return await asyncio.wait_for(socket.recv(), STALL_SECONDS)
        except TimeoutError:
            waited += STALL_SECONDS
            if waited == STALL_SECONDS:
                result.stalls.append(what)
                while on_stall:  # in a thread: the other chats go on meanwhile
                    asyncio.get_running_loop().run_in_executor(None, on_stall.pop())
            if waited >= TURN_TIMEOUT:
                raise


async def run_chats(
    urls: list[str], chats: list[Chat], messages: int, deltas: int
) -> list[ChatResult]:
    return await asyncio.gather(
        *(
            one_chat(urls[number % len(urls)], chat, number, messages, deltas)
            for number, chat in enumerate(chats)
        )
    )
