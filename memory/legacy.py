"""Legacy aidaemon `messages` rows as events, shared by the messages→events
migration (memory/migrations/0003) and the aidaemon importer.

The migration runs this code on historical models: keep what it produces
unchanged, or the same database would migrate differently over time.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from memory.vectors import VectorError, pack

ROLE_TO_EVENT_TYPE = {
    "user": "user_message",
    "assistant": "assistant_response",
    "tool": "tool_result",
}
IMPORTANCE_FALLBACK = {"user": 0.5, "assistant": 0.5, "tool": 0.3}


def event_type_for(role: str | None) -> str:
    return ROLE_TO_EVENT_TYPE.get(role or "", "system")


def parse_timestamp(raw: str | None) -> datetime | None:
    """RFC3339 or SQLite's datetime('now') text; naive values are UTC."""
    if not raw:
        return None
    value = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def packed_embedding(raw: bytes | memoryview | None) -> bytes | None:
    """A JSON list of floats as packed float32, or None when unusable."""
    if raw is None:
        return None
    try:
        values = json.loads(bytes(raw).decode("utf-8"))
        return pack(values)
    except (UnicodeDecodeError, ValueError, TypeError, VectorError):
        return None  # re-embedded later by the embedding sweep


def event_for(message: Any, owner: Any, Event: Any) -> Any:
    """An unsaved `Event` for a legacy message row (anything with its columns
    as attributes); de-duplicated by (session, event type, message id). Typed
    Any: migration 0003 passes its historical models, not the app's."""
    event_type = event_type_for(message.role)
    data: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls_json:
        try:
            data["tool_calls"] = json.loads(message.tool_calls_json)
        except ValueError:
            data["tool_calls_raw"] = message.tool_calls_json
    if message.tool_call_id:
        data["tool_call_id"] = message.tool_call_id
    if message.tool_name:
        data["tool_name"] = message.tool_name
    try:
        created_at = parse_timestamp(message.created_at) or datetime.now(UTC)
    except ValueError:
        created_at = datetime.now(UTC)
        data["legacy_created_at"] = message.created_at
    try:
        consolidated_at = parse_timestamp(message.consolidated_at)
    except ValueError:
        consolidated_at = None
    embedding = packed_embedding(message.embedding)
    importance = message.importance
    if importance is None or not 0.0 <= importance <= 1.0:
        importance = IMPORTANCE_FALLBACK.get(message.role, 0.1)
    return Event(
        owner=owner,
        session_id=message.session_id,
        event_type=event_type,
        data=data,
        text=message.content or "",
        created_at=created_at,
        consolidated_at=consolidated_at,
        tool_name=message.tool_name,
        importance=importance,
        embedding=embedding,
        embedding_error=message.embedding_error if embedding is None else None,
        legacy_message_id=message.id,
    )
