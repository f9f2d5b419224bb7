"""While PostgreSQL is down (issue 40, data-low): a chat socket is closed with 4503
(the page reconnects), a page is a 503 saying so, the JSON API answers JSON 503s,
not Django's HTML 500; and all of it works again once the database is back.

The test brings its own PostgreSQL server, so it runs on either profile."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import websockets

from tests.programs import accounts
from tests.support.processes import (
    PrivatePostgres,
    app_env,
    chat_socket,
    free_port,
    logged_in_chat,
    run_program,
    spawn_daphne,
    stop_process,
    wait_for_health,
)

pytestmark = pytest.mark.slow


def get(port: int, path: str, **headers: str) -> tuple[int, str, str]:
    """(status, content type, body)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


async def close_code(port: int, cookie: str, key: str) -> int | str:
    """How the server ends a chat socket opened now: its close code, or the
    refused handshake."""
    try:
        async with chat_socket(port, cookie, key) as socket:
            await socket.send(json.dumps({"type": "message", "text": "/help"}))
            await asyncio.wait_for(socket.recv(), 30)
            return "open"
    except websockets.ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd is not None else "no close frame"
    except websockets.InvalidStatus as refused:
        return f"HTTP {refused.response.status_code}"


def test_it_answers_503_everywhere_while_postgresql_is_down(
    private_postgres: PrivatePostgres, tmp_path: Path
) -> None:
    env = app_env(tmp_path, DATABASE_URL=private_postgres.url)
    cookie, key = logged_in_chat(env, "ada", migrate=True)
    token, session_id = run_program(env, accounts.api_token, "ada", key)
    port = free_port()
    server = spawn_daphne(env, port, open(tmp_path / "daphne.log", "w"))  # noqa: SIM115
    try:
        wait_for_health(port, server)
        browser = {"Cookie": f"sessionid={cookie}"}
        program = {"Authorization": f"Bearer {token}"}
        assert get(port, f"/chat/{key}/", **browser)[0] == 200
        private_postgres.stop()

        assert asyncio.run(close_code(port, cookie, key)) == 4503
        status, kind, page = get(port, f"/chat/{key}/", **browser)
        assert (status, kind) == (503, "text/html; charset=utf-8")
        assert "Unavailable for a moment" in page
        for headers in (program, browser):
            status, kind, body = get(port, f"/api/v1/sessions/{session_id}", **headers)
            assert (status, kind) == (503, "application/json"), body
            assert "database" in json.loads(body)["error"]

        private_postgres.start()
        assert get(port, f"/api/v1/sessions/{session_id}", **program)[0] == 200
        assert asyncio.run(close_code(port, cookie, key)) == "open"
    finally:
        stop_process(server)
