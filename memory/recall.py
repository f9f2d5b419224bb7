"""Auto-recall: when a session starts, what the agent already knows that bears
on its first message — past conversations and its memory files (facts are in
every prompt anyway) — is brought in once, recorded as a `recall` event (so it
is stable for the session and /status can list it)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from urllib.parse import urlencode

import numpy as np
from django.conf import settings
from django.urls import reverse

from core.ownership import Owner
from memory import recording
from memory.files.search import FileHit
from memory.models import Event, EventType
from memory.provenance import Provenance, chat_titles, said_in
from memory.retrieval import RECALLED_CHARS, RecalledItem
from memory.search import search_memory


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
                "session_id": hit.event.session_id,
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
    recalled = recording.record(
        owner,
        session_id,
        EventType.RECALL,
        {"content": f"Recalled {len(items)} memories for this session.", "items": items},
        agent=agent,
    )
    name_recalled_chats([recalled])  # the chat's tabs are sent it rendered, without a query
    return recalled


# The recall panel (sessions_app/_event.html): where each memory came from, as a
# person reads it; the ids and scores folded under "details".


@dataclass(frozen=True)
class ShownItem:
    text: str
    where: Provenance  # the chat and day it was said, or the memory file
    details: str  # what the search cites and its score


def name_recalled_chats(events: Iterable[Event]) -> None:
    """Give the recall events among `events` (one owner's) the titles of the chats
    their memories were said in (`recalled_chats`), in one query, for shown_items;
    a page that renders events calls it first."""
    recalls = [event for event in events if event.event_type == EventType.RECALL]
    sessions = {
        item["session_id"]
        for event in recalls
        for item in event.data.get("items", [])
        if isinstance(item, dict) and isinstance(item.get("session_id"), str)
    }
    titles = chat_titles[0](recalls[0].owner_id, sessions) if sessions else {}
    for event in recalls:
        event.recalled_chats = titles  # type: ignore[attr-defined]


def shown_items(event: Event) -> list[ShownItem]:
    """A recall event's memories as its panel shows them (no database access)."""
    titles: dict[str, str] = getattr(event, "recalled_chats", {})
    shown = []
    for item in event.data.get("items", []):
        if not isinstance(item, dict):
            continue
        source, score = str(item.get("source", "")), item.get("score")
        details = f"{source} · score {score:.2f}" if isinstance(score, (int, float)) else source
        if "event_id" in item:
            title = titles.get(item.get("session_id", ""))
            where = said_in(item["event_id"], title, readable_day(str(item.get("date", ""))))
        else:  # a memory file's chunk: "<path>:<first>-<last line>"
            path, _, lines = source.rpartition(":")
            query = urlencode({"agent": event.agent, "path": path})
            url = f"{reverse('memory-file')}?{query}#L{lines.partition('-')[0]}"
            heading = f", {item['heading']}" if item.get("heading") else ""
            where = Provenance(f"from {path}{heading}", url)
        shown.append(ShownItem(str(item.get("text", "")), where, details))
    return shown


def readable_day(day: str) -> str:
    """A recalled event's day ("2026-12-03", as the item keeps it) as "3 Dec 2026"."""
    try:
        return f"{date.fromisoformat(day):%-d %b %Y}"
    except ValueError:
        return day
