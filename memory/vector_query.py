"""One query vector's scores against an in-process index (memory.vector_index's
`NumpyIndex`): a matrix-vector product on the process's product thread, read by
each question a turn asks with that vector (`VectorQuery`), and the pick of the
k best scores (`best_rows`).

On the single-user SQLite profile; on PostgreSQL memory.pgvector.queries.PgQuery
answers the same questions in SQL.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

import numpy as np

Hits = list[tuple[int, float]]
SAMPLE_STEP = 32  # of the scores, sampled for a likely cut of the k best (`best_rows`)


class ReconciledRows(Protocol):
    @property
    def reconcile(self) -> bool: ...


class ScoredIndex(Protocol):
    """What a query reads of its index (memory.vector_index.NumpyIndex), named here
    so that this module need not import that one back."""

    lock: threading.Lock
    matrix: np.ndarray  # EMBEDDING_DIM rows by capacity columns, the first `size` used
    ids: np.ndarray
    size: int
    position: dict[int, int]  # row id → column
    removals: int

    @property
    def rows(self) -> ReconciledRows: ...

    def sync(self) -> None: ...

    def contextual(self, plain: np.ndarray) -> np.ndarray: ...

    def deleted(self, row_ids: list[int]) -> list[int]: ...

    def remove(self, row_ids: list[int]) -> None: ...


class VectorQuery:
    """One query vector's scores against every vector of an index: one sync, one
    matrix-vector product, read by each question asked with that vector (a turn's
    similarity branch, its memory search's nearest by contextual cosine and the
    cosine of the words' finds).

    The product (~6.5 ms at 100k events) runs on the process's product thread while
    the caller goes on to its database questions (numpy and SQLite both release
    the GIL); the first read waits for it."""

    def __init__(self, index: ScoredIndex, vector: np.ndarray) -> None:
        self.index = index
        self.vector = np.asarray(vector, dtype=np.float32)
        self.present: set[int] = set()  # hits found in the database (`top`)
        with index.lock:
            index.sync()  # in the caller's thread: the database is its connection's
            self.count = index.size  # how many vectors the index held
        self.pending: Future[None] | None = product_thread().submit(self.compute_locked)

    def exist(self, row_ids: Iterable[int]) -> None:
        """Rows the caller read from the database for this question (the turn's
        context): as hits they need no second look (`top`)."""
        self.present.update(row_ids)

    def compute_locked(self) -> None:
        with self.index.lock:
            self.compute()

    def ready(self) -> None:
        if self.pending is not None:
            self.pending.result()
            self.pending = None

    def compute(self) -> None:
        """The index's current scores (the caller holds its lock)."""
        index = self.index
        size = index.size
        plain = np.empty(size + 1, dtype=np.float32)
        np.matmul(self.vector, index.matrix[:, :size], out=plain[:size])
        plain[size] = 0.0
        self.plain = plain[:size]
        self.contextual = index.contextual(plain)
        self.ids = index.ids[:size].copy()
        self.removals = index.removals

    def top(self, k: int, min_score: float = -1.0, contextual: bool = False) -> Hits:
        """(id, cosine similarity) of the k nearest above `min_score`, best first;
        `contextual` compares with the contextual vectors instead of the rows' own.
        A hit deleted since it was read is dropped from the index, and the next best
        takes its place."""
        self.ready()
        while True:
            scores = self.contextual if contextual else self.plain
            rows = best_rows(scores, k, min_score)
            hits = [(int(self.ids[row]), float(scores[row])) for row in rows]
            index = self.index
            # Each row is looked up once per query: the similarity branch's hits are
            # mostly the memory search's too.
            unchecked = [i for i, _ in hits if i not in self.present]
            gone = [] if index.rows.reconcile else index.deleted(unchecked)
            self.present.update(i for i in unchecked if i not in gone)
            if not gone:
                return hits
            with index.lock:
                index.remove([i for i in gone if i in index.position])
                index.sync()
                self.compute()

    def scores(self, row_ids: list[int], contextual: bool = False) -> dict[int, float]:
        """The similarity of these rows (those that had a vector) to the query."""
        self.ready()
        with self.index.lock:
            if self.index.removals != self.removals:  # rows moved: read them again
                self.index.sync()
                self.compute()
            rows = [(i, self.index.position.get(i)) for i in row_ids]
        scores = self.contextual if contextual else self.plain
        # A row past the compared ones came after the query, as if it had no vector yet.
        compared = len(self.ids)
        return {i: float(scores[row]) for i, row in rows if row is not None and row < compared}


_product_thread: tuple[int, ThreadPoolExecutor] | None = None
_product_thread_lock = threading.Lock()


def product_thread() -> ThreadPoolExecutor:
    """The process's thread for matrix-vector products (one: the products of
    concurrent requests queue there rather than compete for the cores)."""
    global _product_thread
    with _product_thread_lock:
        # A forked child inherits the executor but not its thread.
        if _product_thread is None or _product_thread[0] != os.getpid():
            _product_thread = (os.getpid(), ThreadPoolExecutor(1, "vector-products"))
        return _product_thread[1]


def best_rows(scores: np.ndarray, k: int, min_score: float) -> np.ndarray:
    """The rows of the k best scores above `min_score`, best first, ties in row order."""
    if k <= 0:
        return np.empty(0, dtype=np.intp)
    rows = np.flatnonzero(scores >= likely_cut(scores, k))
    if len(rows) < k:  # guessed too high: every row is a candidate
        rows = np.arange(len(scores))
    rows = rows[scores[rows] > min_score]
    if len(rows) > k:  # the k best, and any tied with the k-th
        rows = rows[scores[rows] >= np.partition(scores[rows], -k)[-k]]
    return rows[np.lexsort((rows, -scores[rows]))][:k]


def likely_cut(scores: np.ndarray, k: int) -> float:
    """A score that some 4k rows reach, read from every `SAMPLE_STEP`-th: when at
    least k do, the k best are among them, found by one comparison with every
    score instead of a partition of them all (~1.5 ms at 100k rows)."""
    if len(scores) < SAMPLE_STEP * k:
        return -np.inf
    sample = scores[::SAMPLE_STEP]
    place = len(sample) - (k // 8 + 1)  # ~k/8 sampled above it: ~4k of all rows
    return float(np.partition(sample, place)[place])
