"""Real Neotask processes for tests and benchmarks: ports, environments, daphne."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from core.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "programs"
# A function of tests.programs (or of a benchmark), or its "module:function" name
# where the caller has no Django to import it with.
Program = Callable[..., Any] | str
__all__ = [
    "PROGRAMS",
    "ROOT",
    "PrivatePostgres",
    "PrivateRedis",
    "app_env",
    "chat_socket",
    "free_port",
    "logged_in_chat",
    "manage",
    "message_frame",
    "postgres_bin_dir",
    "program_command",
    "run_program",
    "say",
    "spawn_daphne",
    "start_daphne",
    "start_qcluster",
    "stop_process",
    "stop_process_group",
    "until_done",
    "wait_for_health",
]


def app_env(data_dir: Path | str, **variables: str) -> dict[str, str]:
    """The environment of an app process with its own data dir and no config file;
    on the team profile also its own PostgreSQL database and job queue."""
    env = {**os.environ, "NEOTASK_DATA_DIR": str(data_dir), "NEOTASK_CONFIG": "", **variables}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the test settings are not the app's
    if env.get("DATABASE_URL"):
        env["DATABASE_URL"] = fresh_database(env["DATABASE_URL"])
    env["NEOTASK_QUEUE_NAME"] = f"neotask-proc-{uuid.uuid4().hex[:10]}"
    return env


def fresh_database(url: str) -> str:
    """A new, empty PostgreSQL database next to `url`'s, dropped when the run ends."""
    import psycopg

    parts = urlsplit(url)
    admin = parts._replace(path="/postgres").geturl()
    name = f"neotask_proc_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    atexit.register(drop_database, admin, name)
    return parts._replace(path=f"/{name}").geturl()


def drop_database(admin: str, name: str) -> None:
    import psycopg

    with contextlib.suppress(psycopg.Error), psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wait_for_health(port: int, process: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).close()
            return
        except urllib.error.HTTPError:  # it answers; a part of the site is down (a 503)
            return
        except OSError:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with code {process.returncode}") from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not answer within {seconds} s") from None
            time.sleep(0.2)


def start_daphne(env: dict[str, str], port: int, log: IO[Any] | int = subprocess.DEVNULL):
    """daphne serving Neotask on 127.0.0.1:`port`, once it answers /healthz
    (stopped if it never does)."""
    server = spawn_daphne(env, port, log)
    try:
        wait_for_health(port, server)
    except BaseException:
        stop_process(server)
        raise
    return server


def spawn_daphne(
    env: dict[str, str],
    port: int,
    log: IO[Any] | int = subprocess.DEVNULL,
    options: Sequence[str] = (),
):
    """daphne starting on 127.0.0.1:`port` with its `options`, not yet waited for
    (a caller that must stop it even if it never answers keeps it first)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "neotask_site.web_server",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            *options,
            "neotask_site.asgi:application",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def output_of(command: list[str], env: dict[str, str], timeout: float = 120) -> str:
    """Run `command` in the repository with `env` and return what it printed."""
    return subprocess.run(
        command, cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=timeout
    ).stdout


def manage(env: dict[str, str], *args: str, timeout: float = 120) -> str:
    """Run `manage.py <args>` in `env` and return what it printed."""
    return output_of([sys.executable, "manage.py", *args], env, timeout)


def program_command(program: Program, *arguments: Any) -> list[str]:
    """The command that runs `program` with `arguments` in the Django of the app
    whose environment it is given (tests/programs/__main__.py)."""
    name = program if isinstance(program, str) else f"{program.__module__}:{program.__name__}"
    return [sys.executable, "-m", "tests.programs", name, *(json.dumps(a) for a in arguments)]


def run_program(
    env: dict[str, str], program: Program, *arguments: Any, timeout: float = 120
) -> Any:
    """What `program` returns for `arguments` (both JSON), run in the app of `env`:
    the test reads and writes the app's database through the app's own ORM."""
    output = output_of(program_command(program, *arguments), env, timeout)
    return json.loads(output.splitlines()[-1])


def logged_in_chat(env: dict[str, str], username: str, *, migrate: bool = False) -> tuple[str, str]:
    """A new user in `env`'s database, logged in: their session cookie and the key
    of a fresh web chat of theirs (from benchmarks too, which have no Django)."""
    cookie, key = run_program(env, "tests.programs.accounts:logged_in_chat", username, migrate)
    return cookie, key


def spawn_serve(
    env: dict[str, str],
    port: int,
    *extra: str,
    jobs: bool = False,
    output: bool = False,
    log: IO[Any] | int = subprocess.DEVNULL,
    stderr: IO[Any] | int = subprocess.STDOUT,
):
    """`manage.py serve` on `port` (web server and embedded model; the job cluster
    only with `jobs`), not yet waited for, in a process group of its own: a signal
    to the group reaches its children. It writes to `log` (its stderr to `stderr`),
    or with `output` to a pipe, readable as text."""
    jobless = [] if jobs else ["--no-jobs"]
    return subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port), *jobless, *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE if output else log,
        stderr=subprocess.STDOUT if output else stderr,
        text=output,
        start_new_session=True,  # the model, web server and cluster are stopped with it
    )


def start_qcluster(env: dict[str, str], log: IO[Any] | int = subprocess.DEVNULL):
    """A django-q2 cluster of the app, as `manage.py serve` starts it."""
    return subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its workers are stopped with it (see stop_process_group)
    )


def stop_process(process: subprocess.Popen, seconds: float = 30) -> None:
    """SIGTERM, and SIGKILL if it is still there after `seconds`."""
    process.terminate()
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def stop_process_group(process: subprocess.Popen, seconds: float = 30) -> None:
    """SIGTERM to a process started with start_new_session, which stops its
    children; SIGKILL to all of them if any is still there after `seconds`.
    (A SIGTERM to every process of a django-q2 cluster at once left it hanging for
    over 30 s; to the cluster process alone, it stops in about 1 s.)"""
    if process.poll() is None:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=seconds)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def chat_socket(port: int, cookie: str, key: str):
    """A websocket to the chat `key`, logged in with the session `cookie`, as the page opens it."""
    import websockets

    return websockets.connect(
        f"ws://127.0.0.1:{port}/ws/chat/{key}/",
        additional_headers={"Cookie": f"sessionid={cookie}", "Origin": f"http://127.0.0.1:{port}"},
        open_timeout=30,
    )


async def until_done(socket: Any, seconds: float = 60) -> list[dict[str, Any]]:
    """The frames of a turn, up to and including its `done`."""
    frames = []
    while True:
        frame = json.loads(await asyncio.wait_for(socket.recv(), timeout=seconds))
        frames.append(frame)
        if frame["type"] == "done":
            return frames


def message_frame(text: str) -> str:
    """The frame that sends `text` to the chat."""
    return json.dumps({"type": "message", "text": text})


async def say(port: int, cookie: str, key: str, text: str) -> list[dict[str, Any]]:
    """Send one message on a new websocket and return the frames of its turn."""
    async with chat_socket(port, cookie, key) as socket:
        await socket.send(message_frame(text))
        return await until_done(socket)


def postgres_bin_dir() -> Path | None:
    """Where initdb, pg_ctl and postgres are (Debian keeps them off the PATH)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if found:
        return found[-1].parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


class PrivatePostgres:
    """A PostgreSQL server of one test's own, which it may stop and start without
    disturbing anyone else: trust auth, 127.0.0.1 only, a free port, a temp dir."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="neotask-pg-"))
        self.data = self.dir / "data"
        # initdb refuses to run as root.
        self.as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_owner:
            shutil.chown(self.dir, "postgres")
        self.pg("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self.running = False

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def pg(self, program: str, *args: str) -> None:
        done = subprocess.run(
            [*self.as_owner, str(self.bin_dir / program), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode:
            raise RuntimeError(f"{program} failed: {done.stderr or done.stdout}")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self.pg(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.dir / "log"),
            "-w",
            "-t",
            "60",
            "-o",
            options,
            "start",
        )
        self.running = True

    def stop(self) -> None:
        """A fast shutdown: clients are disconnected, as in a restart by the admin."""
        self.pg("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")
        self.running = False

    def close(self) -> None:
        try:
            if self.running:
                self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class PrivateRedis:
    """A Redis server of one test's own, on a free port, keeping nothing on disk."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, seconds: float = 30) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + seconds
        while not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.1)

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as probe:
                probe.sendall(b"PING\r\n")
                return probe.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: a crash, nothing saved (there is nothing on disk anyway)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if self.process is not None:
            self.process.wait()
