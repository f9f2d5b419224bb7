from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import User
from django.db import OperationalError, close_old_connections, connection, connections
from django.test import Client

from memory import recording
from memory.models import Event

pytestmark = pytest.mark.skipif(
    connection.vendor != "sqlite", reason="SQLite pragmas apply to the embedded profile only"
)


def test_it_opens_sqlite_in_wal_mode_with_a_busy_timeout(db):
    fresh = connection.copy()  # a new, real connection to the database file
    with fresh.cursor() as cursor:
        assert cursor.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert cursor.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000
        assert cursor.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert cursor.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert fresh.transaction_mode == "IMMEDIATE"
    assert not fresh.is_in_memory_db()
    fresh.close()


def run_in_threads(count: int, work) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def runner(number: int) -> None:
        try:
            start.wait()
            work(number)
        except BaseException as exc:  # collected and asserted on below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=runner, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return errors


@pytest.mark.django_db(transaction=True)
def test_it_serves_concurrent_requests_without_database_is_locked():
    for number in range(12):
        User.objects.create_user(f"user{number}", password=f"secret-{number}-pw")

    def log_in_and_browse(number: int) -> None:
        client = Client()
        for _ in range(5):
            # Logging in writes the session row and last_login: real writes.
            response = client.post(
                "/accounts/login/", {"username": f"user{number}", "password": f"secret-{number}-pw"}
            )
            assert response.status_code == 302, response.content[:300]
            assert client.get("/sessions/").status_code == 200
            assert client.get("/healthz").json()["db"] == "ok"

    errors = run_in_threads(12, log_in_and_browse)
    assert errors == []


@pytest.mark.django_db(transaction=True)
def test_it_keeps_every_write_of_concurrent_writers():
    owner = User.objects.create_user("writer")

    def write_events(number: int) -> None:
        for index in range(25):
            recording.record(owner, f"s{number}", "user_message", {"content": f"{number}-{index}"})
            Event.objects.filter(session_id=f"s{number}").count()

    errors = run_in_threads(20, write_events)
    assert [e for e in errors if isinstance(e, OperationalError)] == []
    assert errors == []
    assert Event.objects.count() == 20 * 25


@pytest.mark.django_db(transaction=True)
def test_it_keeps_a_connection_between_calls_but_closes_it_when_a_request_ends(alice_client):
    # Channels closes obsolete connections around every ORM call of a chat socket.
    connection.ensure_connection()
    kept = connection.connection
    close_old_connections()
    assert connection.connection is kept

    assert alice_client.get("/sessions/").status_code == 200
    assert connection.connection is None
