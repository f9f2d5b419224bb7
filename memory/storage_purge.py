"""What follows a deletion once it is committed: the storage's leftover copies
of the deleted text purged (memory.forgetting registers it, `after_commit`).

After the commit (idempotent, once per transaction): on SQLite the FTS5 index
is optimized (its segments still hold a deleted row's words until merged) and
the WAL checkpointed and truncated (it holds the pages as they were);
`PRAGMA secure_delete` (core.profiles) zeroes freed content, so neither the
database file nor a backup taken afterwards keeps the text. A memory file's
LanceDB table is synced, compacted and its old versions removed. On PostgreSQL
dead tuples stay in the files until VACUUM reuses them: raw bytes there are the
database administrator's (and autovacuum's) concern.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.db import connection, transaction

from core.ownership import Owner
from memory import fulltext

log = logging.getLogger(__name__)


class Housekeeping:
    """What follows a deletion once it is committed: once per transaction (equal
    for the same database), idempotent, and never undoing the deletion if it fails."""

    def __init__(self) -> None:
        self.agents: set[tuple[int, str]] = set()
        self.fulltext = False  # whether rows of the full-text index went

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Housekeeping)

    __hash__ = None  # type: ignore[assignment]

    def __call__(self) -> None:
        try:
            compact_sqlite(optimize=self.fulltext)
        except Exception:
            log.exception("compacting the SQLite database after a deletion failed")
        for owner_id, agent in sorted(self.agents):
            try:
                compact_lancedb(owner_id, agent)
            except Exception:
                log.exception("compacting the LanceDB table of %s/%s failed", owner_id, agent)


def after_commit(owner: Owner, agents: Iterable[str] = (), *, fulltext: bool = False) -> None:
    """Register the housekeeping after the current transaction's commit (at once
    outside one), merged with what this transaction registered already."""
    pending = [
        func
        for _, func, *_ in getattr(connection, "run_on_commit", [])
        if isinstance(func, Housekeeping)
    ]
    job = pending[0] if pending else Housekeeping()
    job.agents.update((owner.pk, agent) for agent in agents)
    job.fulltext |= fulltext
    if not pending:
        transaction.on_commit(job)


def compact_sqlite(*, optimize: bool) -> None:
    """SQLite: with `optimize`, rewrite the FTS5 index into one segment without
    the deleted rows' words (a contentless index keeps them until its segments
    are merged: an incremental 'merge', even of 1000 pages, left them; FTS5's
    own 'secure-delete' needs SQLite 3.44). It rewrites the whole index, holding
    the write lock: ~0.6 s at 100k events (bench/fts_optimize.py), and only when indexed
    rows went. Then checkpoint the WAL and truncate it (its frames hold the
    pages as they were)."""
    if connection.vendor != "sqlite":
        return
    if optimize:
        with transaction.atomic(), connection.cursor() as cursor:
            table = fulltext.SQLITE_TABLE
            cursor.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def compact_lancedb(owner_id: int, agent: str) -> None:
    """LanceDB keeps a deleted chunk's vector in its older fragments and versions:
    sync the table now (it drops the rows), compact it and remove old versions."""
    from memory.files.search import chunk_index_for
    from memory.lancedb_index import LanceChunkIndex

    index = chunk_index_for(owner_id, agent)
    if isinstance(index, LanceChunkIndex):
        index.purge()
