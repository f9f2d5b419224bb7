"""The DDL of vector search in PostgreSQL (pgvector): what migrations `memory
0014_pgvector` (SETUP, TEARDOWN) and `memory 0015_event_words` (WORDS_SETUP,
WORDS_TEARDOWN) run, and the check that the server has the extension.

`embedding_vec vector(384)` sits beside the packed float32 `embedding` of events
and memory-file chunks, kept equal to it by a trigger (every write path sets
`embedding`; a corrupt or wrong-length one is cleared for the embedding jobs to
compute again, rather than failing the write), and an HNSW index (cosine) finds
the nearest. The full-text branch reads the stored `search_document` from a
narrow table of its own (WORDS_SETUP).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.db.backends.base.base import BaseDatabaseWrapper

from memory.fulltext import INDEXED_TYPES, KEY_SQL, TEXT_SEARCH_CONFIG, WORDS_TABLE, WORDS_TOTALS
from memory.vectors import EMBEDDING_DIM

CORRUPT = "corrupt vector replaced"  # as memory.vector_index's
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
# 0014 made it with PostgreSQL's 'english' configuration, 0021 with
# TEXT_SEARCH_CONFIG (STEMMING_SETUP).
def search_document(config: str) -> str:
    return (
        f"CASE WHEN event_type IN ({INDEXED_TYPES}) THEN "
        f"setweight(to_tsvector('{config}'::regconfig, {KEY_SQL.format(row=EVENTS_TABLE)}), "
        f"'A') || setweight(to_tsvector('{config}'::regconfig, search_context), 'B') END"
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
    f"GENERATED ALWAYS AS ({search_document('english')}) STORED",
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

# A document's length in words, stopwords included, as FTS5 counts it: its last
# word's position (the context's positions follow the key's).
DOCUMENT_LENGTH = (
    "(SELECT COALESCE(max(p), 0) FROM unnest({document}) AS u, unnest(u.positions) AS p)"
)
# BM25's figures (memory.fulltext.POSTGRES_WORDS; migration 0020): each memory's
# length in words, and per owner and agent how many memories and words, kept by
# the same trigger. An owner's last memory gone takes its totals' row with it.
BM25_FUNCTION = f"""
CREATE OR REPLACE FUNCTION neotask_event_words() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  gone integer;
  added integer;
BEGIN
  IF TG_OP = 'TRUNCATE' THEN
    TRUNCATE {WORDS_TABLE}, {WORDS_TOTALS};
    RETURN NULL;
  END IF;
  IF TG_OP <> 'INSERT' THEN
    DELETE FROM {WORDS_TABLE} WHERE id = OLD.id RETURNING length INTO gone;
    IF gone IS NOT NULL THEN
      UPDATE {WORDS_TOTALS} SET memories = memories - 1, length = length - gone
      WHERE owner_id = OLD.owner_id AND agent = OLD.agent;
      DELETE FROM {WORDS_TOTALS}
      WHERE owner_id = OLD.owner_id AND agent = OLD.agent AND memories <= 0;
    END IF;
  END IF;
  IF TG_OP <> 'DELETE' AND NEW.search_document IS NOT NULL THEN
    added := {DOCUMENT_LENGTH.format(document="NEW.search_document")};
    INSERT INTO {WORDS_TABLE} (id, owner_id, agent, document, length)
    VALUES (NEW.id, NEW.owner_id, NEW.agent, NEW.search_document, added);
    INSERT INTO {WORDS_TOTALS} AS t (owner_id, agent, memories, length)
    VALUES (NEW.owner_id, NEW.agent, 1, added)
    ON CONFLICT (owner_id, agent)
    DO UPDATE SET memories = t.memories + 1, length = t.length + added;
  END IF;
  RETURN NULL;
END
$$
"""
BM25_SETUP = [
    f"ALTER TABLE {WORDS_TABLE} ADD COLUMN IF NOT EXISTS length integer NOT NULL DEFAULT 0",
    f"CREATE TABLE IF NOT EXISTS {WORDS_TOTALS} (owner_id bigint NOT NULL, "
    "agent varchar(64) NOT NULL, memories bigint NOT NULL, length bigint NOT NULL, "
    "PRIMARY KEY (owner_id, agent))",
    BM25_FUNCTION,
    f"UPDATE {WORDS_TABLE} SET length = {DOCUMENT_LENGTH.format(document='document')}",
    f"TRUNCATE {WORDS_TOTALS}",
    f"INSERT INTO {WORDS_TOTALS} (owner_id, agent, memories, length) "
    f"SELECT owner_id, agent, count(*), sum(length) FROM {WORDS_TABLE} GROUP BY owner_id, agent",
]
BM25_TEARDOWN = [
    WORDS_FUNCTION,  # 0015's
    f"DROP TABLE IF EXISTS {WORDS_TOTALS}",
    f"ALTER TABLE {WORDS_TABLE} DROP COLUMN IF EXISTS length",
]

# Words stemmed as SQLite's FTS5 stems them (its `porter` tokenizer), not by
# PostgreSQL's 'english' (Snowball's Porter2): with BM25 in both, the stemmers
# were what still set the profiles apart ("news" is "new" to Porter, not to
# Porter2; memory_eval on our dataset, recall@10 0.901 instead of SQLite's
# 0.915; docs/memory.md). PostgreSQL's Snowball dictionaries include Porter's
# original algorithm; the stopwords stay 'english''s. The stored documents are
# computed again, and the narrow table and its totals rebuilt from them.
STEMMER = "neotask_porter"


def stemming_setup(config: str) -> list[str]:
    """The events' documents (and WORDS_TABLE, WORDS_TOTALS) made with `config`."""
    return [
        f"ALTER TABLE {EVENTS_TABLE} DROP COLUMN IF EXISTS search_document",
        f"ALTER TABLE {EVENTS_TABLE} ADD COLUMN search_document tsvector "
        f"GENERATED ALWAYS AS ({search_document(config)}) STORED",
        f"TRUNCATE {WORDS_TABLE}, {WORDS_TOTALS}",
        f"INSERT INTO {WORDS_TABLE} (id, owner_id, agent, document, length) "
        "SELECT id, owner_id, agent, search_document, "
        f"{DOCUMENT_LENGTH.format(document='search_document')} "
        f"FROM {EVENTS_TABLE} WHERE search_document IS NOT NULL",
        f"INSERT INTO {WORDS_TOTALS} (owner_id, agent, memories, length) "
        f"SELECT owner_id, agent, count(*), sum(length) FROM {WORDS_TABLE} "
        "GROUP BY owner_id, agent",
        f"ANALYZE {WORDS_TABLE}",
    ]


STEMMING_SETUP = [
    f"DROP TEXT SEARCH CONFIGURATION IF EXISTS {TEXT_SEARCH_CONFIG}",
    f"DROP TEXT SEARCH DICTIONARY IF EXISTS {STEMMER}",
    f"CREATE TEXT SEARCH DICTIONARY {STEMMER} "
    "(TEMPLATE = snowball, Language = porter, StopWords = english)",
    f"CREATE TEXT SEARCH CONFIGURATION {TEXT_SEARCH_CONFIG} (COPY = english)",
    f"ALTER TEXT SEARCH CONFIGURATION {TEXT_SEARCH_CONFIG} ALTER MAPPING FOR asciihword, "
    f"asciiword, hword, hword_asciipart, hword_part, word WITH {STEMMER}",
    *stemming_setup(TEXT_SEARCH_CONFIG),
]
STEMMING_TEARDOWN = [
    *stemming_setup("english"),
    f"DROP TEXT SEARCH CONFIGURATION IF EXISTS {TEXT_SEARCH_CONFIG}",
    f"DROP TEXT SEARCH DICTIONARY IF EXISTS {STEMMER}",
]


def on_postgresql(setup: list[str], teardown: list[str]) -> migrations.RunPython:
    """A migration's operation: `setup` run forwards and `teardown` backwards on
    PostgreSQL, nothing on SQLite (whose FTS5 and numpy index keep their own)."""

    def running(statements: list[str]) -> Any:
        def run(apps: Any, schema_editor: Any) -> None:
            if schema_editor.connection.vendor == "postgresql":
                for statement in statements:
                    schema_editor.execute(statement)

        return run

    return migrations.RunPython(running(setup), running(teardown), elidable=False)
