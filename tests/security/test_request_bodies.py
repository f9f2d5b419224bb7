"""Request bodies are bounded while daphne receives them (neotask_site/request_bodies.py),
over real sockets to a live daphne whose temp dir the test watches: daphne keeps a
body above 100 kB in an unlinked temporary file until it has all of it. On main an
unauthenticated chunked body grew there for as long as it was sent (the whole
40 MB here, 300 MB in the review)."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import app_env, free_port, manage, start_daphne, stop_process

pytestmark = pytest.mark.slow

MB = 1024 * 1024
UNAUTHENTICATED_BOUND = 2_621_440  # Django's DATA_UPLOAD_MAX_MEMORY_SIZE
CHUNK = 64 * 1024
SENT_AT_MOST = 40 * MB


@pytest.fixture(scope="module")
def daphne(tmp_path_factory) -> Iterator[tuple[int, subprocess.Popen, Path]]:
    """A live daphne with a temp dir of its own: its port, its process and that dir."""
    data = tmp_path_factory.mktemp("bodies")
    temp = data / "tmp"
    temp.mkdir()
    env = app_env(data, TMPDIR=str(temp))
    manage(env, "migrate", "-v0")
    port = free_port()
    with (data / "daphne.log").open("w") as log:
        server = start_daphne(env, port, log)
    try:
        yield port, server, temp
    finally:
        stop_process(server)


def held_in(process: subprocess.Popen, temp: Path) -> int:
    """The bytes of the (unlinked) files in `temp` that the process holds open."""
    held = 0
    fds = Path(f"/proc/{process.pid}/fd")
    for fd in fds.iterdir():
        try:
            target = os.readlink(fd)
            if target.startswith(str(temp)):
                held += os.stat(fd).st_size
        except OSError:  # closed meanwhile
            continue
    return held


def head(path: str, port: int, *headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", *headers, "", ""]
    return "\r\n".join(lines).encode()


def answer(connection: socket.socket) -> bytes:
    """What the server answered, up to its closing the connection (or 5 s)."""
    connection.settimeout(5)
    received = b""
    try:
        while chunk := connection.recv(65536):
            received += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return received


def send_chunked(port: int, process: subprocess.Popen, temp: Path, *headers: str):
    """A chunked body of up to SENT_AT_MOST bytes to /accounts/login/, sent until the
    server stops taking it: the bytes sent, the most it held in `temp` meanwhile,
    and its answer."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=10)
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CHUNK)
    sent, most_held = 0, 0
    with connection:
        connection.sendall(head("/accounts/login/", port, "Transfer-Encoding: chunked", *headers))
        chunk = f"{CHUNK:x}\r\n".encode() + b"a" * CHUNK + b"\r\n"
        try:
            while sent < SENT_AT_MOST:
                connection.sendall(chunk)
                sent += CHUNK
                if sent % MB == 0:
                    most_held = max(most_held, held_in(process, temp))
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass
        most_held = max(most_held, held_in(process, temp))
        return sent, most_held, answer(connection)


def test_it_cuts_off_an_unauthenticated_chunked_body_at_its_bound(daphne):
    port, process, temp = daphne
    sent, most_held, answered = send_chunked(port, process, temp)
    assert sent < SENT_AT_MOST, f"all {sent} bytes were taken, {most_held} held in {temp}"
    assert most_held <= UNAUTHENTICATED_BOUND
    assert answered == b"" or answered.startswith(b"HTTP/1.1 413 "), answered[:200]
    assert held_in(process, temp) == 0  # let go once refused


def test_it_refuses_a_declared_length_above_the_bound_before_reading_it(daphne):
    port = daphne[0]
    for headers, length in [
        ((), UNAUTHENTICATED_BOUND + 1),
        (("Cookie: sessionid=anything",), 300 * MB),  # credentials get the upload bound
        (("Authorization: Bearer nt_x_y",), 300 * MB),
    ]:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
            connection.sendall(
                head("/accounts/login/", port, f"Content-Length: {length}", *headers)
            )
            answered = answer(connection)  # the body was never sent
        assert answered.startswith(b"HTTP/1.1 413 "), (headers, answered[:200])
        assert b"Connection: close" in answered


def test_bodies_within_their_bound_reach_the_application(daphne):
    port = daphne[0]
    # 4 MB: above the bound without credentials, below it with a (forged) cookie,
    # which Django then checks. No account exists yet: Django sends every page to
    # the first-run setup.
    body = b"a" * (4 * MB)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(
            head("/accounts/login/", port, f"Content-Length: {len(body)}", "Cookie: sessionid=x")
        )
        connection.sendall(body)
        answered = answer(connection)
    assert answered.startswith(b"HTTP/1.1 302 ") and b"Location: /setup/" in answered
    small = b"username=a&password=b"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(
            head(
                "/accounts/login/",
                port,
                f"Content-Length: {len(small)}",
                "Content-Type: application/x-www-form-urlencoded",
                "Connection: close",
            )
            + small
        )
        assert answer(connection).startswith(b"HTTP/1.1 302 ")
