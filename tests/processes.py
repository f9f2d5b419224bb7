"""Real Neotask processes for tests and benchmarks: ports, environments, daphne."""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from neotask_site.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
__all__ = ["ROOT", "app_env", "free_port", "start_daphne", "wait_for_health"]


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
        except OSError:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with code {process.returncode}") from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not answer within {seconds} s") from None
            time.sleep(0.2)


def start_daphne(env: dict[str, str], port: int, log: IO[Any] | int = subprocess.DEVNULL):
    """daphne serving Neotask on 127.0.0.1:`port`, once it answers /healthz."""
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "neotask_site.asgi:application",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    wait_for_health(port, server)
    return server
