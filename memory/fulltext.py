"""Full-text search over the event log, in the database: SQLite FTS5 or
PostgreSQL's text search, whichever Neotask runs on.

The index is kept by the database itself: FTS5 triggers, (re)installed after
every `migrate` so that a migration that rebuilds the events table cannot leave
it behind; on PostgreSQL a stored tsvector column and its GIN index
(memory.pgvector, migration 0014_pgvector).
"""

from __future__ import annotations

import re
from typing import Any

from django.db import connections

from memory.models import EventType

WORD = re.compile(r"\w+", re.UNICODE)
MAX_TERMS = 16
# Words too common to say anything about a memory; searching for them only
# makes the database rank thousands of rows.
STOPWORDS = frozenset(
    (
        "a an and are as at be but by did do does for from had has have he her his how i if in "
        "is it its me my no not of on or our she so that the their them then there they this "
        "to was we were what when where which who whom why will with would you your"
    ).split()
)

# An event is matched by its key (or, before it has one, its text) and by its
# context, the previous turn, which counts for less (memory.search_keys). Only what
# memory search returns is indexed.
KEY_SQL = "COALESCE(NULLIF({row}.search_key, ''), {row}.text)"
CONTEXT_WEIGHT = 0.5
INDEXED_TYPES = ", ".join(f"'{t}'" for t in EventType.RECALLABLE)
# A word in more than this share of the owner's memories says little (its BM25
# weight is small) and makes the database score tens of thousands of rows:
# memory_bench's lexical branch went from ~50 to ~10 ms at 100k events, and
# memory_eval lost nothing at 20 % on either dataset (0.10 started to cost).
COMMON_SHARE = 0.2
COMMON_MIN = 200  # ...but small memories are searched by every word
# And at most this many matches are ranked (~1 µs each), and words are counted
# only this far: in a large memory the most common of the remaining words go
# first, and the rarest, which always stays, is ranked among its newest matches
# if even it has more. memory_bench's lexical branch at 100k events (p50 / p95):
# 10 / 28 ms before (10,000, the rarest word ranked whole, the scope token in
# BM25's query), 4.7 / 8.6 ms now. memory_eval's conversations (at most ~700
# turns) never reach it.
SCORED_MATCHES = 3_000
# PostgreSQL's BM25 reads each ranked match's words (unnest: ~5 µs a match, where
# ts_rank_cd took ~2.5), and leaves no common word out as SQLite does: it ranks
# the newest 1,000. The lexical SQL at 100,000 generated events (p50 / p95, one
# sitting): ts_rank_cd over 3,000 7.4 / 9.4 ms, BM25 over 3,000 16.6 / 20.3,
# BM25 over 1,000 6.4 / 7.7. memory_eval's conversations never reach either.
POSTGRES_SCORED_MATCHES = 1_000

# SQLite: contentless (content=''), because the indexed key is an expression, not
# a column (the triggers hand FTS5 the old values to delete). A third column holds
# one token naming the event's owner and agent, so that the owner's matches are
# found and ranked inside the index, never reading another's rows.
SQLITE_TABLE = "events_search"
SCOPE_SQL = "'s' || {row}.owner_id || 'a' || hex({row}.agent)"
_INSERT = (
    f"INSERT INTO {SQLITE_TABLE}(rowid, key, context, scope) VALUES "
    f"(new.id, {KEY_SQL.format(row='new')}, new.search_context, {SCOPE_SQL.format(row='new')});"
)
_DELETE = (
    f"INSERT INTO {SQLITE_TABLE}({SQLITE_TABLE}, rowid, key, context, scope) VALUES "
    f"('delete', old.id, {KEY_SQL.format(row='old')}, old.search_context, "
    f"{SCOPE_SQL.format(row='old')});"
)
SQLITE_SETUP = [
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {SQLITE_TABLE} USING fts5("
    "key, context, scope, content='', tokenize='porter unicode61')",
    f"CREATE TRIGGER IF NOT EXISTS {SQLITE_TABLE}_insert AFTER INSERT ON events "
    f"WHEN new.event_type IN ({INDEXED_TYPES}) BEGIN {_INSERT} END",
    f"CREATE TRIGGER IF NOT EXISTS {SQLITE_TABLE}_delete AFTER DELETE ON events "
    f"WHEN old.event_type IN ({INDEXED_TYPES}) BEGIN {_DELETE} END",
    f"CREATE TRIGGER IF NOT EXISTS {SQLITE_TABLE}_update "
    "AFTER UPDATE OF text, search_key, search_context, owner_id, agent ON events "
    f"WHEN new.event_type IN ({INDEXED_TYPES}) BEGIN {_DELETE} {_INSERT} END",
]
SQLITE_REBUILD = [
    f"INSERT INTO {SQLITE_TABLE}({SQLITE_TABLE}) VALUES ('delete-all')",
    f"INSERT INTO {SQLITE_TABLE}(rowid, key, context, scope) "
    f"SELECT id, {KEY_SQL.format(row='events')}, search_context, {SCOPE_SQL.format(row='events')} "
    f"FROM events WHERE event_type IN ({INDEXED_TYPES})",
]
# Earlier indexes: the event's text alone, then without the scope column.
SQLITE_RETIRED = [
    "DROP TRIGGER IF EXISTS events_fts_insert",
    "DROP TRIGGER IF EXISTS events_fts_delete",
    "DROP TRIGGER IF EXISTS events_fts_update",
    "DROP TABLE IF EXISTS events_fts",
]


# PostgreSQL: the owner's memories matching the query's words, best first by BM25
# as SQLite's FTS5 computes it (BM25_K1, BM25_B; a word's frequency in a memory
# counts its key's occurrences 1 and its context's CONTEXT_WEIGHT, the memory's
# length all its words; idf = ln((N - n + 0.5) / (n + 0.5)), at least 1e-6), over
# the owner's agent's memories (N and the lengths kept by the write trigger; n
# counted among the matches ranked, exact up to POSTGRES_SCORED_MATCHES, a floor
# beyond): ts_rank_cd, which it replaced, is no BM25 and lost 0.06 of recall@10
# to SQLite on LoCoMo (docs/memory.md). Ties are broken by id so that the same
# query always finds the same rows. As on SQLite, only the newest
# POSTGRES_SCORED_MATCHES matches are ranked: a query's common words match most of a
# large memory (bench/pgvector.py's user of 100,000 events: p95 216 ms ranking
# them all). The matches are found and ranked in WORDS_TABLE, a narrow copy of
# each memory's document (memory.pgvector): an events row holds two copies of
# its vector, about six rows to a page, and walking a large owner's matches there
# cost a page each. Only the best `candidates` are read from the events.
WORDS_TABLE = "event_words"
# The documents' and queries' text search configuration: 'english' with FTS5's
# stemmer (memory.pgvector.schema.STEMMING_SETUP).
TEXT_SEARCH_CONFIG = "neotask_english"
# Per owner and agent: how many memories and how many words in all, for BM25's N and
# average length (kept by the same trigger as WORDS_TABLE: memory.pgvector.schema).
WORDS_TOTALS = "event_words_totals"
BM25_K1, BM25_B = 1.2, 0.75
POSTGRES_WORDS = f"""
SELECT e.id, e.owner_id, e.session_id, e.event_type, e.speaker, e.embedding_vec AS v, m.rank
FROM (
  WITH terms AS MATERIALIZED (
    SELECT array_agg(lexeme) AS lexemes FROM unnest(to_tsvector('{TEXT_SEARCH_CONFIG}', %(text)s))
  ),
  matches AS MATERIALIZED (
    SELECT w.id, w.document, w.length
    FROM {WORDS_TABLE} w, to_tsquery('{TEXT_SEARCH_CONFIG}', %(words)s) query
    WHERE %(searched)s AND w.document @@ query AND w.owner_id = %(owner)s
      AND w.agent = %(agent)s
    ORDER BY w.id DESC LIMIT %(scored)s
  ),
  corpus AS (
    SELECT memories, GREATEST(length::float8 / GREATEST(memories, 1), 1) AS avgdl
    FROM {WORDS_TOTALS} WHERE owner_id = %(owner)s AND agent = %(agent)s
  ),
  -- float8 throughout: numeric arithmetic (PostgreSQL's for literals) cost 10 ms.
  hits AS MATERIALIZED (
    SELECT m.id, u.lexeme, m.length::float8 AS dl,
      cardinality(u.weights) - (1 - {CONTEXT_WEIGHT})::float8
        * (cardinality(u.weights) - cardinality(array_positions(u.weights, 'A'))) AS tf
    FROM matches m, unnest(m.document) u, terms t
    WHERE u.lexeme = ANY (t.lexemes)
  ),
  found AS (SELECT lexeme, count(*)::float8 AS n FROM hits GROUP BY lexeme),
  ranked AS (
    SELECT h.id, sum(
      GREATEST(ln((c.memories - f.n + 0.5::float8) / (f.n + 0.5::float8)), 1e-6::float8)
      * h.tf * {BM25_K1 + 1}::float8
      / (h.tf + {BM25_K1}::float8 * ({1 - BM25_B}::float8 + {BM25_B}::float8 * h.dl / c.avgdl))
    ) AS rank
    FROM hits h JOIN found f USING (lexeme) CROSS JOIN corpus c
    GROUP BY h.id
  )
  SELECT id, rank FROM ranked ORDER BY rank DESC, id LIMIT %(candidates)s
) AS m
JOIN {{table}} e ON e.id = m.id AND e.owner_id = %(owner)s
ORDER BY m.rank DESC, m.id
"""

# Earlier PostgreSQL indexes (expressions, now a stored column: memory.pgvector).
POSTGRES_RETIRED = [
    "DROP INDEX IF EXISTS events_text_search",
    "DROP INDEX IF EXISTS events_search_document",
]


def ensure_index(using: str = "default") -> None:
    connection = connections[using]
    with connection.cursor() as cursor:
        columns = {c.name for c in connection.introspection.get_table_description(cursor, "events")}
        if "search_key" not in columns:
            return  # migrated back before keys existed: nothing to index them by
        if connection.vendor == "sqlite":
            cursor.execute(
                "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name LIKE %s",
                [f"{SQLITE_TABLE}_%"],
            )
            complete = cursor.fetchone()[0] == 3
            cursor.execute(
                "SELECT count(*) FROM sqlite_master WHERE name = %s AND sql LIKE %s",
                [SQLITE_TABLE, "%scope%"],
            )
            if cursor.fetchone()[0] == 0:  # absent, or an earlier version's
                complete = False
                cursor.execute(f"DROP TABLE IF EXISTS {SQLITE_TABLE}")
            if not complete:
                for trigger in ("insert", "delete", "update"):
                    cursor.execute(f"DROP TRIGGER IF EXISTS {SQLITE_TABLE}_{trigger}")
            for statement in [*SQLITE_RETIRED, *SQLITE_SETUP]:
                cursor.execute(statement)
            if not complete:
                # Triggers were missing (new index, or a rebuilt table): rows
                # written meanwhile are not indexed yet.
                for statement in SQLITE_REBUILD:
                    cursor.execute(statement)
        elif connection.vendor == "postgresql":
            for statement in POSTGRES_RETIRED:
                cursor.execute(statement)


def scope_token(owner_id: int, agent: str) -> str:
    """What SCOPE_SQL gives for this owner and agent (SQLite's hex() is of the UTF-8 bytes)."""
    return f"s{owner_id}a{agent.encode().hex().upper()}"


def terms(query: str) -> list[str]:
    words = [w.lower() for w in WORD.findall(query)]
    seen: dict[str, None] = {}
    for word in words:
        if word not in STOPWORDS and len(word) > 1:
            seen.setdefault(word)
    return list(seen)[:MAX_TERMS]


def quoted(word: str) -> str:
    """A word as an FTS5 string: the user's text is never FTS5 query syntax."""
    return '"' + word.replace('"', '""') + '"'


def search(
    owner_id: int, agent: str, query: str, limit: int, memories: int | None = None
) -> list[tuple[int, float]]:
    """(event id, score) of the owner's memories (memory types) best first; the
    score grows with relevance. `memories`, about how many the owner has, lets
    the words common to most of them be left out (COMMON_SHARE)."""
    words = terms(query)
    if not words or limit <= 0:
        return []
    connection = connections["default"]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            return sqlite_search(cursor, scope_token(owner_id, agent), words, limit, memories)
        if connection.vendor == "postgresql":
            # The memory search's full-text half (memory.pgvector.fused.hybrid), alone.
            cursor.execute(
                f"SELECT id, rank FROM ({POSTGRES_WORDS.format(table='events')}) AS words",
                {
                    "words": " | ".join(words),
                    "text": " ".join(words),
                    "searched": True,
                    "owner": owner_id,
                    "agent": agent,
                    "candidates": limit,
                    "scored": POSTGRES_SCORED_MATCHES,
                },
            )
            return [(row[0], float(row[1])) for row in cursor.fetchall()]
        return []


def sqlite_search(
    cursor: Any, scope_token: str, words: list[str], limit: int, memories: int | None
) -> list[tuple[int, float]]:
    scope = f"scope:{quoted(scope_token)}"
    newest: list[int] = []  # the oldest match ranked, when not all are
    if memories is not None:
        matches = None  # a single word is searched whatever its count
        if len(words) > 1:
            most = max(COMMON_MIN, int(COMMON_SHARE * memories))
            words, matches = uncommon(cursor, scope, words, most)
        if matches is None or matches > SCORED_MATCHES:
            newest = oldest_ranked(cursor, f"{scope} AND ({any_of(words)})")
    since = "AND rowid >= %s " if newest else ""
    weights = f"{SQLITE_TABLE}, 1.0, {CONTEXT_WEIGHT}, 0.0"
    # The owner's matches are ranked as a set of rows, not with the scope token in
    # the ranked query: BM25 first counts the rows of every word of its query, and
    # the scope token is in every row of the owner (~4 ms at 100k events). The
    # scope's column weighs 0, so the scores are the same. Other owners' matches
    # are read and dropped: on the one-person profile, there are none.
    cursor.execute(
        f"SELECT rowid, -bm25({weights}) FROM {SQLITE_TABLE} WHERE {SQLITE_TABLE} MATCH %s "
        f"{since}AND +rowid IN (SELECT rowid FROM {SQLITE_TABLE} WHERE {SQLITE_TABLE} "
        f"MATCH %s {since}) ORDER BY bm25({weights}) LIMIT %s",
        [any_of(words), *newest, f"{scope} AND ({any_of(words)})", *newest, limit],
    )
    return [(row[0], float(row[1])) for row in cursor.fetchall()]


def any_of(words: list[str]) -> str:
    return " OR ".join(quoted(word) for word in words)


def oldest_ranked(cursor: Any, match: str) -> list[int]:
    """The oldest of the newest SCORED_MATCHES matches, if there are more."""
    cursor.execute(
        f"SELECT rowid FROM {SQLITE_TABLE} WHERE {SQLITE_TABLE} MATCH %s "
        "ORDER BY rowid DESC LIMIT 1 OFFSET %s",
        [match, SCORED_MATCHES - 1],
    )
    return [row[0] for row in cursor.fetchall()]


def uncommon(cursor: Any, scope: str, words: list[str], most: int) -> tuple[list[str], int]:
    """The words found in at most `most` of the scope's events, rarest first while
    their matches stay within SCORED_MATCHES; the rarest word if every one is
    common (counting stops past either bound: of words past it, the first).
    And how many matches they have."""
    count = (
        f"(SELECT count(*) FROM (SELECT 1 FROM {SQLITE_TABLE} WHERE {SQLITE_TABLE} "
        "MATCH %s LIMIT %s))"
    )
    enough = min(most, SCORED_MATCHES) + 1
    cursor.execute(  # one statement for all the words
        "SELECT " + ", ".join([count] * len(words)),
        [value for word in words for value in (f"{scope} AND {quoted(word)}", enough)],
    )
    counts = dict(zip(words, cursor.fetchone(), strict=True))
    by_rarity = sorted(words, key=lambda word: counts[word])
    kept, matches = {by_rarity[0]}, counts[by_rarity[0]]
    for word in by_rarity[1:]:
        if counts[word] > most or matches + counts[word] > SCORED_MATCHES:
            break
        kept.add(word)
        matches += counts[word]
    return [word for word in words if word in kept], matches


def install_after_migrate(sender: Any, using: str = "default", **kwargs: Any) -> None:
    ensure_index(using)
