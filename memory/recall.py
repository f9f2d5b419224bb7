"""Auto-recall: when a session starts, what the agent already knows that bears
on its first message — past conversations and its memory files (facts are in
every prompt anyway) — is brought in once, recorded as a `recall` event (so it
is stable for the session and /status can list it)."""

from __future__ import annotations

from typing import Any

import numpy as np
from django.conf import settings

from memory.files import search_files
from memory.models import Event, EventType
from memory.retrieval import MEMORY_TYPES
from memory.vector_index import index_for


def recall(
    owner: Any, agent: str, session_id: str, query_vector: np.ndarray
) -> list[dict[str, Any]]:
    """The most similar memories from other sessions and from the memory files,
    best first, above the similarity floor."""
    options = settings.NEOTASK["memory"]
    limit = options["recall_limit"]
    if not limit:
        return []
    hits = index_for(owner.pk, agent).search(
        query_vector, limit * 3, min_score=options["recall_min_score"]
    )
    scores = dict(hits)
    events = (
        Event.objects.owned_by(owner)
        .filter(pk__in=scores, agent=agent, event_type__in=MEMORY_TYPES)
        .exclude(session_id=session_id)
    )
    items = [
        {
            "source": f"session {event.session_id}, event {event.pk}",
            "event_id": event.pk,
            "date": f"{event.created_at:%Y-%m-%d}",
            "text": " ".join(event.text.split())[:400],
            "score": round(scores[event.pk], 3),
        }
        for event in events
    ]
    for hit in search_files(
        owner, agent, query_vector, limit, min_score=options["recall_min_score"]
    ):
        items.append(
            {
                "source": hit.source,
                "date": "memory file",
                "text": " ".join(hit.text.split())[:400],
                "score": round(hit.score, 3),
            }
        )
    items.sort(key=lambda item: -item["score"])
    return items[:limit]


def record_recall(
    owner: Any, agent: str, session_id: str, query_vector: np.ndarray | None
) -> Event | None:
    """At the first message of a session, store what was recalled (if anything)."""
    if query_vector is None:
        return None
    session_events = Event.objects.filter(owner=owner, session_id=session_id)
    if session_events.filter(event_type=EventType.USER_MESSAGE).count() != 1:
        return None  # not the session's first message
    if session_events.filter(event_type=EventType.RECALL).exists():
        return None
    items = recall(owner, agent, session_id, query_vector)
    if not items:
        return None
    return Event.record(
        owner,
        session_id,
        EventType.RECALL,
        {"content": f"Recalled {len(items)} memories for this session.", "items": items},
        agent=agent,
    )
