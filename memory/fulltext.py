"""Full-text search over the event log, in the database: SQLite FTS5 or
PostgreSQL's text search, whichever Neotask runs on.

The index is kept by the database itself (FTS5 triggers; a GIN expression
index on PostgreSQL) and (re)installed after every `migrate`, so a migration
that rebuilds the events table cannot leave it behind.
"""

from __future__ import annotations

import re
from typing import Any

from django.db import connections

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
# context, the previous turn, which counts for less (memory.keys).
KEY_SQL = "COALESCE(NULLIF({row}.search_key, ''), {row}.text)"
CONTEXT_WEIGHT = 0.5

# Contentless (content=''): the indexed key is an expression, not a column, so
# FTS5 cannot read it back from the table; the triggers hand it the old values
# to delete.
SQLITE_TABLE = "events_search"
SQLITE_SETUP = [
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {SQLITE_TABLE} USING fts5("
    "key, context, content='', tokenize='porter unicode61')",
    f"CREATE TRIGGER IF NOT EXISTS {SQLITE_TABLE}_insert AFTER INSERT ON events BEGIN "
    f"INSERT INTO {SQLITE_TABLE}(rowid, key, context) "
    f"VALUES (new.id, {KEY_SQL.format(row='new')}, new.search_context); END",
    f"CREATE TRIGGER IF NOT EXISTS {SQLITE_TABLE}_delete AFTER DELETE ON events BEGIN "
    f"INSERT INTO {SQLITE_TABLE}({SQLITE_TABLE}, rowid, key, context) "
    f"VALUES ('delete', old.id, {KEY_SQL.format(row='old')}, old.search_context); END",
    f"CREATE TRIGGER IF NOT EXISTS {SQLITE_TABLE}_update "
    f"AFTER UPDATE OF text, search_key, search_context ON events BEGIN "
    f"INSERT INTO {SQLITE_TABLE}({SQLITE_TABLE}, rowid, key, context) "
    f"VALUES ('delete', old.id, {KEY_SQL.format(row='old')}, old.search_context); "
    f"INSERT INTO {SQLITE_TABLE}(rowid, key, context) "
    f"VALUES (new.id, {KEY_SQL.format(row='new')}, new.search_context); END",
]
SQLITE_REBUILD = [
    f"INSERT INTO {SQLITE_TABLE}({SQLITE_TABLE}) VALUES ('delete-all')",
    f"INSERT INTO {SQLITE_TABLE}(rowid, key, context) "
    f"SELECT id, {KEY_SQL.format(row='events')}, search_context FROM events",
]
# The index of the first release: the event's text alone.
SQLITE_RETIRED = [
    "DROP TRIGGER IF EXISTS events_fts_insert",
    "DROP TRIGGER IF EXISTS events_fts_delete",
    "DROP TRIGGER IF EXISTS events_fts_update",
    "DROP TABLE IF EXISTS events_fts",
]


def postgres_document(row: str) -> str:
    """The weighted text search document of an event (key A, context B)."""
    return (
        f"(setweight(to_tsvector('english', {KEY_SQL.format(row=row)}), 'A') || "
        f"setweight(to_tsvector('english', {row}.search_context), 'B'))"
    )


POSTGRES_SETUP = [
    "DROP INDEX IF EXISTS events_text_search",
    "CREATE INDEX IF NOT EXISTS events_search_document ON events "
    f"USING GIN ({postgres_document('events')})",
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
            for statement in [*SQLITE_RETIRED, *SQLITE_SETUP]:
                cursor.execute(statement)
            if not complete:
                # Triggers were missing (new index, or a rebuilt table): rows
                # written meanwhile are not indexed yet.
                for statement in SQLITE_REBUILD:
                    cursor.execute(statement)
        elif connection.vendor == "postgresql":
            for statement in POSTGRES_SETUP:
                cursor.execute(statement)


def terms(query: str) -> list[str]:
    words = [w.lower() for w in WORD.findall(query)]
    seen: dict[str, None] = {}
    for word in words:
        if word not in STOPWORDS and len(word) > 1:
            seen.setdefault(word)
    return list(seen)[:MAX_TERMS]


def search(
    owner_id: int,
    agent: str,
    query: str,
    event_types: list[str],
    limit: int,
    only_ids: list[int] | None = None,
) -> list[tuple[int, float]]:
    """(event id, score) best first; the score grows with relevance.
    `only_ids` restricts the search to those events."""
    words = terms(query)
    if not words or limit <= 0 or only_ids == []:
        return []
    connection = connections["default"]
    types = ", ".join(["%s"] * len(event_types))
    restrict, restrict_params = "", []
    if only_ids is not None:
        restrict = f" AND e.id IN ({', '.join(['%s'] * len(only_ids))})"
        restrict_params = list(only_ids)
    params: list[Any]
    if connection.vendor == "sqlite":
        # Each word quoted: the user's text is never FTS5 query syntax.
        match = " OR ".join('"' + word.replace('"', '""') + '"' for word in words)
        sql = (
            f"SELECT e.id, -bm25({SQLITE_TABLE}, 1.0, {CONTEXT_WEIGHT}) FROM {SQLITE_TABLE} "
            f"JOIN events e ON e.id = {SQLITE_TABLE}.rowid WHERE {SQLITE_TABLE} MATCH %s "
            f"AND e.owner_id = %s AND e.agent = %s AND e.event_type IN ({types}){restrict} "
            f"ORDER BY bm25({SQLITE_TABLE}, 1.0, {CONTEXT_WEIGHT}) LIMIT %s"
        )
        params = [match, owner_id, agent, *event_types, *restrict_params, limit]
    elif connection.vendor == "postgresql":
        # Weights {D, C, B, A}: the key (A) counts fully, the context (B) as much
        # as in SQLite.
        document = postgres_document("e")
        sql = (
            f"SELECT e.id, ts_rank_cd('{{0, 0, {CONTEXT_WEIGHT}, 1}}', {document}, q) AS rank "
            "FROM events e, to_tsquery('english', %s) q "
            f"WHERE {document} @@ q AND e.owner_id = %s AND e.agent = %s "
            f"AND e.event_type IN ({types}){restrict} ORDER BY rank DESC LIMIT %s"
        )
        params = [" | ".join(words), owner_id, agent, *event_types, *restrict_params, limit]
    else:
        return []
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(row[0], float(row[1])) for row in cursor.fetchall()]


def install_after_migrate(sender: Any, using: str = "default", **kwargs: Any) -> None:
    ensure_index(using)
