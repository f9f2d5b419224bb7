"""Django's PostgreSQL backend, its health check at most once a second per connection.

With CONN_HEALTH_CHECKS a kept connection is checked (a `SELECT 1`) before its
first use after each `close_old_connections()` — and channels calls that around
every `database_sync_to_async`, so every trip of a chat turn to the database
thread paid a round trip to PostgreSQL for the check (a tenth of a team
worker's time, py-spy). A connection checked within the last second is taken
as it is: what a check is for, a server restarted while the connection sat
idle (a turn waiting for the model), still gets one.
"""

from __future__ import annotations

import time

from django.db.backends.postgresql import base

CHECK_EVERY = 1.0  # seconds


class DatabaseWrapper(base.DatabaseWrapper):
    checked_at = 0.0

    def close_if_health_check_failed(self) -> None:
        # Django's own attributes (since 4.1), not in django-stubs.
        due = self.health_check_enabled and not self.health_check_done  # type: ignore[attr-defined,has-type]
        if due:
            if time.monotonic() - self.checked_at < CHECK_EVERY:
                self.health_check_done = True
                return
            self.checked_at = time.monotonic()
        super().close_if_health_check_failed()

    def close(self) -> None:
        super().close()
        self.checked_at = 0.0  # a new connection is checked like any other
