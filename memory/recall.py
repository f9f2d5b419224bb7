"""Auto-recall: when a session starts, what the agent already knows that bears
on its first message — past conversations and its memory files (facts are in
every prompt anyway) — is brought in once, recorded as a `recall` event (so it
is stable for the session and /status can list it)."""

from __future__ import annotations

import numpy as np
from django.conf import settings

from memory import recording
from memory.files.search import FileHit
from memory.models import Event, EventType
from memory.retrieval import RECALLED_CHARS, RecalledItem
from memory.search import search_memory
from neotask_site.ownership import Owner


def recall(
    owner: Owner, agent: str, session_id: str, query: str, query_vector: np.ndarray
) -> list[RecalledItem]:
    """The best memories from other sessions and from the memory files by the
    fused memory search, best first: events sharing a word with the message or
    at least `recall_min_score` similar to it, file chunks at least that similar."""
    options = settings.NEOTASK["memory"]
    limit = options["recall_limit"]
    if not limit:
        return []
    floor = options["recall_min_score"]
    items: list[RecalledItem] = []
    for hit in search_memory(owner, query, k=limit * 3, agent=agent, query_vector=query_vector):
        if isinstance(hit, FileHit):
            if hit.score < floor:
                continue
            item: RecalledItem = {
                "source": hit.source,
                "date": "memory file",
                "text": clip(hit.text),
                "score": round(hit.score, 3),
            }
            if hit.heading:  # a document's page ("Page 3") or section
                item["heading"] = hit.heading
            items.append(item)
        elif hit.event.session_id != session_id and hit.bears_on_query(floor):
            recalled: RecalledItem = {
                "source": hit.source,
                "event_id": hit.event.pk,
                "date": f"{hit.event.created_at:%Y-%m-%d}",
                "text": clip(hit.event.text, hit.event.speaker),
                "score": round(hit.score, 3),
                "event_type": hit.event.event_type,
            }
            if hit.event.speaker:
                recalled["speaker"] = hit.event.speaker
            if hit.event.imported_from:
                recalled["imported"] = True  # outside text (agent.prompt)
            items.append(recalled)
    return items[:limit]


def clip(text: str, speaker: str = "") -> str:
    said = " ".join(text.split())[:RECALLED_CHARS]
    return f"{speaker}: {said}" if speaker else said


def record_recall(
    owner: Owner,
    agent: str,
    session_id: str,
    query: str,
    query_vector: np.ndarray | None,
    *,
    first: bool | None = None,
) -> Event | None:
    """At the first message of a session, store what was recalled (if anything).
    `first`: whether the message just stored is the session's first, if the
    caller knows (it is counted otherwise)."""
    if query_vector is None or first is False:
        return None
    session_events = Event.objects.filter(owner=owner, session_id=session_id)
    if first is None and session_events.filter(event_type=EventType.USER_MESSAGE).count() != 1:
        return None  # not the session's first message
    if session_events.filter(event_type=EventType.RECALL).exists():
        return None
    items = recall(owner, agent, session_id, query, query_vector)
    if not items:
        return None
    return recording.record(
        owner,
        session_id,
        EventType.RECALL,
        {"content": f"Recalled {len(items)} memories for this session.", "items": items},
        agent=agent,
    )
