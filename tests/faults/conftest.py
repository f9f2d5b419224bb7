"""What the fault tests share: PostgreSQL and Redis servers of their own, to stop
and start, or to run several processes on whatever the profile (the machine's
shared ones serve other tests); the scripted LLM for an app run apart."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
from collections.abc import Iterator

import pytest

from tests.support.processes import PrivatePostgres, PrivateRedis, postgres_bin_dir
from tests.support.scripted_llm import ScriptedLLM


@contextlib.contextmanager
def postgres_of_its_own() -> Iterator[PrivatePostgres]:
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        pytest.skip("the PostgreSQL server programs (initdb, pg_ctl) are not installed")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("initdb refuses root, and there is no postgres user to run it as")
    server = PrivatePostgres(bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.close()


@contextlib.contextmanager
def redis_of_its_own() -> Iterator[PrivateRedis]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    server = PrivateRedis()
    try:
        server.start()
        yield server
    finally:
        server.kill()


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """A PostgreSQL of the test's own."""
    with postgres_of_its_own() as server:
        yield server


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    """A Redis of the test's own."""
    with redis_of_its_own() as server:
        yield server


@pytest.fixture(scope="module")
def module_postgres() -> Iterator[PrivatePostgres]:
    """A PostgreSQL of the module's own, for a stack of processes its tests share."""
    with postgres_of_its_own() as server:
        yield server


@pytest.fixture(scope="module")
def module_redis() -> Iterator[PrivateRedis]:
    """A Redis of the module's own, for a stack of processes its tests share."""
    with redis_of_its_own() as server:
        yield server


@pytest.fixture
def scripted_llm() -> Iterator[ScriptedLLM]:
    """The scripted LLM without the test process's settings: the app runs apart."""
    with ScriptedLLM() as server:
        yield server
