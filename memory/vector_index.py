"""Vector search in process memory, over an owner's events or memory-file chunks.

`VectorIndex` is the interface a backend implements; `NumpyIndex` keeps one
owner-and-agent's vectors of one table (`EVENTS` or `CHUNKS`) in process memory
(384 float32 each: 150 MB per 100k rows), loaded once and then synced
incrementally through a `StampWindow` (memory/vector_sync.py), so a query costs
two small indexed queries (the window, and whether the hits still exist) plus a
matrix-vector product. A deletion leaves no stamp behind: a deleted event is
dropped when it comes up as a hit, and the next best takes its place; chunks
vanish with every edit of their file, so a chunk index compares its count with
the table's on each sync instead. A corrupt stored vector is cleared, for the
embedding jobs to compute again.

Contextual scores: a turn is also found by what its speaker said just before and
just after it in the same session. An event's contextual vector is its own plus
`NEIGHBOUR_WEIGHT` times each of those two neighbours', normalised; the index keeps
only the neighbours' rows and the norms, and computes the cosine to that vector
from the plain scores (q·(v + w·a + w·b) = s_v + w·s_a + w·s_b), so it costs two
gathers instead of a second matrix. Measured by `memory_eval` (README, "Memory"):
the same speaker's neighbours help on both datasets; the other speaker's turns
(the immediate neighbours) hurt, so they are left to the full-text context.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
from django.db.models import QuerySet

from memory.models import Event, MemoryChunk
from memory.vector_sync import StampWindow
from memory.vectors import EMBEDDING_DIM, VectorError, unpack
from memory.workspace import DEFAULT_AGENT

log = logging.getLogger(__name__)
Hits = list[tuple[int, float]]
MAX_CACHED_INDEXES = 64  # owner/agent pairs kept in memory per process
NEIGHBOUR_WEIGHT = 0.5
NO_ROW = -1
CORRUPT = "corrupt vector replaced"
# The indexes synced in the current `one_sync` block.
_synced: ContextVar[set[NumpyIndex] | None] = ContextVar("synced_indexes", default=None)


@contextmanager
def one_sync() -> Iterator[None]:
    """Within the block every index syncs once: the questions one turn asks
    (similarity, search, its count and scores) are answered from one state of the
    index, and each further sync would be a query that finds nothing new. Blocks
    nest into the outermost."""
    if _synced.get() is not None:
        yield
        return
    token = _synced.set(set())
    try:
        yield
    finally:
        _synced.reset(token)


class VectorIndex(Protocol):
    def search(
        self, vector: np.ndarray, k: int, min_score: float = -1.0, contextual: bool = False
    ) -> list[tuple[int, float]]:
        """(event id, cosine similarity) of the k nearest, best first; `contextual`
        compares with the events' contextual vectors instead of their own."""
        ...

    def count(self) -> int:
        """How many events have a vector."""
        ...

    def scores(
        self, row_ids: list[int], vector: np.ndarray, contextual: bool = False
    ) -> dict[int, float]:
        """The similarity of these events (those with a vector) to `vector`."""
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


EVENTS = Rows(Event, "event", thread_fields=("session_id", "event_type", "speaker"))
CHUNKS = Rows(MemoryChunk, "memory chunk", reconcile=True)


class NumpyIndex:
    def __init__(self, owner_id: int, agent: str, rows: Rows = EVENTS) -> None:
        self.owner_id = owner_id
        self.agent = agent
        self.rows = rows
        self.lock = threading.Lock()
        self.ids = np.empty(0, dtype=np.int64)
        self.matrix = np.empty((0, EMBEDDING_DIM), dtype=np.float32)
        self.before = np.empty(0, dtype=np.int64)  # row of the speaker's previous turn
        self.after = np.empty(0, dtype=np.int64)  # ...and next turn, or NO_ROW
        self.norms = np.empty(0, dtype=np.float32)  # of each contextual vector
        self.size = 0
        self.position: dict[int, int] = {}
        # A speaker's turns in a session, by event id: (session, type, speaker) → ids.
        self.threads: dict[tuple[Any, ...], list[int]] = {}
        self.window = StampWindow()
        # The plain scores of the last query: a turn's memory asks with one vector
        # two or three times (get_context's similarity branch and its search, and
        # auto-recall's search on a session's first message; once per turn since
        # agent/prompt.py), and each matrix-vector product costs ~6 ms at 100k
        # events. Cleared by any change.
        self.last_query: tuple[bytes, dict[bool, np.ndarray]] | None = None

    def sync(self) -> None:
        """Read the vectors stored or replaced since the last sync (all of them the
        first time); once only in a `one_sync` block."""
        synced = _synced.get()
        if synced is not None and self in synced:
            return
        self.read_new()
        if synced is not None:
            synced.add(self)

    def read_new(self) -> None:
        stored = self.rows.stored(self.owner_id, self.agent)
        for batch in self.window.unread(stored):
            for row_id, vector, embedded_at, thread in self.rows.vectors(batch):
                self.put(row_id, vector, thread or None)
                self.window.read(row_id, embedded_at)
        if self.rows.reconcile and stored.count() != self.size:
            self.reconcile(stored)

    def reconcile(self, stored: QuerySet) -> None:
        """Drop the rows that are gone, and read those that committed more than
        `vector_sync.SETTLE` after their stamp."""
        present = set(stored.values_list("id", flat=True))
        self.remove([row_id for row_id in self.position if row_id not in present])
        missing = present - self.position.keys()
        if missing:
            for row_id, vector, _, thread in self.rows.vectors(stored.filter(pk__in=missing)):
                self.put(row_id, vector, thread or None)

    def put(self, row_id: int, vector: np.ndarray, thread: tuple[Any, ...] | None = None) -> None:
        self.last_query = None
        row = self.position.get(row_id)
        if row is None:
            if self.size == len(self.ids):  # grow by doubling: appends stay cheap
                self.grow(max(64, 2 * len(self.ids)))
            row = self.position[row_id] = self.size
            self.size += 1
            self.ids[row] = row_id
            self.before[row] = self.after[row] = NO_ROW
            if thread is not None:
                self.link(row, row_id, thread)
        self.matrix[row] = vector
        for touched in (row, self.before[row], self.after[row]):
            if touched != NO_ROW:
                self.renorm(int(touched))

    def grow(self, capacity: int) -> None:
        matrix = np.zeros((capacity, EMBEDDING_DIM), dtype=np.float32)
        matrix[: self.size] = self.matrix[: self.size]
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

    def renorm(self, row: int) -> None:
        contextual = self.matrix[row].copy()
        for neighbour in (self.before[row], self.after[row]):
            if neighbour != NO_ROW:
                contextual += NEIGHBOUR_WEIGHT * self.matrix[neighbour]
        self.norms[row] = max(float(np.linalg.norm(contextual)), 1e-6)

    def contextual(self, plain_of, rows: np.ndarray) -> np.ndarray:
        """Cosine to the contextual vectors of `rows`, given `plain_of(rows)`, the
        plain scores of any rows."""
        scores = plain_of(rows).copy()
        for neighbours in (self.before[rows], self.after[rows]):
            has = neighbours != NO_ROW
            scores[has] += NEIGHBOUR_WEIGHT * plain_of(neighbours[has])
        return scores / self.norms[rows]

    def search(
        self, vector: np.ndarray, k: int, min_score: float = -1.0, contextual: bool = False
    ) -> list[tuple[int, float]]:
        with self.lock:
            self.sync()
            while k > 0 and self.size > 0:
                scores = self.all_scores(vector, contextual)
                top = np.argpartition(-scores, min(k, self.size) - 1)[: min(k, self.size)]
                top = top[np.argsort(-scores[top])]
                hits = [(int(self.ids[i]), float(scores[i])) for i in top if scores[i] > min_score]
                gone = [] if self.rows.reconcile else self.deleted([row_id for row_id, _ in hits])
                if not gone:
                    return hits
                self.remove(gone)  # and the next best take their places
            return []

    def deleted(self, row_ids: list[int]) -> list[int]:
        """Those of `row_ids` that are no longer in the database. Deletions leave no
        stamp to sync from, so the hits are checked instead: one primary-key lookup."""
        if not row_ids:
            return []
        present = set(
            self.rows.model.objects.filter(pk__in=row_ids).order_by().values_list("id", flat=True)
        )
        return [row_id for row_id in row_ids if row_id not in present]

    def remove(self, row_ids: list[int]) -> None:
        """Drop these rows; the last row moves into each freed one."""
        self.last_query = None
        for row_id in row_ids:
            row = self.position.pop(row_id)
            self.unthread(row_id)
            previous, following = int(self.before[row]), int(self.after[row])
            if previous != NO_ROW:
                self.after[previous] = following
                self.renorm(previous)
            if following != NO_ROW:
                self.before[following] = previous
                self.renorm(following)
            last = self.size - 1
            if row != last:
                self.move(last, row)
            self.size -= 1

    def move(self, source: int, target: int) -> None:
        for array in (self.matrix, self.ids, self.before, self.after, self.norms):
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

    def all_scores(self, vector: np.ndarray, contextual: bool) -> np.ndarray:
        """Every row's score (read-only: it is kept for the next same query)."""
        query = np.asarray(vector, dtype=np.float32)
        key = query.tobytes()
        if self.last_query is None or self.last_query[0] != key:
            self.last_query = (key, {False: self.matrix[: self.size] @ query})
        found = self.last_query[1]
        if contextual not in found:
            plain = found[False]
            found[True] = self.contextual(lambda rows: plain[rows], np.arange(self.size))
        return found[contextual]

    def count(self) -> int:
        with self.lock:
            self.sync()
            return self.size

    def scores(
        self, row_ids: list[int], vector: np.ndarray, contextual: bool = False
    ) -> dict[int, float]:
        query = np.asarray(vector, dtype=np.float32)
        with self.lock:
            self.sync()
            known = [i for i in row_ids if i in self.position]
            if not known:
                return {}
            rows = np.array([self.position[i] for i in known], dtype=np.int64)

            def plain_of(some: np.ndarray) -> np.ndarray:
                return self.matrix[some] @ query

            chosen = self.contextual(plain_of, rows) if contextual else plain_of(rows)
            return {row_id: float(score) for row_id, score in zip(known, chosen, strict=True)}


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

    def clear(self) -> None:
        with self.lock:
            self.indexes.clear()


_event_indexes: IndexCache[NumpyIndex] = IndexCache()


def index_for(owner_id: int, agent: str = DEFAULT_AGENT) -> VectorIndex:
    """The event-vector index (in process; [memory] vector_backend chooses the
    backend of memory-file vectors only: `memory.files.search.chunk_index_for`)."""
    return _event_indexes.get((owner_id, agent), lambda: NumpyIndex(owner_id, agent))


def forget_indexes() -> None:
    """Drop the cached event indexes (tests; deleted users)."""
    _event_indexes.clear()
