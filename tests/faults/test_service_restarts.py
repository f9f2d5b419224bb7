"""PostgreSQL or Redis restarts under a running chat: the chat carries on, and
the database holds every message and answer exactly once.

Each test brings its own server (the machine's shared ones serve other tests),
so both run on either profile; the rest of the app follows the profile."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import websockets

from tests.programs import events
from tests.support.processes import (
    PrivatePostgres,
    PrivateRedis,
    app_env,
    chat_socket,
    free_port,
    logged_in_chat,
    message_frame,
    run_program,
    say,
    start_daphne,
    stop_process,
    until_done,
)
from tests.support.scripted_llm import Reply, ScriptedLLM

pytestmark = pytest.mark.slow


def serve(env: dict[str, str], log_dir: Path) -> tuple[int, subprocess.Popen]:
    port = free_port()
    return port, start_daphne(env, port, open(log_dir / "daphne.log", "w"))


def ada_chatting(
    tmp_path: Path, llm: ScriptedLLM, **services: str
) -> tuple[dict[str, str], str, str, int, subprocess.Popen]:
    """Neotask served on `services` (a private PostgreSQL or Redis), with ada
    logged in to a chat of hers: (env, cookie, chat key, port, server)."""
    env = app_env(
        tmp_path, NEOTASK_LLM_BASE_URL=llm.url, NEOTASK_LLM_API_KEY=llm.api_key, **services
    )
    cookie, key = logged_in_chat(env, "ada", migrate=True)
    return (env, cookie, key, *serve(env, tmp_path))


def stored_events(env: dict[str, str], key: str) -> list[list[str]]:
    """The chat's events in the app's database, oldest first: [event type, text]."""
    return [[kind, text] for kind, text, _ in run_program(env, events.of_chats, [key])[key]]


def health(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def page(port: int, cookie: str, path: str) -> tuple[int, str]:
    """A page as the logged-in browser gets it."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", headers={"Cookie": f"sessionid={cookie}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def completed(frames: list[dict[str, Any]]) -> bool:
    errors = [frame for frame in frames if frame["type"] == "error"]
    return not errors and frames[-1]["status"] == "completed"


def test_it_carries_on_after_postgresql_restarts_mid_chat(
    private_postgres: PrivatePostgres, scripted_llm: ScriptedLLM, tmp_path: Path
) -> None:
    env, cookie, key, port, server = ada_chatting(
        tmp_path, scripted_llm, DATABASE_URL=private_postgres.url
    )
    answer = threading.Event()
    try:
        scripted_llm.script(
            Reply(text="Hello, Ada."),
            Reply(text="Still here.", hold=answer),
            Reply(text="You are Ada."),
        )

        async def conversation() -> list[list[dict[str, Any]]]:
            async with chat_socket(port, cookie, key) as socket:
                await socket.send(message_frame("My name is Ada."))
                first = await until_done(socket)
                # The restart comes in the middle of the next turn: the question
                # is stored and the model is writing the answer.
                await socket.send(message_frame("Are you still there?"))
                await asyncio.wait_for(asked(scripted_llm, 2), 60)
                await asyncio.to_thread(private_postgres.stop)
                outage = await asyncio.to_thread(health, port)
                await asyncio.to_thread(private_postgres.start)
                answer.set()
                second = await until_done(socket)
            # The next message, after a reload (or from a second tab).
            third = await say(port, cookie, key, "What is my name?")
            assert (outage[0], outage[1]["db"]) == (503, "down")
            return [first, second, third]

        turns = asyncio.run(conversation())
        assert health(port)[1]["db"] == "ok"
    finally:
        answer.set()
        stop_process(server)
    assert all(completed(frames) for frames in turns), turns
    assert scripted_llm.requests[-1]["messages"][1:] == [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Hello, Ada."},
        {"role": "user", "content": "Are you still there?"},
        {"role": "assistant", "content": "Still here."},
        {"role": "user", "content": "What is my name?"},
    ]
    events = stored_events(env, key)
    assert events == [
        ["user_message", "My name is Ada."],
        ["assistant_response", "Hello, Ada."],
        ["user_message", "Are you still there?"],
        ["assistant_response", "Still here."],
        ["user_message", "What is my name?"],
        ["assistant_response", "You are Ada."],
    ]


async def reconnect(port: int, cookie: str, key: str, seconds: float = 60) -> Any:
    """A socket that works again, reconnecting with the chat page's backoff (a
    socket that opens during an outage is closed at once by the server)."""
    deadline = asyncio.get_running_loop().time() + seconds
    for retries in itertools.count():
        socket = None
        with contextlib.suppress(websockets.WebSocketException, OSError, TimeoutError):
            socket = await chat_socket(port, cookie, key)
            # Answered only once the consumer joined the chat's group.
            await socket.send(message_frame("/help"))
            if json.loads(await asyncio.wait_for(socket.recv(), 30))["type"] == "notice":
                return socket
        if socket is not None:
            await socket.close()
        assert asyncio.get_running_loop().time() < deadline, "the chat did not come back"
        await asyncio.sleep(min(10.0, 0.3 * 2**retries))


async def asked(llm: ScriptedLLM, count: int) -> None:
    while len(llm.requests) < count:
        await asyncio.sleep(0.05)


def test_it_carries_on_after_redis_restarts_mid_chat(
    private_redis: PrivateRedis, scripted_llm: ScriptedLLM, tmp_path: Path
) -> None:
    env, cookie, key, port, server = ada_chatting(
        tmp_path, scripted_llm, REDIS_URL=private_redis.url
    )
    try:
        scripted_llm.script(Reply(text="Hello, Ada."), Reply(text="You are Ada."))

        async def conversation() -> tuple[list[dict], list[dict], list[str]]:
            seen_in_outage: list[str] = []
            async with chat_socket(port, cookie, key) as socket:
                await socket.send(message_frame("My name is Ada."))
                first = await until_done(socket)
                private_redis.kill()
                # The socket must close: left open, it would miss the chat's frames
                # for good (the restarted Redis knows none of its groups), while a
                # closed one makes the page reconnect and catch up.
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    while True:
                        seen_in_outage.append(await asyncio.wait_for(socket.recv(), 30))
            close_frame = closed.value.rcvd
            assert close_frame is not None and close_frame.code == 4503  # not a crash (1011)
            seen_in_outage.append(str(closed.value))
            # What a reconnecting page meets while Redis is down.
            try:
                async with chat_socket(port, cookie, key) as early:
                    await early.send(message_frame("/help"))
                    seen_in_outage.append(await asyncio.wait_for(early.recv(), 30))
            except (websockets.ConnectionClosed, websockets.InvalidStatus) as refused:
                seen_in_outage.append(str(refused))
            # The page itself needs no Redis: it loads, and says it is reconnecting.
            status, html = await asyncio.to_thread(page, port, cookie, f"/chat/{key}/")
            assert status == 200 and "My name is Ada." in html
            private_redis.start()
            socket = await reconnect(port, cookie, key)
            try:
                await socket.send(message_frame("What is my name?"))
                second = await until_done(socket)
            finally:
                await socket.close()
            return first, second, seen_in_outage

        first, second, seen_in_outage = asyncio.run(conversation())
        # A page that saw the first turn catches up with exactly the events after it.
        seen = [frame["event"]["id"] for frame in first if frame["type"] == "event"]
        status, missed = page(port, cookie, f"/chat/{key}/events/?after={seen[-1]}")
    finally:
        stop_process(server)
    assert completed(first) and completed(second), (first, second)
    for text in seen_in_outage:
        assert "Traceback" not in text and "500" not in text and "Error 111" not in text, text
    log = (tmp_path / "daphne.log").read_text()
    assert "Traceback" not in log and "the channel layer is unreachable" in log
    assert scripted_llm.requests[-1]["messages"][1:] == [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Hello, Ada."},
        {"role": "user", "content": "What is my name?"},
    ]
    assert stored_events(env, key) == [
        ["user_message", "My name is Ada."],
        ["assistant_response", "Hello, Ada."],
        ["user_message", "What is my name?"],
        ["assistant_response", "You are Ada."],
    ]
    caught_up = [int(found) for found in re.findall(r'data-event-id="(\d+)"', missed)]
    assert status == 200
    assert caught_up == [frame["event"]["id"] for frame in second if frame["type"] == "event"]


def test_it_neither_loses_nor_repeats_a_queued_message_when_redis_restarts(
    private_redis: PrivateRedis, scripted_llm: ScriptedLLM, tmp_path: Path
) -> None:
    """The queue is in the database: a message waiting behind a turn runs once,
    after it, though Redis went away and came back meanwhile."""
    env, cookie, key, port, server = ada_chatting(
        tmp_path, scripted_llm, REDIS_URL=private_redis.url
    )
    release = threading.Event()
    try:
        scripted_llm.script(Reply(text="First, slowly.", hold=release), Reply(text="Then this."))

        async def queued_through_an_outage() -> None:
            async with chat_socket(port, cookie, key) as socket:
                await socket.send(message_frame("first question"))
                await asked(scripted_llm, 1)
                await socket.send(message_frame("second question"))
                while json.loads(await asyncio.wait_for(socket.recv(), 30))["type"] != "queued":
                    pass
                private_redis.kill()
                with pytest.raises(websockets.ConnectionClosed):
                    while True:
                        await asyncio.wait_for(socket.recv(), 30)
            private_redis.start()
            release.set()
            await asked(scripted_llm, 2)

        asyncio.run(queued_through_an_outage())
        for _ in range(60):  # each reading starts a Django process: about a second
            stored = stored_events(env, key)
            if len(stored) >= 4:
                break
    finally:
        release.set()
        stop_process(server)
    assert stored == [
        ["user_message", "first question"],
        ["assistant_response", "First, slowly."],
        ["user_message", "second question"],
        ["assistant_response", "Then this."],
    ]
    assert len(scripted_llm.requests) == 2
    assert "Traceback" not in (tmp_path / "daphne.log").read_text()
