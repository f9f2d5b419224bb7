"""Vector queries in PostgreSQL (pgvector): one owner's agent's nearest rows,
plain or contextual, behind the interface of the numpy index
(memory.vector_index).

Every query is scoped to an owner and an agent. HNSW filters after it searches,
so an owner holding a small share of the rows would get few or no rows from the
graph's first `ef_search` candidates: every query runs with
`hnsw.iterative_scan = relaxed_order`, which keeps scanning until the filter has
let through enough, and re-sorts what it finds (`run`).

Contextual scores (memory.vector_index: an event's vector plus half of each of
its speaker's neighbouring turns in the session) cannot be indexed as such; the
`RESCORED` nearest by plain cosine are re-scored with their neighbours in SQL.
`memory_eval` gave the same figures as the numpy index on both datasets
(docs/memory.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from django.db import connections, transaction

from core.process_cache import ProcessCache
from memory.pgvector.schema import CHUNKS_TABLE, EVENTS_TABLE
from memory.vectors import EMBEDDING_DIM

Hits = list[tuple[int, float]]
NEIGHBOUR_WEIGHT = 0.5  # as memory.vector_index's
RESCORED = 100  # nearest by plain cosine, re-scored by contextual cosine
# Candidates the HNSW scan keeps. The planner takes the HNSW index only for an
# owner of many rows (a small one's are read whole, exactly), and there 100 was
# not enough: bench/pgvector.py's owner of 10 % of 1M events got recall@10 0.89
# at 100, 0.96 at 400, for ~3 ms more (docs/performance.md).
EF_SEARCH = 400
# An owner with fewer rows is compared exactly, whatever the planner's statistics
# say: through HNSW, a small owner's rows are few among the graph's and the
# iterative scan stops at hnsw.max_scan_tuples (20,000) before finding them all.
EXACT_BELOW = 5_000
ITERATIVE_SCAN = "relaxed_order"  # bench/pgvector.py measures "off" too


def as_literal(vector: np.ndarray) -> str:
    """A query vector as pgvector's text form (psycopg has no vector adapter here)."""
    array = np.asarray(vector, dtype=np.float32)
    if array.shape != (EMBEDDING_DIM,) or not np.isfinite(array).all():
        raise ValueError(f"a query vector has {EMBEDDING_DIM} finite values")
    return "[" + ",".join(repr(float(value)) for value in array) + "]"


SCANS = (
    "SELECT set_config('hnsw.iterative_scan', %s, {local}), "
    "set_config('hnsw.ef_search', %s, {local})"
)


def run(sql: str, params: dict[str, Any], using: str = "default") -> list[tuple[Any, ...]]:
    """`sql` with iterative HNSW scans. Set once per connection, for its session
    (a statement and a transaction of its own on every query cost 4 statements
    for 1); within a caller's transaction, in it (SET LOCAL: a rollback would
    undo a session's setting unseen)."""
    connection = connections[using]
    scans = [ITERATIVE_SCAN, str(EF_SEARCH)]
    if connection.in_atomic_block:
        with transaction.atomic(using=using), connection.cursor() as cursor:
            cursor.execute(SCANS.format(local="true"), scans)
            cursor.execute(sql, params)
            return cursor.fetchall()
    with connection.cursor() as cursor:
        # Django's connection object outlives the server's session: a new one
        # (`connection.connection`) has the server's defaults again.
        if getattr(connection, "hnsw_scans", None) != (connection.connection, scans):
            cursor.execute(SCANS.format(local="false"), scans)
            connection.hnsw_scans = (connection.connection, scans)  # type: ignore[attr-defined]
        cursor.execute(sql, params)
        return cursor.fetchall()


# The owner's rows of the agent nearest the query, by cosine, through the HNSW
# index. relaxed_order may return them slightly out of order: the caller sorts.
NEAREST = """
SELECT e.id, e.owner_id, {thread} e.embedding_vec AS v, e.embedding_vec <=> %(q)s AS distance
FROM {table} e
WHERE e.owner_id = %(owner)s AND e.agent = %(agent)s AND e.embedding_vec IS NOT NULL
ORDER BY (e.embedding_vec <=> %(q)s) {exact}LIMIT %(nearest)s
"""
# The same order as an expression no index serves: the owner's rows read and sorted.
EXACT = "+ 0 "
THREAD = "e.session_id, e.event_type, e.speaker,"
# Each row's contextual cosine: with a and b its speaker's turns just before and
# after it in the session (with a vector), the cosine of q to v + w·a + w·b is
# (q·v + w·q·a + w·q·b) / |v + w·a + w·b|, the norm from the six dot products.
CONTEXTUAL = """
SELECT c.id, c.owner_id,
  (inner_product(c.v, %(q)s) + %(w)s * (COALESCE(inner_product(a.v, %(q)s), 0)
    + COALESCE(inner_product(b.v, %(q)s), 0)))
  / GREATEST(sqrt(GREATEST(inner_product(c.v, c.v)
    + %(w)s * %(w)s * (COALESCE(inner_product(a.v, a.v), 0) + COALESCE(inner_product(b.v, b.v), 0))
    + 2 * %(w)s * (COALESCE(inner_product(c.v, a.v), 0) + COALESCE(inner_product(c.v, b.v), 0))
    + 2 * %(w)s * %(w)s * COALESCE(inner_product(a.v, b.v), 0), 0)), 1e-6) AS similarity
FROM {rows} c
LEFT JOIN LATERAL (
  SELECT n.embedding_vec AS v FROM {table} n
  WHERE n.owner_id = %(owner)s AND n.session_id = c.session_id AND n.agent = %(agent)s
    AND n.event_type = c.event_type AND n.speaker = c.speaker AND n.id < c.id
    AND n.embedding_vec IS NOT NULL
  ORDER BY n.id DESC LIMIT 1
) a ON true
LEFT JOIN LATERAL (
  SELECT n.embedding_vec AS v FROM {table} n
  WHERE n.owner_id = %(owner)s AND n.session_id = c.session_id AND n.agent = %(agent)s
    AND n.event_type = c.event_type AND n.speaker = c.speaker AND n.id > c.id
    AND n.embedding_vec IS NOT NULL
  ORDER BY n.id LIMIT 1
) b ON true
"""


# How many rows an owner's agent has, up to EXACT_BELOW, by (table, owner, agent):
# asked twice a turn, it changes the plan only when it crosses EXACT_BELOW, so each
# process asks once a minute. A growing owner is compared exactly up to a minute
# longer than needed (slower, as right); one whose rows were mostly deleted goes
# through HNSW up to a minute longer (memory search may then miss some of them).
ROWS: ProcessCache[int] = ProcessCache(seconds=60)


@dataclass
class PgIndex:
    """The vectors of one owner's agent in one table, in PostgreSQL: the interface
    of memory.vector_index.NumpyIndex (`query`, `search`, `count`)."""

    owner_id: int
    agent: str
    table: str = EVENTS_TABLE

    @property
    def threaded(self) -> bool:
        """Whether rows have speakers' turns around them (events do, chunks do not)."""
        return self.table != CHUNKS_TABLE

    def query(self, vector: np.ndarray) -> PgQuery:
        return PgQuery(self, vector)

    def search(
        self, vector: np.ndarray, k: int, min_score: float = -1.0, contextual: bool = False
    ) -> Hits:
        return self.query(vector).top(k, min_score, contextual)

    def exact(self) -> str:
        """NEAREST's `{exact}`: EXACT for an owner of fewer than EXACT_BELOW rows
        (counted that far only, once a minute per process: `ROWS`)."""
        rows = ROWS.get((self.table, self.owner_id, self.agent), self.rows)
        return EXACT if rows < EXACT_BELOW else ""

    def rows(self) -> int:
        with connections["default"].cursor() as cursor:
            cursor.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM {self.table} WHERE owner_id = %s "
                "AND agent = %s LIMIT %s) AS rows",
                [self.owner_id, self.agent, EXACT_BELOW],
            )
            return int(cursor.fetchone()[0])

    def count(self) -> int:
        with connections["default"].cursor() as cursor:
            cursor.execute(
                f"SELECT count(*) FROM {self.table} WHERE owner_id = %s AND agent = %s "
                "AND embedding_vec IS NOT NULL",
                [self.owner_id, self.agent],
            )
            return int(cursor.fetchone()[0])

    def params(self, vector: str, **more: Any) -> dict[str, Any]:
        return {
            "q": vector,
            "owner": self.owner_id,
            "agent": self.agent,
            "w": NEIGHBOUR_WEIGHT,
            **more,
        }


class PgQuery:
    """One query vector, asked of PostgreSQL on each question (memory.vector_index.
    VectorQuery's interface): nothing is computed until a question is asked."""

    def __init__(self, index: PgIndex, vector: np.ndarray) -> None:
        self.index = index
        self.vector = np.asarray(vector, dtype=np.float32)
        self.literal = as_literal(self.vector)

    def exist(self, row_ids: Iterable[int]) -> None:
        """(The database returns only rows that exist: nothing to note.)"""

    @cached_property
    def count(self) -> int:
        """How many vectors the owner's agent has."""
        return self.index.count()

    def top(self, k: int, min_score: float = -1.0, contextual: bool = False) -> Hits:
        """(id, similarity) of the k nearest above `min_score`, best first, ties by id."""
        if k <= 0:
            return []
        index = self.index
        thread = THREAD if index.threaded else ""
        nearest = NEAREST.format(table=index.table, thread=thread, exact=index.exact())
        if contextual and index.threaded:
            rows = CONTEXTUAL.format(table=index.table, rows="nearest")
            sql = f"WITH nearest AS MATERIALIZED ({nearest}) {rows}"
            found = run(sql, index.params(self.literal, nearest=max(k, RESCORED)))
            hits = [(row[0], float(row[2])) for row in found]
        else:
            found = run(nearest, index.params(self.literal, nearest=k))
            hits = [(row[0], 1.0 - float(row[-1])) for row in found]
        hits.sort(key=lambda hit: (-hit[1], hit[0]))
        return [hit for hit in hits if hit[1] > min_score][:k]

    def scores(self, row_ids: list[int], contextual: bool = False) -> dict[int, float]:
        """The similarity of these rows (those of the owner's agent with a vector)."""
        if not row_ids:
            return {}
        index = self.index
        chosen = (
            f"SELECT e.id, e.owner_id, {THREAD if index.threaded else ''} e.embedding_vec AS v "
            f"FROM {index.table} e WHERE e.id = ANY(%(ids)s) AND e.owner_id = %(owner)s "
            "AND e.agent = %(agent)s AND e.embedding_vec IS NOT NULL"
        )
        params = index.params(self.literal, ids=list(row_ids))
        if contextual and index.threaded:
            rows = CONTEXTUAL.format(table=index.table, rows="chosen")
            found = run(f"WITH chosen AS ({chosen}) {rows}", params)
            return {row[0]: float(row[2]) for row in found}
        found = run(f"SELECT id, inner_product(v, %(q)s) FROM ({chosen}) c", params)
        return {row[0]: float(row[1]) for row in found}
