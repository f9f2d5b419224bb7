"""Reading an aidaemon database (read-only): which of its tables can be imported,
and each conversation row as the event it becomes (nothing here writes)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from core.ownership import Owner
from importers.aidaemon.database import Database
from importers.aidaemon.database import open_database as open_file
from importers.report import ImportRefused, ImportReport
from importers.text import MAX_EVENT_BYTES, storable
from memory.legacy import event_for, parse_timestamp
from memory.models import Event, EventType
from memory.recording import draft

LEGACY_ID_LENGTH = 64  # Event.legacy_message_id
MAX_ROWS = 5_000_000  # a table: a larger one is refused before anything is written
# A value longer than this is not read whole: a text keeps its start (an event is cut
# to MAX_EVENT_BYTES anyway), anything else makes its row skipped.
MAX_FIELD_BYTES = 1024 * 1024
CUT = "_cut"  # the row's values read only in part, by name

# Per table: the columns an import needs, and those it uses when present.
# Other columns are ignored.
TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "messages": (
        ("id", "session_id", "role", "content", "created_at"),
        (
            "tool_call_id",
            "tool_name",
            "tool_calls_json",
            "importance",
            "embedding",
            "embedding_error",
            "consolidated_at",
        ),
    ),
    "events": (
        ("id", "session_id", "event_type", "data", "created_at"),
        ("consolidated_at", "task_id", "tool_name"),
    ),
    "facts": (("category", "key", "value"), ("source", "created_at", "updated_at")),
    "macros": (
        ("trigger_tool", "next_tool"),
        ("trigger_args_pattern", "next_args", "confidence", "used_count"),
    ),
    "scheduled_tasks": (
        ("id", "name", "cron_expr", "prompt"),
        ("original_schedule", "source", "is_oneshot", "is_paused", "is_trusted", "next_run_at"),
    ),
    "terminal_allowed_prefixes": (("prefix",), ()),
}
# How the report names each table's rows.
KIND = {
    "messages": "messages",
    "events": "events",
    "facts": "facts",
    "macros": "macros",
    "scheduled_tasks": "scheduled tasks",
    "terminal_allowed_prefixes": "terminal prefixes",
}

# aidaemon event types the chat shows; its telemetry types have no equivalent.
IMPORTED_TYPES = {
    EventType.USER_MESSAGE,
    EventType.ASSISTANT_RESPONSE,
    EventType.TOOL_CALL,
    EventType.TOOL_RESULT,
    EventType.SYSTEM,
    EventType.SESSION_START,
    EventType.SESSION_END,
    EventType.COMPACTION,
    EventType.SUMMARY,
    EventType.ERROR,
}
# Where an aidaemon payload keeps the words of a non-conversation event.
TEXT_KEYS = ("content", "message", "summary", "error", "reason")


class BadRow(Exception):
    """A row that cannot be imported; the message is the report's reason."""


def count_rows(path: str | Path) -> int:
    """How many rows an import reads: the total of its progress."""
    with open_database(path) as source:
        return sum(
            source.value(f'SELECT count(*) FROM "{table}"')
            for table in usable_tables(source, ImportReport())
        )


@contextmanager
def open_database(path: str | Path) -> Iterator[Database]:
    with open_file(path, TABLES) as source:
        if not source.tables:
            raise ImportRefused(
                f"{source.name} has none of aidaemon's tables ({', '.join(TABLES)}): "
                "is it an aidaemon database?"
            )
        yield source


def usable_tables(source: Database, report: ImportReport) -> dict[str, list[str]]:
    """Each importable table with the columns to read; notes on what is missing.
    ImportRefused when a table holds more than MAX_ROWS rows."""
    usable: dict[str, list[str]] = {}
    for table, (required, optional) in TABLES.items():
        if table not in source.tables:
            report.note(f"No {table} table: nothing of it to import.")
            continue
        rows = source.value(f'SELECT count(*) FROM "{table}"')
        if rows > MAX_ROWS:
            raise ImportRefused(
                f"{source.name}: its {table} table holds {rows:,} rows; "
                f"an import reads at most {MAX_ROWS:,} a table."
            )
        columns = {row["name"] for row in source.rows(f'PRAGMA table_info("{table}")')}
        missing = [column for column in required if column not in columns]
        if missing:
            reason = f"the {table} table has no column {', '.join(missing)}"
            report.saw(KIND[table], rows)
            report.skip(KIND[table], reason, rows)
            report.note(f"Not imported: {reason}.")
            continue
        usable[table] = [*required, *(column for column in optional if column in columns)]
    return usable


def bounded_select(columns: list[str]) -> str:
    """A SELECT list of `columns`, each value whole or, when longer than
    MAX_FIELD_BYTES, only its start (enough for what an event keeps), then CUT:
    the names of the values cut, space-separated."""
    values, cut = [], []
    for column in columns:
        longer = f'length(CAST("{column}" AS BLOB)) > {MAX_FIELD_BYTES}'
        values.append(
            f'CASE WHEN {longer} THEN substr("{column}", 1, {MAX_EVENT_BYTES}) '
            f'ELSE "{column}" END AS "{column}"'
        )
        cut.append(f"CASE WHEN {longer} THEN '{column} ' ELSE '' END")
    return ", ".join([*values, f"{' || '.join(cut)} AS {CUT}"])


def too_long(names: Iterable[str]) -> BadRow:
    return BadRow(f"{', '.join(names)} longer than {MAX_FIELD_BYTES // 1024} KB")


def timestamp(raw: Any, what: str = "created_at") -> datetime:
    try:
        value = parse_timestamp(raw) if isinstance(raw, str) else None
    except ValueError:
        value = None
    if value is None:
        raise BadRow(f"{what} is not a timestamp")
    return value


def optional_timestamp(raw: Any) -> datetime | None:
    try:
        return parse_timestamp(raw) if isinstance(raw, str) else None
    except ValueError:
        return None


def openai_tool_call(call: Any) -> Any:
    """aidaemon's {id, name, arguments} as the OpenAI form the agent sends back."""
    if not isinstance(call, dict) or "function" in call or "name" not in call:
        return call
    arguments = call.get("arguments", "")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {
        "id": call.get("id"),
        "type": "function",
        "function": {"name": call["name"], "arguments": arguments},
    }


def message_event(row: dict[str, Any], owner: Owner) -> Event:
    """A `messages` row as an event, converted as the migration does, with its
    payload in the shape the chat and the agent read."""
    if cut := set(row[CUT]) - {"content", "embedding"}:
        raise too_long(sorted(cut))
    if "embedding" in row[CUT]:
        row["embedding"] = None  # embedded again
    timestamp(row["created_at"])
    row["id"] = str(row["id"])  # SQLite may hold a number: compared as text later
    if len(row["id"]) > LEGACY_ID_LENGTH:
        raise BadRow(f"id is longer than {LEGACY_ID_LENGTH} characters")
    if isinstance(row.get("embedding"), str):
        row["embedding"] = row["embedding"].encode()
    event = event_for(SimpleNamespace(**row), owner, Event)
    data = event.data
    if isinstance(data.get("tool_calls"), list):
        data["tool_calls"] = [openai_tool_call(call) for call in data["tool_calls"]]
    if event.event_type == EventType.TOOL_RESULT:
        data.setdefault("name", row.get("tool_name") or "")
    event.data = storable(data)
    event.text = storable(event.text)
    return event


def payload_event(row: dict[str, Any], owner: Owner) -> Event:
    """An `events` row as an event; its payload reshaped for the chat."""
    if row[CUT]:
        raise too_long(row[CUT])
    event_type = row["event_type"]
    if event_type not in IMPORTED_TYPES:
        raise BadRow(f"event type {event_type!r} has no Neotask equivalent")
    try:
        payload = json.loads(row["data"]) if row["data"] else {}
    except (TypeError, ValueError):
        raise BadRow("data is not JSON") from None
    if not isinstance(payload, dict):
        raise BadRow("data is not a JSON object")
    created_at = timestamp(row["created_at"])
    data, tool_name = chat_payload(event_type, payload)
    message_id = payload.get("message_id")
    if isinstance(message_id, str) and 0 < len(message_id) <= LEGACY_ID_LENGTH:
        legacy_id = message_id
    else:
        legacy_id = f"event:{row['id']}"
    task_id = row.get("task_id")
    return draft(
        owner,
        "",  # the Neotask session's id, set by the writer
        event_type,
        storable(data),
        created_at=created_at,
        consolidated_at=optional_timestamp(row.get("consolidated_at")),
        task_id=str(task_id)[:64] if task_id else None,
        tool_name=(row.get("tool_name") or tool_name or None),
        legacy_message_id=legacy_id,
    )


def chat_payload(event_type: str, payload: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Neotask's `data` for an aidaemon payload (as agent/runtime.py records
    it), and the tool's name if any."""
    if event_type == EventType.USER_MESSAGE:
        if not payload.get("content"):
            raise BadRow("a user message without content")
        return {"content": str(payload["content"])}, None
    if event_type == EventType.ASSISTANT_RESPONSE:
        data: dict[str, Any] = {
            "content": str(payload.get("content") or ""),
            "tool_calls": [openai_tool_call(call) for call in payload.get("tool_calls") or []],
        }
        if payload.get("input_tokens") or payload.get("output_tokens"):
            data["usage"] = {
                "input": int(payload.get("input_tokens") or 0),
                "output": int(payload.get("output_tokens") or 0),
                "cache_read": 0,
                "cache_write": 0,
            }
        if payload.get("model"):
            data["model"] = payload["model"]
        return data, None
    if event_type == EventType.TOOL_CALL:
        name = str(payload.get("name") or "")
        arguments = payload.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        return {"id": payload.get("tool_call_id"), "name": name, "arguments": arguments}, name
    if event_type == EventType.TOOL_RESULT:
        name = str(payload.get("name") or "")
        failed = payload.get("success") is False or bool(payload.get("error"))
        content = payload.get("result") or payload.get("content") or payload.get("error") or ""
        data = {
            "tool_call_id": payload.get("tool_call_id"),
            "name": name,
            "content": str(content),
            "is_error": failed,
        }
        return data, name
    words = next((payload[key] for key in TEXT_KEYS if isinstance(payload.get(key), str)), "")
    return {**payload, "content": words}, None
