"""Files to import: an aidaemon database built with aidaemon's table
definitions (and rows of every kind), and uploads to the import page."""

from __future__ import annotations

import io
import json
import sqlite3
import zipfile
from pathlib import Path
from typing import Any

from django.core.files.uploadedfile import SimpleUploadedFile

from memory.embeddings import embed_text

SCHEMA = """
CREATE TABLE messages (
    id TEXT PRIMARY KEY, session_id TEXT NOT NULL, role TEXT NOT NULL, content TEXT,
    tool_call_id TEXT, tool_name TEXT, tool_calls_json TEXT, created_at TEXT NOT NULL,
    importance REAL NOT NULL DEFAULT 0.5, embedding BLOB, embedding_error TEXT,
    consolidated_at TEXT
);
CREATE INDEX idx_messages_session ON messages(session_id);
CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, event_type TEXT NOT NULL,
    data TEXT NOT NULL, created_at TEXT NOT NULL, consolidated_at TEXT, task_id TEXT,
    tool_name TEXT
);
CREATE INDEX idx_events_session ON events(session_id, created_at);
CREATE TABLE facts (
    id INTEGER PRIMARY KEY AUTOINCREMENT, category TEXT NOT NULL, key TEXT NOT NULL,
    value TEXT NOT NULL, source TEXT NOT NULL DEFAULT 'agent',
    created_at TEXT NOT NULL DEFAULT (datetime('now')),
    updated_at TEXT NOT NULL DEFAULT (datetime('now')), UNIQUE(category, key)
);
CREATE TABLE macros (
    id INTEGER PRIMARY KEY AUTOINCREMENT, trigger_tool TEXT NOT NULL,
    trigger_args_pattern TEXT, next_tool TEXT NOT NULL, next_args TEXT NOT NULL,
    confidence REAL NOT NULL DEFAULT 0.0, used_count INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL DEFAULT (datetime('now')),
    updated_at TEXT NOT NULL DEFAULT (datetime('now'))
);
CREATE TABLE scheduled_tasks (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, cron_expr TEXT NOT NULL,
    original_schedule TEXT NOT NULL, prompt TEXT NOT NULL, source TEXT NOT NULL DEFAULT 'tool',
    is_oneshot INTEGER NOT NULL DEFAULT 0, is_paused INTEGER NOT NULL DEFAULT 0,
    is_trusted INTEGER NOT NULL DEFAULT 0, next_run_at TEXT NOT NULL, last_run_at TEXT,
    created_at TEXT NOT NULL DEFAULT (datetime('now')),
    updated_at TEXT NOT NULL DEFAULT (datetime('now'))
);
CREATE TABLE terminal_allowed_prefixes (prefix TEXT PRIMARY KEY);
"""

CAT = "My cat Miso loves sardines for breakfast."
CAT_ID = "6f1c2a8e-0000-4000-8000-000000000001"
TELEGRAM = "telegram_4242"  # a valid key part: kept
DISCORD = "discord:guild/42 general"  # not a key part: mapped
DENTIST_AT = "2099-03-05T14:30:00Z"


def message(
    id: str, session: str, role: str, content: str | None, created_at: str, **columns: Any
) -> dict[str, Any]:
    return {
        "id": id,
        "session_id": session,
        "role": role,
        "content": content,
        "created_at": created_at,
        **columns,
    }


def event(session: str, event_type: str, data: Any, created_at: str, **columns: Any) -> dict:
    raw = data if isinstance(data, str) else json.dumps(data)
    return {
        "session_id": session,
        "event_type": event_type,
        "data": raw,
        "created_at": created_at,
        **columns,
    }


def fixture_rows() -> dict[str, list[dict[str, Any]]]:
    calls = [{"id": "call_1", "name": "terminal", "arguments": '{"command": "ls"}'}]
    return {
        "messages": [
            # Embedded by aidaemon with the same model: the vector is kept.
            message(
                CAT_ID,
                TELEGRAM,
                "user",
                CAT,
                "2025-03-01 09:00:00",  # SQLite's datetime('now')
                importance=0.9,
                embedding=json.dumps([float(x) for x in embed_text(CAT)]).encode(),
            ),
            # Three dimensions: not this model's vector, embedded again.
            message(
                "6f1c2a8e-0000-4000-8000-000000000002",
                TELEGRAM,
                "assistant",
                "Noted: Miso likes sardines.",
                "2025-03-01T09:00:05Z",  # RFC3339
                embedding=b"[0.1, 0.2, 0.3]",
            ),
            message(
                "6f1c2a8e-0000-4000-8000-000000000003",
                TELEGRAM,
                "assistant",
                "",
                "2025-03-01T09:01:00.123456789+00:00",
                tool_calls_json=json.dumps(calls),
            ),
            message(
                "6f1c2a8e-0000-4000-8000-000000000004",
                TELEGRAM,
                "tool",
                "notes.md  todo.md",
                "2025-03-01T09:01:02+00:00",
                tool_call_id="call_1",
                tool_name="terminal",
            ),
            message(
                "6f1c2a8e-0000-4000-8000-000000000005",
                TELEGRAM,
                "user",
                "When did I say this?",
                "sometime last week",
            ),
        ],
        "events": [
            # The same message aidaemon also wrote to `events`: imported once.
            event(
                TELEGRAM,
                "user_message",
                {"content": CAT, "message_id": CAT_ID},
                "2025-03-01T09:00:00Z",
            ),
            event(
                TELEGRAM,
                "tool_call",
                {"tool_call_id": "call_1", "name": "terminal", "arguments": {"command": "ls"}},
                "2025-03-01T09:01:01Z",
                tool_name="terminal",
            ),
            event(TELEGRAM, "llm_call", {"model": "x", "latency_ms": 900}, "2025-03-01T09:01:00Z"),
            event(TELEGRAM, "user_message", "{not json", "2025-03-01T09:02:00Z"),
            event(
                DISCORD,
                "user_message",
                {"content": "What is the capital of Portugal?"},
                "2025-03-02T10:00:00+00:00",
            ),
            event(
                DISCORD,
                "assistant_response",
                {
                    "content": "Lisbon.",
                    "message_id": "msg-7",
                    "model": "gpt-x",
                    "input_tokens": 120,
                    "output_tokens": 3,
                },
                "2025-03-02 10:00:02",
            ),
        ],
        "facts": [
            {"category": "Pets", "key": "Cat", "value": "Miso", "source": "agent"},
            {"category": "preferences", "key": "editor", "value": "vim", "source": "user"},
            # Conflicts with what alice set in Neotask herself: hers wins.
            {"category": "preferences", "key": "language", "value": "Portuguese"},
            # Conflicts with a value the Neotask agent learned: replaced.
            {"category": "pets", "key": "dog", "value": "Rex"},
        ],
        "macros": [
            {
                "trigger_tool": "terminal",
                "trigger_args_pattern": "git status",
                "next_tool": "terminal",
                "next_args": '{"command": "git diff"}',
                "confidence": 0.8,
                "used_count": 5,
            },
            {"trigger_tool": "search", "next_tool": "terminal", "next_args": "not json"},
        ],
        "scheduled_tasks": [
            {
                "id": "0b6d3a52-1111-4111-8111-000000000001",
                "name": "Morning briefing",
                "cron_expr": "0 9 * * 1-5",
                "original_schedule": "weekdays at 9am",
                "prompt": "Summarise my open todos.",
                "next_run_at": "2025-03-03T09:00:00Z",
            },
            {
                "id": "0b6d3a52-1111-4111-8111-000000000002",
                "name": "Weekly review",
                "cron_expr": "0 17 * * 5",
                "original_schedule": "every Friday at 5pm",
                "prompt": "Review the week.",
                "is_paused": 1,
                "is_trusted": 1,
                "next_run_at": "2025-03-07 17:00:00",
            },
            {
                "id": "0b6d3a52-1111-4111-8111-000000000003",
                "name": "Dentist reminder",
                "cron_expr": "30 14 5 3 *",
                "original_schedule": "on March 5th at 2:30pm",
                "prompt": "Remind me of the dentist.",
                "is_oneshot": 1,
                "next_run_at": DENTIST_AT,
            },
            {
                "id": "0b6d3a52-1111-4111-8111-000000000004",
                "name": "Broken",
                "cron_expr": "61 * * * *",
                "original_schedule": "61 * * * *",
                "prompt": "Never.",
                "next_run_at": "2025-03-03T09:00:00Z",
            },
        ],
        "terminal_allowed_prefixes": [{"prefix": "git status"}, {"prefix": "ls"}],
    }


def build_db(
    path: Path, rows: dict[str, list[dict[str, Any]]] | None = None, schema: str = SCHEMA
) -> Path:
    rows = fixture_rows() if rows is None else rows
    with sqlite3.connect(path) as db:
        db.executescript(schema)
        for table, table_rows in rows.items():
            for row in table_rows:
                columns = ", ".join(row)
                marks = ", ".join("?" for _ in row)
                db.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", list(row.values()))
    return path


def upload(client, kind: str, name: str, content: bytes, **fields: str):
    data = {"kind": kind, f"{kind}-file": SimpleUploadedFile(name, content)}
    data.update({f"{kind}-{key}": value for key, value in fields.items()})
    data.setdefault(f"{kind}-agent", "main")
    return client.post("/import/", data)


def zipped(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return buffer.getvalue()
