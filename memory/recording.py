"""Writing events, the one way: stored with their default importance and their
search keys, kept in their session's working memory, and embedded — with the
vector the caller already has, or by a job once the transaction commits.
`record` writes one event (a chat turn's), `record_many` the drafts of a bulk
writer (the benchmark) in batches, each stored as `record` would, and
`record_imported` an importer's, marked as imported.

models.py does not import this module (nor jobs or working memory): the
event log's table knows nothing of what is done with a new row.
A message's whole path, end to end: docs/chat-runtime.md#events-and-memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.utils import timezone

from core.ownership import Owner
from memory.models import UNKNOWN, Event, Unknown, default_importance
from memory.tasks import request_embeddings
from memory.vector_index import learn_vector
from memory.vectors import pack
from memory.working import working_memory

BATCH = 500  # rows per INSERT: a bulk writer's batch stays one statement of bounded size


def draft(
    owner: Any, session_id: str, event_type: str, data: dict[str, Any] | None = None, **fields: Any
) -> Event:
    """An unsaved event with `record`'s defaults: its type's importance, its
    content as its text. A bulk writer drafts its events with this and stores
    them with `record_many`; `embedding` (packed) is a vector it already has."""
    data = data or {}
    fields.setdefault("importance", default_importance(event_type))
    fields.setdefault("text", data.get("content") or "")
    return Event(owner=owner, session_id=session_id, event_type=event_type, data=data, **fields)


def record(
    owner: Owner,
    session_id: str,
    event_type: str,
    data: dict[str, Any] | None = None,
    *,
    vector: Any = None,
    embed: bool = True,
    turn_before: str | Unknown | None = UNKNOWN,
    **fields: Any,
) -> Event:
    """Store an event. `vector`: the embedding of its text, already computed
    (stored with the row, and put in this process's vector index); `embed=False`:
    none is asked for (the caller computes it later); otherwise a job embeds it.
    `turn_before`: the text of the session's turn before it, if the caller knows
    it (its key's context; asked of the database otherwise)."""
    event = draft(owner, session_id, event_type, data, **fields)
    if vector is not None:
        event.embedding = pack(vector)
    event.set_keys(event.previous_turn_text(turn_before))
    keep_given_vector(event)
    event.save(force_insert=True)
    working_memory.remember(event)
    if event.embedded_at is not None:
        learn_vector(event, vector)
    if embed:
        request_embeddings([event])
    return event


def record_many(events: Sequence[Event]) -> None:
    """Store drafted events (`draft`) in bulk, in this order, each as `record`
    stores one: keyed by the turn before it in its session, a vector it came
    with kept if it is its key's, remembered by its session's working memory,
    and the others' vectors requested. Inserted BATCH rows at a time; `record`
    costs an insert and a query or two per event."""
    Event.set_keys_in_order(events)
    for event in events:
        keep_given_vector(event)
    Event.objects.bulk_create(events, batch_size=BATCH)
    for event in events:
        working_memory.remember(event)
    request_embeddings(events)


def record_imported(events: Sequence[Event], kind: str) -> int:
    """Store events an import drafted, as `record_many` does, each marked with the
    kind of import that brought it (`Event.imported_from`: its text is outside text)
    and its importance at most its type's default: what recall puts before the agent
    (a pinned event, always) is a person's choice here, never a file's. Returns how
    many came above it (the importer's report says so)."""
    raised = 0
    for event in events:
        event.imported_from = kind
        usual = default_importance(event.event_type)
        if event.importance > usual:
            event.importance = usual
            raised += 1
    record_many(events)
    return raised


def keep_given_vector(event: Event) -> None:
    """A vector given with a new event is kept only if it is the embedding of
    the event's key (the key is its bare text unless a speaker is named);
    otherwise it is dropped and the key is embedded by a job."""
    if event.embedding is None:
        return
    if event.key_text == event.text:
        event.embedded_at = timezone.now()
    else:
        event.embedding = None
