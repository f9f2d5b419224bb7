"""Which stored vectors an in-process index has not read yet.

A worker stamps a row's `embedded_at` before its transaction commits, so with
several workers a row can become visible after rows stamped later than it:
"read what is newer than the newest stamp I hold" skips it for good. An index
therefore keeps re-reading the stamps of the last `SETTLE` (one small query on
the (owner, agent, embedded_at) index) and fetches only the rows it does not
hold with that very stamp: late commits and re-embedded rows alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta

from django.db.models import QuerySet
from django.utils import timezone

# Longer than any vector write takes from its stamp to its commit (a batch of
# single-row updates, or one bulk update: well under a second), with room for
# clock skew between worker hosts.
SETTLE = timedelta(seconds=60)
FETCH_BATCH = 500  # ids per `IN (...)`: far below SQLite's limit on parameters


class StampWindow:
    def __init__(self) -> None:
        # Every row stamped up to here that is committed has been read...
        self.horizon: datetime | None = None
        # ...and these were read after it, with these stamps.
        self.stamps: dict[int, datetime] = {}

    def unread(
        self, rows: QuerySet, read: tuple[datetime, Iterable[tuple[int, datetime]]] | None = None
    ) -> Iterator[QuerySet]:
        """`rows` (those with a vector) in batches, all of them the first time, then
        those not read yet with their current stamp. `read`: when, and what (id,
        stamp), the caller read of the rows stamped after the horizon, with a
        question of its own in the same statement. The window moves on only once
        every batch has been taken: an index that fails half-way reads them again."""
        started = timezone.now() if read is None else read[0]
        if self.horizon is None:
            yield rows.order_by("embedded_at")
        else:
            if read is None:
                recent = rows.filter(embedded_at__gt=self.horizon).order_by()
                stamps: Iterable[tuple[int, datetime]] = recent.values_list("id", "embedded_at")
            else:
                stamps = read[1]
            fresh = [row_id for row_id, stamp in stamps if self.stamps.get(row_id) != stamp]
            for start in range(0, len(fresh), FETCH_BATCH):
                yield rows.filter(pk__in=fresh[start : start + FETCH_BATCH]).order_by("pk")
        self.settle(started - SETTLE)

    def read(self, row_id: int, stamp: datetime) -> None:
        self.stamps[row_id] = stamp

    def settle(self, horizon: datetime) -> None:
        """Rows stamped before `horizon` are all committed: they need no second look."""
        if self.horizon is not None and horizon <= self.horizon:
            return
        self.horizon = horizon
        self.stamps = {row_id: stamp for row_id, stamp in self.stamps.items() if stamp > horizon}
