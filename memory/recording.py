"""Writing an event, the one way: stored with its default importance and its
search keys, kept in its session's working memory, and embedded — with the
vector the caller already has, or by a job once the transaction commits.

models.py does not import this module (nor jobs or working memory): the
event log's table knows nothing of what is done with a new row.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from memory.models import Event, default_importance
from memory.tasks import queue_embedding
from memory.vectors import pack
from memory.working import working_memory
from neotask_site.ownership import Owner


def record(
    owner: Owner,
    session_id: str,
    event_type: str,
    data: dict[str, Any] | None = None,
    *,
    vector: Any = None,
    embed: bool = True,
    **fields: Any,
) -> Event:
    """Store an event. `vector`: the embedding of its text, already computed
    (stored with the row); `embed=False`: the caller stores one later
    (`keep_vector`); otherwise a job embeds it."""
    data = data or {}
    fields.setdefault("importance", default_importance(event_type))
    fields.setdefault("text", data.get("content") or "")
    event = Event(owner=owner, session_id=session_id, event_type=event_type, data=data, **fields)
    event.set_keys(event.previous_turn_text())
    if vector is not None and event.key_text == event.text:
        event.embedding, event.embedded_at = pack(vector), timezone.now()
    event.save(force_insert=True)
    working_memory.remember(event)
    if embed and event.embedding is None:
        queue_embedding(event)
    return event


def keep_vector(event: Event, vector: Any) -> None:
    """Store a vector computed for `event`'s text after it was stored (a chat
    message's, embedded for recall) so that no job embeds it again; without
    one, or if the event's key is not its bare text, queue the job."""
    if vector is None or event.key_text != event.text:
        return queue_embedding(event)
    Event.objects.filter(pk=event.pk, embedding__isnull=True).update(
        embedding=pack(vector), embedded_at=timezone.now()
    )
