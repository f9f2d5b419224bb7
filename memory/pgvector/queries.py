"""Vector search in PostgreSQL (pgvector), for the team profile.

On PostgreSQL no process holds vectors: `embedding_vec vector(384)` sits beside
the packed float32 `embedding` of events and memory-file chunks, kept equal to it
by a trigger (every write path sets `embedding`; a corrupt or wrong-length one is
cleared for the embedding jobs to compute again, rather than failing the write),
and an HNSW index (cosine) finds the nearest. Deletion is immediate: a deleted
row is gone from the index too, so nothing like the numpy index's sync or
forgotten-event log is needed. Migration `memory 0014_pgvector` adds the
columns, triggers and indexes; the single-user SQLite profile keeps the
in-process numpy index (memory.vector_index).

Every query is scoped to an owner and an agent. HNSW filters after it searches,
so an owner holding a small share of the rows would get few or no rows from the
graph's first `ef_search` candidates: every query runs with
`hnsw.iterative_scan = relaxed_order`, which keeps scanning until the filter has
let through enough, and re-sorts what it finds.

Contextual scores (memory.vector_index: an event's vector plus half of each of
its speaker's neighbouring turns in the session) cannot be indexed as such; the
`RESCORED` nearest by plain cosine are re-scored with their neighbours in SQL.
`memory_eval` gave the same figures as the numpy index on both datasets
(docs/memory.md). The memory search's two branches and their fusion run as one
statement (`hybrid`), the full-text branch reading the stored `search_document`
from a narrow table of its own (WORDS_SETUP, migration `memory 0015`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from core.process_cache import ProcessCache
from memory import fulltext
from memory.fulltext import INDEXED_TYPES, KEY_SQL, POSTGRES_WORDS, WORDS_TABLE
from memory.vectors import EMBEDDING_DIM

Hits = list[tuple[int, float]]
NEIGHBOUR_WEIGHT = 0.5  # as memory.vector_index's
CORRUPT = "corrupt vector replaced"  # as memory.vector_index's
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
EVENTS_TABLE = "events"
CHUNKS_TABLE = "memory_memorychunk"
# HNSW's build parameters (pgvector's defaults: m 16, ef_construction 64).
HNSW_WITH = "m = 16, ef_construction = 64"


def package_name(connection: BaseDatabaseWrapper) -> str:
    major = connection.cursor().connection.info.server_version // 10000
    return f"postgresql-{major}-pgvector"


def missing_extension(connection: BaseDatabaseWrapper, extension: str = "vector") -> str | None:
    """Why this PostgreSQL server cannot hold the vectors, or None if it can."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = %s", [extension])
        if cursor.fetchone() is not None:
            return None
    return (
        "PostgreSQL has no pgvector extension, which the team profile keeps its memory "
        f"vectors in: install the package {package_name(connection)} on the database "
        "server (docs/deploy.md), then run `manage.py migrate`."
    )


class MissingExtension(RuntimeError):
    pass


def require_extension(connection: BaseDatabaseWrapper) -> None:
    problem = missing_extension(connection)
    if problem is not None:
        raise MissingExtension(problem)


# Packed little-endian float32 → vector, in SQL: each value's IEEE 754 bits taken
# apart (float8 holds every float32 exactly). Not 384 values, or a NaN or an
# infinity (exponent 255): NULL, as if there were no vector. The bytes are read
# out of the TOAST table once (`raw`), not by each get_byte: 0.15 ms a row
# instead of 2-7.
UNPACK_FUNCTION = f"""
CREATE OR REPLACE FUNCTION neotask_unpack_vector(packed bytea) RETURNS vector
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  raw bytea := packed || ''::bytea;
  result vector;
BEGIN
  IF octet_length(raw) <> {EMBEDDING_DIM * 4} THEN
    RETURN NULL;
  END IF;
  SELECT CASE WHEN bool_or(exponent = 255) THEN NULL ELSE
    array_agg(sign * CASE WHEN exponent = 0 THEN mantissa * 2::float8 ^ -149
      WHEN exponent < 255 THEN (mantissa + 8388608) * 2::float8 ^ (exponent - 150) ELSE 0 END
      ORDER BY i)::vector END
  INTO result
  FROM (
    SELECT i, 1 - 2 * (b3 >> 7) AS sign, ((b3 & 127) << 1) | (b2 >> 7) AS exponent,
      ((b2 & 127) << 16) | (b1 << 8) | b0 AS mantissa
    FROM (
      SELECT i, get_byte(raw, i) AS b0, get_byte(raw, i + 1) AS b1,
        get_byte(raw, i + 2) AS b2, get_byte(raw, i + 3) AS b3
      FROM generate_series(0, {EMBEDDING_DIM * 4 - 4}, 4) AS i
    ) AS bytes
  ) AS fields;
  RETURN result;
END
$$
"""
# A vector that cannot be read is cleared, for the embedding jobs to compute
# again (as the numpy index does: memory.vector_index.CORRUPT).
TRIGGER_FUNCTION = f"""
CREATE OR REPLACE FUNCTION neotask_embedding_vec() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.embedding_vec := neotask_unpack_vector(NEW.embedding);
  IF NEW.embedding IS NOT NULL AND NEW.embedding_vec IS NULL THEN
    NEW.embedding := NULL;
    NEW.embedded_at := NULL;
    NEW.embedding_error := '{CORRUPT}';
  END IF;
  RETURN NEW;
END
$$
"""
# The full-text document of an event (memory.fulltext: its key weighs A, its
# context B), stored, so ranking reads it instead of parsing each match's text.
SEARCH_DOCUMENT = (
    f"CASE WHEN event_type IN ({INDEXED_TYPES}) THEN "
    f"setweight(to_tsvector('english'::regconfig, {KEY_SQL.format(row=EVENTS_TABLE)}), 'A') || "
    "setweight(to_tsvector('english'::regconfig, search_context), 'B') END"
)


def vector_setup(table: str) -> list[str]:
    return [
        f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS embedding_vec vector({EMBEDDING_DIM})",
        f"DROP TRIGGER IF EXISTS {table}_embedding_vec ON {table}",
        f"CREATE TRIGGER {table}_embedding_vec BEFORE INSERT OR UPDATE OF embedding ON {table} "
        "FOR EACH ROW EXECUTE FUNCTION neotask_embedding_vec()",
        # The backfill (~0.25 ms a row), before the index: one build, not N inserts.
        f"UPDATE {table} SET embedding_vec = neotask_unpack_vector(embedding) "
        "WHERE embedding IS NOT NULL",
        f"UPDATE {table} SET embedding = NULL, embedded_at = NULL, embedding_error = '{CORRUPT}' "
        "WHERE embedding IS NOT NULL AND embedding_vec IS NULL",
        f"CREATE INDEX IF NOT EXISTS {table}_embedding_hnsw ON {table} "
        f"USING hnsw (embedding_vec vector_cosine_ops) WITH ({HNSW_WITH})",
    ]


SETUP = [
    "CREATE EXTENSION IF NOT EXISTS vector",
    UNPACK_FUNCTION,
    TRIGGER_FUNCTION,
    *vector_setup(EVENTS_TABLE),
    *vector_setup(CHUNKS_TABLE),
    f"ALTER TABLE {EVENTS_TABLE} ADD COLUMN IF NOT EXISTS search_document tsvector "
    f"GENERATED ALWAYS AS ({SEARCH_DOCUMENT}) STORED",
    "DROP INDEX IF EXISTS events_search_document",  # memory.fulltext's expression index
    f"CREATE INDEX IF NOT EXISTS events_search_document_stored ON {EVENTS_TABLE} "
    "USING GIN (search_document) WHERE search_document IS NOT NULL",
    # An owner's memories newest first: what the full-text half ranks of many
    # matches (0015 moves both indexes to WORDS_TABLE).
    f"CREATE INDEX IF NOT EXISTS events_owner_memories ON {EVENTS_TABLE} "
    "(owner_id, agent, id) WHERE search_document IS NOT NULL",
]
TEARDOWN = [
    *(
        statement
        for table in (EVENTS_TABLE, CHUNKS_TABLE)
        for statement in (
            f"DROP TRIGGER IF EXISTS {table}_embedding_vec ON {table}",
            f"ALTER TABLE {table} DROP COLUMN IF EXISTS embedding_vec",
        )
    ),
    f"ALTER TABLE {EVENTS_TABLE} DROP COLUMN IF EXISTS search_document",
    "DROP FUNCTION IF EXISTS neotask_embedding_vec()",
    "DROP FUNCTION IF EXISTS neotask_unpack_vector(bytea)",
]

# The full-text half's narrow table (memory.fulltext.POSTGRES_WORDS): each
# memory's id, owner, agent and document, kept equal to the events by triggers
# (every write, delete and truncate of events), so no write path knows of it.
# The events' search_document stays the one place the document is computed.
WORDS_FUNCTION = f"""
CREATE OR REPLACE FUNCTION neotask_event_words() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'TRUNCATE' THEN
    TRUNCATE {WORDS_TABLE};
    RETURN NULL;
  END IF;
  IF TG_OP <> 'INSERT' THEN
    DELETE FROM {WORDS_TABLE} WHERE id = OLD.id;
  END IF;
  IF TG_OP <> 'DELETE' AND NEW.search_document IS NOT NULL THEN
    INSERT INTO {WORDS_TABLE} (id, owner_id, agent, document)
    VALUES (NEW.id, NEW.owner_id, NEW.agent, NEW.search_document);
  END IF;
  RETURN NULL;
END
$$
"""
WORDS_SETUP = [
    f"CREATE TABLE IF NOT EXISTS {WORDS_TABLE} (id bigint PRIMARY KEY, "
    "owner_id bigint NOT NULL, agent varchar(64) NOT NULL, document tsvector NOT NULL)",
    WORDS_FUNCTION,
    f"DROP TRIGGER IF EXISTS events_words ON {EVENTS_TABLE}",
    f"CREATE TRIGGER events_words AFTER INSERT OR DELETE OR UPDATE OF text, search_key, "
    f"search_context, event_type, owner_id, agent ON {EVENTS_TABLE} "
    "FOR EACH ROW EXECUTE FUNCTION neotask_event_words()",
    f"DROP TRIGGER IF EXISTS events_words_truncate ON {EVENTS_TABLE}",
    f"CREATE TRIGGER events_words_truncate AFTER TRUNCATE ON {EVENTS_TABLE} "
    "FOR EACH STATEMENT EXECUTE FUNCTION neotask_event_words()",
    f"TRUNCATE {WORDS_TABLE}",
    f"INSERT INTO {WORDS_TABLE} (id, owner_id, agent, document) SELECT id, owner_id, agent, "
    f"search_document FROM {EVENTS_TABLE} WHERE search_document IS NOT NULL",
    f"CREATE INDEX IF NOT EXISTS {WORDS_TABLE}_document ON {WORDS_TABLE} USING GIN (document)",
    # An owner's memories newest first: what POSTGRES_WORDS ranks of many matches.
    f"CREATE INDEX IF NOT EXISTS {WORDS_TABLE}_owner ON {WORDS_TABLE} (owner_id, agent, id)",
    f"ANALYZE {WORDS_TABLE}",  # the planner's first plans (p50 96 ms instead of 40 without)
    # The events' own full-text indexes (0014's), read no more.
    "DROP INDEX IF EXISTS events_search_document_stored",
    "DROP INDEX IF EXISTS events_owner_memories",
]
WORDS_TEARDOWN = [
    f"DROP TRIGGER IF EXISTS events_words ON {EVENTS_TABLE}",
    f"DROP TRIGGER IF EXISTS events_words_truncate ON {EVENTS_TABLE}",
    "DROP FUNCTION IF EXISTS neotask_event_words()",
    f"DROP TABLE IF EXISTS {WORDS_TABLE}",
    *SETUP[-2:],  # 0014's indexes on the events
]


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


# The memory search (memory.search) in one statement: the nearest by plain cosine
# re-scored by contextual cosine, the full-text matches, and the fusion of both.
# `vector` holds the best `candidates` of the nearest plus every word match with a
# vector (numpy's top plus `scores` of the words' finds); the fusion is
# memory.search.fuse's, a row found by words alone scored by them alone.
HYBRID = """
WITH nearest AS MATERIALIZED ({nearest}),
words AS MATERIALIZED ({words}),
rescored AS MATERIALIZED ({contextual}),
vector AS (
  (SELECT id, owner_id, similarity FROM rescored
   WHERE id IN (SELECT id FROM nearest) ORDER BY similarity DESC, id LIMIT %(candidates)s)
  UNION
  SELECT id, owner_id, similarity FROM rescored WHERE id IN (SELECT id FROM words)
),
bounds AS (
  SELECT min(similarity) AS low, COALESCE(NULLIF(max(similarity) - min(similarity), 0), 1)
    AS spread, count(*) AS found FROM vector
),
best AS (
  SELECT COALESCE(NULLIF(max(rank), 0), 1) AS best, count(*) AS found FROM words
)
SELECT COALESCE(v.id, w.id) AS id, v.similarity, w.rank,
  CASE
    WHEN best.found = 0 THEN v.similarity
    WHEN bounds.found = 0 THEN w.rank
    WHEN v.id IS NULL THEN w.rank / best.best
    ELSE %(vector_weight)s * (v.similarity - bounds.low) / bounds.spread
      + (1 - %(vector_weight)s) * COALESCE(w.rank, 0) / best.best
  END AS fused
FROM vector v
FULL JOIN words w ON w.id = v.id AND w.owner_id = v.owner_id
CROSS JOIN bounds CROSS JOIN best
ORDER BY fused DESC, id
"""


@dataclass
class Fused:
    """The memory search's finds: event id → score, of each branch and fused, best first."""

    vector: dict[int, float]
    lexical: dict[int, float]
    fused: dict[int, float]


def hybrid(
    index: PgIndex, words: list[str], vector: np.ndarray, candidates: int, vector_weight: float
) -> Fused:
    found = Fused({}, {}, {})
    for row_id, similarity, rank, fused in run(
        *hybrid_statement(index, words, vector, candidates, vector_weight)
    ):
        if similarity is not None:
            found.vector[row_id] = float(similarity)
        if rank is not None:
            found.lexical[row_id] = float(rank)
        found.fused[row_id] = float(fused)
    return found


def hybrid_statement(
    index: PgIndex, words: list[str], vector: np.ndarray, candidates: int, vector_weight: float
) -> tuple[str, dict[str, Any]]:
    table = index.table
    fields = "id, owner_id, session_id, event_type, speaker, v"
    rows = (
        f"(SELECT {fields} FROM nearest UNION ALL SELECT {fields} FROM words "
        "WHERE v IS NOT NULL AND id NOT IN (SELECT id FROM nearest))"
    )
    sql = HYBRID.format(
        nearest=NEAREST.format(table=table, thread=THREAD, exact=index.exact()),
        words=POSTGRES_WORDS.format(table=table),
        contextual=CONTEXTUAL.format(table=table, rows=rows),
    )
    params = index.params(
        as_literal(vector),
        nearest=max(candidates, RESCORED),
        searched=bool(words),
        words=" | ".join(words),
        candidates=candidates,
        scored=fulltext.SCORED_MATCHES,
        vector_weight=vector_weight,
    )
    return sql, params
