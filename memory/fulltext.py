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

SQLITE_SETUP = [
    "CREATE VIRTUAL TABLE IF NOT EXISTS events_fts USING fts5("
    "text, content='events', content_rowid='id', tokenize='porter unicode61')",
    "CREATE TRIGGER IF NOT EXISTS events_fts_insert AFTER INSERT ON events BEGIN "
    "INSERT INTO events_fts(rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER IF NOT EXISTS events_fts_delete AFTER DELETE ON events BEGIN "
    "INSERT INTO events_fts(events_fts, rowid, text) VALUES ('delete', old.id, old.text); END",
    "CREATE TRIGGER IF NOT EXISTS events_fts_update AFTER UPDATE OF text ON events BEGIN "
    "INSERT INTO events_fts(events_fts, rowid, text) VALUES ('delete', old.id, old.text); "
    "INSERT INTO events_fts(rowid, text) VALUES (new.id, new.text); END",
]
POSTGRES_SETUP = [
    "CREATE INDEX IF NOT EXISTS events_text_search ON events "
    "USING GIN (to_tsvector('english', text))",
]


def ensure_index(using: str = "default") -> None:
    connection = connections[using]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name LIKE "
                "'events_fts_%%'"
            )
            complete = cursor.fetchone()[0] == 3
            for statement in SQLITE_SETUP:
                cursor.execute(statement)
            if not complete:
                # Triggers were missing (new index, or a rebuilt table): rows
                # written meanwhile are not indexed yet.
                cursor.execute("INSERT INTO events_fts(events_fts) VALUES ('rebuild')")
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
            "SELECT e.id, -bm25(events_fts) FROM events_fts JOIN events e "
            "ON e.id = events_fts.rowid WHERE events_fts MATCH %s AND e.owner_id = %s "
            f"AND e.agent = %s AND e.event_type IN ({types}){restrict} "
            "ORDER BY bm25(events_fts) LIMIT %s"
        )
        params = [match, owner_id, agent, *event_types, *restrict_params, limit]
    elif connection.vendor == "postgresql":
        sql = (
            "SELECT e.id, ts_rank_cd(to_tsvector('english', e.text), q) AS rank "
            "FROM events e, to_tsquery('english', %s) q "
            "WHERE to_tsvector('english', e.text) @@ q AND e.owner_id = %s AND e.agent = %s "
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
