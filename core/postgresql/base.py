"""Django's PostgreSQL backend, its health check made only when the server spoke.

With CONN_HEALTH_CHECKS a kept connection is checked (a `SELECT 1` round trip)
before its first use after each `close_old_connections()` — and channels calls
that around every `database_sync_to_async`, so every trip of a chat turn to the
database thread paid a round trip to PostgreSQL for the check (a tenth of a
team worker's time, py-spy). An idle connection that is well hears nothing
from the server: one the server closed (a restart, pg_terminate_backend) has
its goodbye or its end waiting to be read. So the check is made when the
connection's socket is readable, found with one non-blocking poll instead.
"""

from __future__ import annotations

import select

from django.db.backends.postgresql import base

# The version whose private close_if_health_check_failed (and health_check_done)
# this overrides; pinned exactly in pyproject.toml. tests/test_patched_packages.py
# fails when another is installed: re-read BaseDatabaseWrapper, then update both.
PATCHED_FOR = {"Django": "5.2.20"}


class DatabaseWrapper(base.DatabaseWrapper):
    def close_if_health_check_failed(self) -> None:
        # health_check_enabled and health_check_done are Django's (since 4.1),
        # not in django-stubs.
        due = not self.health_check_done  # type: ignore[has-type]
        if due and self.connection is not None and not self.server_spoke():
            self.health_check_done = True
            return
        super().close_if_health_check_failed()

    def server_spoke(self) -> bool:
        """Whether anything waits to be read on the idle connection."""
        try:
            readable, _, _ = select.select([self.connection.pgconn.socket], [], [], 0)
        except Exception:  # closed, or not a socket any more: let the check decide
            return True
        return bool(readable)
