"""Move every legacy `messages` row into `events`.

Idempotent: a row is skipped when an event with the same session, event type
and legacy message id exists (also enforced by a unique constraint). Legacy
rows have no owner; they go to the first superuser, or to an inactive
`legacy` account created for the purpose, which an admin can reassign.
"""

import json
from datetime import UTC, datetime

from django.conf import settings
from django.contrib.auth.hashers import make_password
from django.db import migrations

from memory.vectors import VectorError, pack

ROLE_TO_EVENT_TYPE = {
    "user": "user_message",
    "assistant": "assistant_response",
    "tool": "tool_result",
}
IMPORTANCE_FALLBACK = {"user": 0.5, "assistant": 0.5, "tool": 0.3}
BATCH = 500


def parse_timestamp(raw):
    """RFC3339 or SQLite's datetime('now') text; naive values are UTC."""
    if not raw:
        return None
    value = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def packed_embedding(raw):
    """A JSON list of floats as packed float32, or None when unusable."""
    if raw is None:
        return None
    try:
        values = json.loads(bytes(raw).decode("utf-8"))
        return pack(values)
    except (UnicodeDecodeError, ValueError, TypeError, VectorError):
        return None  # re-embedded later by the embedding sweep


def legacy_owner(apps):
    User = apps.get_model(settings.AUTH_USER_MODEL)
    owner = User.objects.filter(is_superuser=True).order_by("pk").first()
    if owner is None:
        owner, _ = User.objects.get_or_create(
            username="legacy",
            defaults={"is_active": False, "password": make_password(None)},
        )
    return owner


def event_for(message, owner, Event):
    event_type = ROLE_TO_EVENT_TYPE.get(message.role, "system")
    data = {"role": message.role, "content": message.content}
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


def messages_to_events(apps, schema_editor):
    Message = apps.get_model("memory", "Message")
    Event = apps.get_model("memory", "Event")
    if not Message.objects.exists():
        return
    owner = legacy_owner(apps)
    done = set(
        Event.objects.filter(legacy_message_id__isnull=False).values_list(
            "session_id", "event_type", "legacy_message_id"
        )
    )
    batch = []
    for message in Message.objects.order_by("created_at", "id").iterator(chunk_size=BATCH):
        event_type = ROLE_TO_EVENT_TYPE.get(message.role, "system")
        if (message.session_id, event_type, message.id) in done:
            continue
        batch.append(event_for(message, owner, Event))
        if len(batch) >= BATCH:
            Event.objects.bulk_create(batch)
            batch = []
    Event.objects.bulk_create(batch)


class Migration(migrations.Migration):
    atomic = True

    dependencies = [
        ("memory", "0002_events_facts_macros"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RunPython(messages_to_events, migrations.RunPython.noop, elidable=False),
    ]
