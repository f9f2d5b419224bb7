"""The image's entrypoint (neotask_site/container.py): its health check and its
migrations, which replicas starting together take in turns."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import connection

from core.ports import free_port
from neotask_site import container


class Health(BaseHTTPRequestHandler):
    status = 200
    hosts: list[str] = []

    def do_GET(self) -> None:
        Health.hosts.append(self.headers["Host"])
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("status, code", [(200, 0), (503, 1)])
def test_the_health_check_passes_only_on_200(monkeypatch, status, code):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    monkeypatch.setattr(Health, "status", status)
    monkeypatch.setenv("NEOTASK_PORT", str(server.server_address[1]))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert container.main(["healthcheck"]) == code
    finally:
        server.shutdown()
        server.server_close()
    assert Health.hosts[-1] == "localhost"  # in the default ALLOWED_HOSTS


def test_the_health_check_fails_when_nothing_listens(monkeypatch, capsys):
    monkeypatch.setenv("NEOTASK_PORT", str(free_port()))
    assert container.main(["healthcheck"]) == 1
    assert "refused" in capsys.readouterr().err.lower()


@pytest.mark.django_db(transaction=True)
def test_migrations_run_under_the_advisory_lock_on_postgresql(monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite serves one container: no lock to take")
    held = []

    def migrate(command, **options):
        assert (command, options["interactive"]) == ("migrate", False)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s",
                [container.MIGRATION_LOCK & 0xFFFFFFFF],
            )
            held.append(cursor.fetchone()[0])

    monkeypatch.setattr("django.core.management.call_command", migrate)
    container.migrate()
    assert held == [1]
    with connection.cursor() as cursor:  # released after
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
        assert cursor.fetchone()[0] == 0


def test_it_waits_for_a_database_that_is_not_up_yet(monkeypatch, capsys):
    from django.db import OperationalError

    attempts = []

    def connect():
        attempts.append(1)
        if len(attempts) < 3:
            raise OperationalError("connection refused")

    monkeypatch.setattr(connection, "ensure_connection", connect)
    monkeypatch.setattr(container.time, "sleep", lambda seconds: None)
    container.wait_for_database()
    assert len(attempts) == 3
    assert capsys.readouterr().err.count("waiting for the database: connection refused") == 2


def test_it_gives_up_on_a_database_that_never_answers(monkeypatch):
    from django.db import OperationalError

    def refused():
        raise OperationalError("connection refused")

    monkeypatch.setattr(connection, "ensure_connection", refused)
    monkeypatch.setattr(container.time, "sleep", lambda seconds: None)
    with pytest.raises(OperationalError):
        container.wait_for_database(seconds=0)
