"""Vector search in process memory, over an owner's events or memory-file chunks.

On the single-user SQLite profile; on PostgreSQL `index_for` gives the pgvector
index instead (memory.pgvector), with the same interface, and none of this runs.

`VectorIndex` is the interface a backend implements; `NumpyIndex` keeps one
owner-and-agent's vectors of one table (`EVENTS` or `CHUNKS`) in process memory
(384 float32 each: 150 MB per 100k rows), loaded once and then synced
incrementally through a `StampWindow` (memory/vector_sync.py). A query vector is
compared with every stored one once (`NumpyIndex.query`: a sync and a
matrix-vector product, ~6.5 ms at 100k events), and each question a turn asks with
it — the nearest by plain or contextual cosine, the scores of given rows — is read
from that `VectorQuery` (memory.vector_query), plus one small query for whether its hits still exist
(those the caller read this turn need none: `VectorQuery.exist`).
A deletion leaves no stamp behind: an event forgotten on demand (memory.forgetting)
is logged in `ForgottenEvent`, which each sync reads in the statement that reads
the new stamps, so every process drops its vector at once; any other deleted
event is dropped when it comes up as a hit, and the next best takes its place;
chunks vanish with every edit of their file, so a chunk index compares its count
with the table's on each sync instead.
A corrupt stored vector is cleared, for the embedding jobs to compute again.

Contextual scores: a turn is also found by what its speaker said just before and
just after it in the same session. An event's contextual vector is its own plus
`NEIGHBOUR_WEIGHT` times each of those two neighbours', normalised; the index keeps
only the neighbours' rows and the norms, and computes the cosine to that vector
from the plain scores (q·(v + w·a + w·b) = s_v + w·s_a + w·s_b), so it costs two
gathers instead of a second matrix. Measured by `memory_eval` (docs/memory.md):
the same speaker's neighbours help on both datasets; the other speaker's turns
(the immediate neighbours) hurt, so they are left to the full-text context.
A message's whole path, end to end: docs/chat-runtime.md#events-and-memory.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
from django.db import connection, connections
from django.db.models import QuerySet
from django.utils import timezone

from memory.models import Event, ForgottenEvent, MemoryChunk
from memory.pgvector.queries import PgIndex
from memory.vector_query import VectorQuery
from memory.vector_sync import SETTLE, StampWindow
from memory.vectors import EMBEDDING_DIM, VectorError, unpack
from memory.workspace import DEFAULT_AGENT

log = logging.getLogger(__name__)
Hits = list[tuple[int, float]]
Read = tuple[datetime, list[tuple[int, datetime]]]  # when, and the (id, stamp) read
MAX_CACHED_INDEXES = 64  # owner/agent pairs kept in memory per process
NEIGHBOUR_WEIGHT = 0.5
# The row before the first and after the last turn of a thread: the last index, so
# that a gather from the plain scores followed by a 0 reads that 0 (`contextual`).
NO_ROW = -1
CORRUPT = "corrupt vector replaced"
PUT_BATCH = 2000  # vectors written into the matrix at once while syncing
# The matrix grows by an eighth: each column's unused tail shares its pages (numpy
# asks for huge pages) with the used part of the next, so all of it is resident
# (+50 MB at 100k rows when it doubled), and copying it on growth stays rare.
GROWTH = 8


class VectorIndex(Protocol):
    def search(
        self, vector: np.ndarray, k: int, min_score: float = -1.0, contextual: bool = False
    ) -> list[tuple[int, float]]:
        """(event id, cosine similarity) of the k nearest, best first; `contextual`
        compares with the events' contextual vectors instead of their own."""
        ...


@dataclass(frozen=True)
class Rows:
    """The table an index holds the vectors of, and how it learns that rows are gone."""

    model: type[Event] | type[MemoryChunk]
    label: str  # in log lines
    # Read with each vector: a speaker's turns of a session, for contextual scores.
    thread_fields: tuple[str, ...] = ()
    # Rows that vanish often (a file's chunks, on every edit) are counted on each
    # sync, then their ids compared; rare deletions are found among the hits.
    reconcile: bool = False
    # Rows deleted on demand are logged (ForgottenEvent) for every process to drop.
    forgotten: bool = False

    def stored(self, owner_id: int, agent: str) -> QuerySet:
        """The owner's rows of `agent` that have a vector."""
        return self.model.objects.filter(owner_id=owner_id, agent=agent, embedded_at__isnull=False)

    def vectors(self, rows: QuerySet) -> Iterator[tuple[int, np.ndarray, datetime, tuple]]:
        """(id, vector, stamp, thread) of `rows`; a corrupt vector is cleared instead,
        for the embedding jobs to compute again."""
        fields = ("id", "embedding", "embedded_at", *self.thread_fields)
        for row_id, blob, embedded_at, *thread in rows.values_list(*fields).iterator(2000):
            if blob is None:
                continue
            try:
                vector = unpack(blob)
            except VectorError:
                log.warning("%s %s has a corrupt vector; it is embedded again", self.label, row_id)
                self.model.objects.filter(pk=row_id).update(
                    embedding=None, embedded_at=None, embedding_error=CORRUPT
                )
                continue
            yield row_id, vector, embedded_at, tuple(thread)


EVENTS = Rows(Event, "event", thread_fields=("session_id", "event_type", "speaker"), forgotten=True)
CHUNKS = Rows(MemoryChunk, "memory chunk", reconcile=True)


class NumpyIndex:
    def __init__(self, owner_id: int, agent: str, rows: Rows = EVENTS) -> None:
        self.owner_id = owner_id
        self.agent = agent
        self.rows = rows
        self.lock = threading.Lock()
        self.ids = np.empty(0, dtype=np.int64)
        # One column per row: the query's product with a matrix stored this way
        # (OpenBLAS's sgemv "N") reads the 150 MB of 100k rows twice as fast as
        # with one row per vector (its dot kernel): 6.5 ms of CPU instead of 13
        # (docs/performance.md, "Memory").
        self.matrix = np.empty((EMBEDDING_DIM, 0), dtype=np.float32)
        self.before = np.empty(0, dtype=np.int64)  # row of the speaker's previous turn
        self.after = np.empty(0, dtype=np.int64)  # ...and next turn, or NO_ROW
        self.norms = np.empty(0, dtype=np.float32)  # of each contextual vector
        self.size = 0
        self.position: dict[int, int] = {}
        # A speaker's turns in a session, by event id: (session, type, speaker) → ids.
        self.threads: dict[tuple[Any, ...], list[int]] = {}
        self.window = StampWindow()
        # Forgotten rows logged after this have not been dropped yet.
        self.forgotten_horizon: datetime | None = None
        self.removals = 0  # rows move only when one is removed (`VectorQuery.scores`)

    def sync(self) -> None:
        """Read the vectors stored or replaced since the last sync (all of them the
        first time), and drop the rows forgotten since. The caller holds the lock."""
        stored = self.rows.stored(self.owner_id, self.agent)
        read, count = self.changes()
        for unread in self.window.unread(stored, read):
            for found in batches(self.rows.vectors(unread), PUT_BATCH):
                self.put_many([(row_id, vector, thread) for row_id, vector, _, thread in found])
                for row_id, _, embedded_at, _ in found:
                    self.window.read(row_id, embedded_at)
        if self.rows.reconcile and (stored.count() if count is None else count) != self.size:
            self.reconcile(stored)

    def changes(self) -> tuple[Read | None, int | None]:
        """What changed since the last sync, in one statement on each table's (owner,
        agent, time) index: the rows logged as forgotten (dropped here), when and what
        it read of the rows stamped after the window's horizon (`StampWindow.unread`),
        and, for a table that reconciles, how many rows have a vector. Written out:
        the ORM took longer to build its two or three statements than SQLite to run
        this one (a memory search with the file chunks' index: 1.5 ms of its ~17).

        The log is read `SETTLE` back, as the stamps are: a deletion may commit after
        a later-logged one was read. A first sync loads no deleted row, so it only
        sets the horizon; and it reads every row, so it asks nothing here (nor does
        a sync after a first load that failed half-way: that reads every row again)."""
        started = timezone.now()
        stamped_after = self.window.horizon
        forgotten_after = self.forgotten_horizon if self.rows.forgotten else None
        if self.rows.forgotten:
            self.forgotten_horizon = started - SETTLE
        ops = connection.ops
        quote = ops.quote_name
        table = quote(self.rows.model._meta.db_table)
        scope = f"{quote('owner_id')} = %s AND {quote('agent')} = %s"
        parts: list[str] = []
        params: list[Any] = []
        if forgotten_after is not None:
            parts.append(
                f"SELECT {quote('event_id')}, {quote('forgotten_at')}, 1"
                f" FROM {quote(ForgottenEvent._meta.db_table)}"
                f" WHERE {scope} AND {quote('forgotten_at')} > %s"
            )
            params += [self.owner_id, self.agent, ops.adapt_datetimefield_value(forgotten_after)]
        if stamped_after is not None:
            parts.append(
                f"SELECT {quote('id')}, {quote('embedded_at')}, 0 FROM {table}"
                f" WHERE {scope} AND {quote('embedded_at')} > %s"
            )
            params += [self.owner_id, self.agent, ops.adapt_datetimefield_value(stamped_after)]
            if self.rows.reconcile:
                parts.append(
                    f"SELECT COUNT(*), NULL, 2 FROM {table}"
                    f" WHERE {scope} AND {quote('embedded_at')} IS NOT NULL"
                )
                params += [self.owner_id, self.agent]
        if not parts:
            return None, None
        with connection.cursor() as cursor:
            cursor.execute(" UNION ALL ".join(parts), params)
            found = cursor.fetchall()
        # SQLite returns text; PostgreSQL an aware datetime already.
        convert = getattr(ops, "convert_datetimefield_value", lambda at, *_: at)
        held = [row_id for row_id, _, kind in found if kind == 1 and row_id in self.position]
        if held:
            self.remove(held)
        if stamped_after is None:  # the window reads every row
            return None, None
        stamps = [
            (row_id, convert(at, None, connection)) for row_id, at, kind in found if kind == 0
        ]
        count = next((row_id for row_id, _, kind in found if kind == 2), None)
        return (started, stamps), count

    def reconcile(self, stored: QuerySet) -> None:
        """Drop the rows that are gone, and read those that committed more than
        `vector_sync.SETTLE` after their stamp."""
        present = set(stored.values_list("id", flat=True))
        self.remove([row_id for row_id in self.position if row_id not in present])
        missing = present - self.position.keys()
        if missing:
            for found in batches(self.rows.vectors(stored.filter(pk__in=missing)), PUT_BATCH):
                self.put_many([(row_id, vector, thread) for row_id, vector, _, thread in found])

    def put(self, row_id: int, vector: np.ndarray, thread: tuple[Any, ...] | None = None) -> None:
        self.put_many([(row_id, vector, thread)])

    def put_many(self, found: list[tuple[int, np.ndarray, tuple[Any, ...] | None]]) -> None:
        """Store these (row id, vector, thread): new rows, or new vectors of held
        ones. The vectors are written as one block (a column at a time would touch
        a cache line per dimension), then the contextual norms that they change."""
        if not found:
            return
        rows = []
        for row_id, _, thread in found:
            row = self.position.get(row_id)
            if row is None:
                if self.size == len(self.ids):
                    self.grow(self.size + max(64, self.size // GROWTH))
                row = self.position[row_id] = self.size
                self.size += 1
                self.ids[row] = row_id
                self.before[row] = self.after[row] = NO_ROW
                if thread:  # events' (session, type, speaker); none for chunks
                    self.link(row, row_id, thread)
            rows.append(row)
        written = np.array(rows, dtype=np.int64)
        self.matrix[:, written] = np.array([vector for _, vector, _ in found], dtype=np.float32).T
        self.renorm(np.concatenate([written, self.before[written], self.after[written]]))

    def grow(self, capacity: int) -> None:
        matrix = np.zeros((EMBEDDING_DIM, capacity), dtype=np.float32)
        matrix[:, : self.size] = self.matrix[:, : self.size]
        self.matrix = matrix
        self.ids = np.resize(self.ids, capacity)
        self.before = np.resize(self.before, capacity)
        self.after = np.resize(self.after, capacity)
        self.norms = np.resize(self.norms, capacity)

    def link(self, row: int, row_id: int, thread: tuple[str, str, str]) -> None:
        """Place the event among its speaker's turns of the session (they may be
        embedded in any order)."""
        turns = self.threads.setdefault(thread, [])
        place = bisect.bisect_left(turns, row_id)
        if place > 0:
            previous = self.position[turns[place - 1]]
            self.before[row], self.after[previous] = previous, row
        if place < len(turns):
            following = self.position[turns[place]]
            self.after[row], self.before[following] = following, row
        turns.insert(place, row_id)

    def renorm(self, rows: np.ndarray) -> None:
        """Compute the norms of these rows' contextual vectors (NO_ROW is skipped)."""
        rows = np.unique(rows[rows != NO_ROW])
        contextual = self.matrix[:, rows]  # a copy: fancy indexing
        for neighbours in (self.before[rows], self.after[rows]):
            has = neighbours != NO_ROW
            contextual[:, has] += NEIGHBOUR_WEIGHT * self.matrix[:, neighbours[has]]
        self.norms[rows] = np.maximum(np.linalg.norm(contextual, axis=0), 1e-6)

    def contextual(self, plain: np.ndarray) -> np.ndarray:
        """Every row's cosine to its contextual vector, given `plain`, every row's
        plain score followed by a 0 (what a missing neighbour, NO_ROW, reads)."""
        rows = slice(0, self.size)
        neighbours = plain[self.before[rows]] + plain[self.after[rows]]
        return (plain[rows] + NEIGHBOUR_WEIGHT * neighbours) / self.norms[rows]

    def query(self, vector: np.ndarray) -> VectorQuery:
        """`vector` compared with every stored vector, once."""
        return VectorQuery(self, vector)

    def search(
        self, vector: np.ndarray, k: int, min_score: float = -1.0, contextual: bool = False
    ) -> Hits:
        return self.query(vector).top(k, min_score, contextual)

    def deleted(self, row_ids: list[int]) -> list[int]:
        """Those of `row_ids` that are no longer in the database. Deletions leave no
        stamp to sync from, so the hits are checked instead: one primary-key lookup,
        written out (the ORM's build took longer than SQLite's lookup of 50 ids)."""
        if not row_ids:
            return []
        quote = connection.ops.quote_name
        sql = (
            f"SELECT {quote('id')} FROM {quote(self.rows.model._meta.db_table)}"
            f" WHERE {quote('id')} IN ({', '.join(['%s'] * len(row_ids))})"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, row_ids)
            present = {row_id for (row_id,) in cursor.fetchall()}
        return [row_id for row_id in row_ids if row_id not in present]

    def remove(self, row_ids: list[int]) -> None:
        """Drop these rows; the last row moves into each freed one."""
        self.removals += 1
        for row_id in row_ids:
            row = self.position.pop(row_id)
            self.unthread(row_id)
            previous, following = int(self.before[row]), int(self.after[row])
            if previous != NO_ROW:
                self.after[previous] = following
            if following != NO_ROW:
                self.before[following] = previous
            self.renorm(np.array([previous, following]))
            last = self.size - 1
            if row != last:
                self.move(last, row)
            self.size -= 1

    def move(self, source: int, target: int) -> None:
        self.matrix[:, target] = self.matrix[:, source]
        for array in (self.ids, self.before, self.after, self.norms):
            array[target] = array[source]
        self.position[int(self.ids[target])] = target
        if self.before[target] != NO_ROW:
            self.after[self.before[target]] = target
        if self.after[target] != NO_ROW:
            self.before[self.after[target]] = target

    def unthread(self, row_id: int) -> None:
        # A scan of the threads: deletions are rare, and a thread per row would cost
        # memory on every row.
        for thread, turns in self.threads.items():
            place = bisect.bisect_left(turns, row_id)
            if place < len(turns) and turns[place] == row_id:
                del turns[place]
                if not turns:
                    del self.threads[thread]
                return

    def count(self) -> int:
        with self.lock:
            self.sync()
            return self.size


Item = TypeVar("Item")


def batches(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


Index = TypeVar("Index")


class IndexCache(Generic[Index]):
    """The indexes a process keeps, the `MAX_CACHED_INDEXES` used last."""

    def __init__(self) -> None:
        self.indexes: OrderedDict[Any, Index] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: Any, make: Callable[[], Index]) -> Index:
        with self.lock:
            index = self.indexes.get(key)
            if index is None:
                index = self.indexes[key] = make()
                while len(self.indexes) > MAX_CACHED_INDEXES:
                    self.indexes.popitem(last=False)
            self.indexes.move_to_end(key)
        return index

    def peek(self, key: Any) -> Index | None:
        """The index kept for `key`, if one is."""
        with self.lock:
            return self.indexes.get(key)

    def clear(self) -> None:
        with self.lock:
            self.indexes.clear()


_event_indexes: IndexCache[NumpyIndex] = IndexCache()


def in_database() -> bool:
    """Whether vectors are searched in the database (pgvector, the team profile)
    rather than in process."""
    return connections["default"].vendor == "postgresql"


def index_for(owner_id: int, agent: str = DEFAULT_AGENT) -> NumpyIndex | PgIndex:
    """The event-vector index: in PostgreSQL on the team profile, in process
    otherwise ([memory] vector_backend chooses the backend of memory-file vectors
    only: `memory.files.search.chunk_index_for`)."""
    if in_database():
        return PgIndex(owner_id, agent)
    return _event_indexes.get((owner_id, agent), lambda: NumpyIndex(owner_id, agent))


def learn_vector(event: Event, vector: np.ndarray) -> None:
    """A vector stored with its event by this process, put in the process's index of
    its owner's agent if one is loaded: its next sync need not read it back."""
    if in_database():
        return
    index = _event_indexes.peek((event.owner_id, event.agent))
    if index is None:
        return
    with index.lock:
        if index.window.horizon is None:  # not loaded yet: its first sync reads them all
            return
        index.put(event.pk, vector, (event.session_id, event.event_type, event.speaker))
        assert event.embedded_at is not None
        index.window.read(event.pk, event.embedded_at)


def forget_indexes() -> None:
    """Drop the cached event indexes (tests; deleted users)."""
    _event_indexes.clear()
