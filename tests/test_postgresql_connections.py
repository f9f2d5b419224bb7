"""The team profile's connections (neotask_site/postgresql): a kept connection is
health-checked (a round trip) only when the server has said something on it,
however often channels closes old connections around the chat's trips to the
database thread, and a connection the server dropped while it sat idle is
replaced, not used."""

from __future__ import annotations

import time

import psycopg
import pytest
from django.contrib.auth.models import User
from django.db import close_old_connections, connection

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the team profile's backend"),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def checks(monkeypatch) -> list[float]:
    """When the connection was health-checked."""
    made: list[float] = []
    real = connection.is_usable

    def counted() -> bool:
        made.append(time.monotonic())
        return real()

    monkeypatch.setattr(connection, "is_usable", counted)
    return made


def trip() -> None:
    """One trip of a chat turn to the database thread, as channels makes it."""
    close_old_connections()
    User.objects.exists()
    close_old_connections()


def test_it_checks_a_kept_connection_only_when_the_server_spoke(checks):
    User.objects.exists()  # connected
    for _ in range(20):
        trip()
    assert checks == []


def test_it_replaces_a_connection_the_server_dropped_while_it_was_idle(checks):
    trip()
    dropped = connection.connection
    pid = dropped.info.backend_pid
    # As PostgreSQL restarting looks to the client: its session ended by the server.
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
        while other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
            time.sleep(0.01)
    trip()  # no error: the check found it dead, and a new one answered
    assert checks and connection.connection is not dropped
