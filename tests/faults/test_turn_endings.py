"""Every turn ends, whatever fails (issue 40, D4 and D5): a process killed in a
turn's first seconds leaves its streamed text and an ended input, which the next
page to open the chat is told of, frames naming the input; a turn whose answer
cannot be stored (a full disk) still ends with `done`.

Real processes, real sockets; the disk is a real, small tmpfs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from health import checks as health
from sessions_app.runner import UNSAVED
from tests.programs import accounts, events
from tests.support.processes import (
    ROOT,
    app_env,
    chat_socket,
    free_port,
    logged_in_chat,
    message_frame,
    run_program,
    spawn_daphne,
    start_daphne,
    stop_process,
    until_done,
    wait_for_health,
)
from tests.support.scripted_llm import Reply, ScriptedLLM

pytestmark = pytest.mark.slow

DISK_MB = 256  # the data dir, the embedding model included


@pytest.fixture
def servers() -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []
    yield started
    for server in started:
        stop_process(server)


def serve(env: dict[str, str], log: Path, servers: list[subprocess.Popen]) -> tuple[int, Any]:
    port = free_port()
    server = start_daphne(env, port, open(log, "w"))  # noqa: SIM115
    servers.append(server)
    return port, server


def stored(env: dict[str, str], key: str) -> list[list[Any]]:
    return run_program(env, events.of_chats, [key])[key]


def test_a_process_killed_in_a_turns_first_second_leaves_an_ended_input(
    scripted_llm: ScriptedLLM, tmp_path: Path, servers: list[subprocess.Popen]
) -> None:
    """Killed within a second of its first streamed text (before any lease renewal):
    the text is kept, and a page that merely opens the chat, on another process,
    learns that the input ended, by its id."""
    env = app_env(
        tmp_path, NEOTASK_LLM_BASE_URL=scripted_llm.url, NEOTASK_LLM_API_KEY=scripted_llm.api_key
    )
    cookie, key = logged_in_chat(env, "ada", migrate=True)
    scripted_llm.script(Reply(deltas=[f"part{n} " for n in range(100)], delay=0.2))
    doomed_port, doomed = serve(env, tmp_path / "doomed.log", servers)
    survivor_port, _ = serve(env, tmp_path / "survivor.log", servers)

    async def crash_then_open() -> tuple[int, list[dict[str, Any]]]:
        async with chat_socket(doomed_port, cookie, key) as socket:
            await socket.send(message_frame("Tell me a long story."))
            started = None
            while True:
                frame = json.loads(await asyncio.wait_for(socket.recv(), 60))
                if frame["type"] == "started":
                    started = frame["input_id"]
                if frame["type"] == "delta":
                    break
            await asyncio.sleep(0.5)  # the first text saved (at once), no renewal yet (5 s)
            doomed.kill()
            doomed.wait()
        assert started is not None
        # Nobody sends anything: opening the chat is enough (the lease runs out in 20 s).
        async with chat_socket(survivor_port, cookie, key) as page:
            return started, await until_done(page, seconds=60)

    input_id, frames = asyncio.run(crash_then_open())
    assert [f["type"] for f in frames] == ["error", "done"]
    error, done = frames
    assert "stopped while answering" in error["message"]
    assert error["input_id"] == done["input_id"] == input_id
    assert done["status"] == "error"
    kept = stored(env, key)
    assert [kind for kind, _, _ in kept] == ["user_message", "assistant_response", "error"]
    _, text, data = kept[1]
    assert text.startswith("part0 ") and data["interrupted"] and data["reason"] == "server_stopped"


def fill(disk: Path) -> None:
    """Every free byte of `disk` taken."""
    descriptor = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (1 << 20, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(descriptor, b"\0" * size)
    finally:
        os.close(descriptor)


@dataclass
class FullDisk:
    """Neotask (the embedded profile: SQLite) with its data dir on a small tmpfs."""

    env: dict[str, str]
    disk: Path
    port: int
    cookie: str
    key: str
    token: str
    session_id: str
    llm: ScriptedLLM


@pytest.fixture(scope="module")
def on_a_small_disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FullDisk]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path_factory.mktemp("small-disk")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        with ScriptedLLM() as llm:
            env = app_env(disk, NEOTASK_LLM_BASE_URL=llm.url, NEOTASK_LLM_API_KEY=llm.api_key)
            for service in ("DATABASE_URL", "REDIS_URL"):  # all of it on the small disk
                env.pop(service, None)
            cookie, key = logged_in_chat(env, "ada", migrate=True)
            token, session_id = run_program(env, accounts.api_token, "ada", key)
            port = free_port()
            server = spawn_daphne(env, port, open(disk.parent / "full-disk.log", "w"))  # noqa: SIM115
            try:
                wait_for_health(port, server)
                yield FullDisk(env, disk, port, cookie, key, token, session_id, llm)
            finally:
                stop_process(server)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_turn_whose_answer_cannot_be_stored_still_ends(on_a_small_disk: FullDisk) -> None:
    """The disk fills up while the model answers: the answer cannot be stored, and
    the tab is told so and gets its `done` (it does not stay "answering")."""
    app = on_a_small_disk
    release = threading.Event()
    app.llm.script(Reply(text="This answer finds no room.", hold=release))

    async def turn() -> list[dict[str, Any]]:
        async with chat_socket(app.port, app.cookie, app.key) as socket:
            await socket.send(message_frame("Say something long."))
            while not app.llm.requests:  # the message is stored, the model asked
                await asyncio.sleep(0.05)
            await asyncio.to_thread(fill, app.disk)
            release.set()
            return await until_done(socket, seconds=60)

    try:
        frames = asyncio.run(turn())
    finally:
        release.set()
    errors = [f for f in frames if f["type"] == "error"]
    done = frames[-1]
    assert [e["message"] for e in errors] == [UNSAVED], errors
    assert done["status"] == "error" and errors[0]["input_id"] == done["input_id"]


def request(app: FullDisk, method: str, path: str, body: Any = None) -> tuple[int, str, str]:
    """(status, content type, body) of an API request with the user's token."""
    data = json.dumps(body).encode() if body is not None else None
    sent = urllib.request.Request(
        f"http://127.0.0.1:{app.port}{path}",
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {app.token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(sent, timeout=60) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def test_the_api_answers_in_json_when_the_disk_is_full(on_a_small_disk: FullDisk) -> None:
    app = on_a_small_disk
    fill(app.disk)
    status, kind, body = request(
        app, "POST", f"/api/v1/sessions/{app.session_id}/messages", {"text": "Still there?"}
    )
    assert (status, kind) == (503, "application/json"), body
    assert "database" in json.loads(body)["error"]
    status, kind, body = request(app, "GET", f"/api/v1/sessions/{app.session_id}")
    assert status == 200, body  # reading still works


def healthz(port: int) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_healthz_says_the_database_is_down_when_it_cannot_write(on_a_small_disk: FullDisk) -> None:
    """While another process keeps the database open (as the job cluster does), a
    new connection opens and reads on a full disk: only a write shows the fault."""
    app = on_a_small_disk
    with contextlib.closing(sqlite3.connect(app.disk / "neotask.sqlite3")) as cluster:
        cluster.execute("SELECT count(*) FROM auth_user").fetchone()
        fill(app.disk)
        # Its write probe is kept a few seconds (health.checks.WRITE_CACHE_SECONDS).
        deadline = time.monotonic() + 4 * health.WRITE_CACHE_SECONDS
        while (answer := healthz(app.port))[1]["db"] == "ok" and time.monotonic() < deadline:
            time.sleep(0.5)
    assert answer[0] == 503 and answer[1]["db"] == "down", answer


def test_backup_says_in_one_line_that_the_disk_is_full(on_a_small_disk: FullDisk) -> None:
    app = on_a_small_disk
    fill(app.disk)
    done = subprocess.run(
        [sys.executable, "manage.py", "backup", "--output", str(app.disk / "backup.tar")],
        cwd=ROOT,
        env=app.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    # One line says why (the progress bar aside).
    said = [line for line in done.stderr.splitlines() if line.strip() and "backup:" not in line]
    assert len(said) == 1 and "no space" in said[0].lower(), done.stderr


def test_the_chat_carries_on_once_there_is_room_again(on_a_small_disk: FullDisk) -> None:
    """With room again, the chat answers; the input that could not be marked
    finished was ended by whoever opened the chat (its lease long run out)."""
    app = on_a_small_disk
    (app.disk / "filler").unlink()
    app.llm.script(Reply(text="Room again."))

    async def ask() -> list[dict[str, Any]]:
        frames: list[dict[str, Any]] = []
        ours = None
        async with chat_socket(app.port, app.cookie, app.key) as socket:
            await socket.send(message_frame("Better now?"))
            while True:
                frame = json.loads(await asyncio.wait_for(socket.recv(), 60))
                frames.append(frame)
                if frame["type"] == "started" or frame.get("text") == "Better now?":
                    ours = frame["input_id"]
                if frame["type"] == "done" and frame["input_id"] == ours:
                    return frames

    frames = asyncio.run(ask())
    assert frames[-1]["status"] == "completed", frames
    assert "Room again." in [text for _, text, _ in stored(app.env, app.key)]
    assert run_program(app.env, accounts.unfinished_inputs, "ada") == 0
