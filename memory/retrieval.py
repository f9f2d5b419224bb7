"""`get_context`: what the agent remembers for one turn (tri-hybrid retrieval, and more).

aidaemon's three branches — recency (the session's last messages, from working
memory), relevance (important events: importance at or above a bar) and
similarity (events whose embedding is close to the query's) — plus, in a
compacted session, its summary, what auto-recall brought in when the session
started, and a fourth branch, search: the top of the fused memory search
(memory.search) for the message. The similarity branch alone rarely reaches an
earlier conversation (all-MiniLM-L6-v2 seldom gives a question and its answer a
cosine above its 0.65 floor); the search branch is what makes the agent
remember (`memory_eval`'s context figures, docs/memory.md). Items are
de-duplicated by event id, each tagged with the branch that brought it (so
/status can show why a memory was included), all scoped to the owner and agent.
A message's whole path, end to end: docs/chat-runtime.md#events-and-memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

import numpy as np
from django.conf import settings

from core.ownership import Owner
from memory.models import RECALLED, Event, EventType
from memory.search import (
    MAX_QUERY_CHARS,
    SearchHit,
    bears_on_query,
    best_events,
    lexical_finds,
    search_memory,
)
from memory.vector_index import in_database, index_for
from memory.working import working_memory
from memory.workspace import DEFAULT_AGENT

RECALLED_BRANCHES = ("relevance", "similarity", "search")
# How much of a recalled event the prompt carries (agent.prompt words it).
RECALLED_CHARS = 400


def estimate_tokens(text: str) -> int:
    """~4 characters per token for English text with the usual BPE tokenizers,
    plus the per-message overhead of the chat format."""
    return len(text) // 4 + 4


class RecalledItem(TypedDict):
    """A memory auto-recall brought in when the session started, as the session's
    `recall` event keeps it (JSON in its data: a dict, not an object)."""

    source: str  # what the search cites: "session <id>, event <id>" or "<file>:<lines>"
    date: str  # the event's day, or "memory file"
    text: str  # clipped, after its speaker's name when it has one
    score: float
    event_id: NotRequired[int]  # an event's, not a file chunk's
    session_id: NotRequired[str]  # an event's (recalled since its chat's title is shown)
    heading: NotRequired[str]  # a file chunk's headings, e.g. "Page 3" or "Trips > Japan"
    imported: NotRequired[bool]  # an event an import brought in (Event.imported_from)
    event_type: NotRequired[str]  # an event's: who said it (agent.prompt words it)
    speaker: NotRequired[str]  # its named speaker, whose name starts its text


@dataclass(frozen=True)
class ContextItem:
    event: Event
    branch: str  # summary | recall | recency | relevance | similarity | search
    score: float | None = None


@dataclass
class Context:
    items: list[ContextItem] = field(default_factory=list)

    def branch(self, name: str) -> list[ContextItem]:
        return [item for item in self.items if item.branch == name]

    @property
    def recent(self) -> list[Event]:
        return [item.event for item in self.branch("recency")]

    @property
    def summary(self) -> Event | None:
        """The compaction summary this session opened with, if any."""
        found = self.branch("summary")
        return found[0].event if found else None

    @property
    def session_recall(self) -> list[RecalledItem]:
        """What auto-recall brought in when the session started."""
        found = self.branch("recall")
        return found[0].event.data.get("items", []) if found else []

    @property
    def recalled(self) -> list[ContextItem]:
        """Older memories brought back by relevance, similarity or search, oldest first."""
        older = [item for item in self.items if item.branch in RECALLED_BRANCHES]
        return sorted(older, key=lambda item: (item.event.created_at, item.event.pk))


def recent_exchange(
    owner: Owner, session_id: str, limit: int, marker: tuple[int, int] | None = None
) -> list[Event]:
    """The last `limit` events, extended back to the newest user message so
    that a turn with many tool calls is never cut in the middle (`marker`: the
    session's working-memory marker, if known: WorkingMemory.recent)."""
    window = working_memory.recent(owner, session_id, working_memory.cap(), marker)
    if window and window[0].event_type == EventType.COMPACTION:
        # A compacted session continues with the tail of the one it replaced.
        carried = Event.objects.owned_by(owner).filter(
            pk__in=window[0].data.get("carried_over", [])
        )
        window = [*carried.order_by("created_at", "id"), *window[1:]]
    start = max(0, len(window) - limit)
    for index in range(len(window) - 1, -1, -1):
        if window[index].event_type == EventType.USER_MESSAGE:
            start = min(start, index)
            break
    return window[start:] if limit else []


def get_context(
    owner: Owner,
    session_id: str,
    query: str,
    agent: str = DEFAULT_AGENT,
    query_vector: np.ndarray | None = None,
    marker: tuple[int, int] | None = None,
) -> Context:
    """`marker`: the session's working-memory marker, if the caller knows it."""
    limits = settings.NEOTASK["memory"]
    context = Context()
    seen: set[int] = set()
    text = (query or "").strip()[:MAX_QUERY_CHARS]
    searching = bool(limits["search_limit"] and text)

    # The two slow questions first: the index compares the query's vector on its
    # product thread (both branches below read that one comparison) while this
    # thread asks the database the rest, the full-text query first.
    compared = None
    pg = in_database()
    if limits["similarity_limit"] or searching:
        if query_vector is None and text:
            from memory.embeddings import embed_text

            query_vector = embed_text(text)
        if query_vector is not None:
            compared = index_for(owner.pk, agent).query(query_vector)
    # (In PostgreSQL the search asks both branches in one statement, below.)
    lexical = lexical_finds(owner, agent, text, compared) if searching and not pg else None

    # The newest of each (a session opens with at most one of either).
    opening = {
        event.event_type: event
        for event in Event.objects.owned_by(owner)
        .filter(session_id=session_id, event_type__in=[EventType.COMPACTION, EventType.RECALL])
        .order_by("id")
    }
    summary = opening.get(EventType.COMPACTION)
    if summary is not None:
        context.items.append(ContextItem(summary, "summary"))
        seen.add(summary.pk)
    recalled = opening.get(EventType.RECALL)
    if recalled is not None:
        context.items.append(ContextItem(recalled, "recall"))
        seen.update(
            item["event_id"] for item in recalled.data.get("items", []) if "event_id" in item
        )

    for event in recent_exchange(owner, session_id, limits["recency_limit"], marker):
        context.items.append(ContextItem(event, "recency"))
        seen.add(event.pk)

    if limits["relevance_limit"]:
        important = (
            Event.objects.owned_by(owner)
            .defer("embedding")
            .filter(RECALLED, agent=agent, importance__gte=limits["relevance_min_importance"])
            .exclude(pk__in=seen)
            .order_by("-importance", "-created_at", "-id")[: limits["relevance_limit"]]
        )
        for event in important:
            context.items.append(ContextItem(event, "relevance", event.importance))
            seen.add(event.pk)

    if limits["similarity_limit"] and compared is not None:
        # The context's events were just read (the recent exchange is current as
        # of the turn's session row): hits among them need no check that they exist.
        compared.exist(item.event.pk for item in context.items)
        # Ask for more than needed: some hits are already in the context.
        wanted = limits["similarity_limit"] + len(seen)
        hits = compared.top(wanted, min_score=limits["similarity_threshold"])
        scores = {event_id: score for event_id, score in hits if event_id not in seen}
        recallable = Event.objects.owned_by(owner).filter(RECALLED, agent=agent)
        for event in best_events(recallable, scores, limits["similarity_limit"]):
            context.items.append(ContextItem(event, "similarity", scores[event.pk]))
            seen.add(event.pk)

    if searching:
        # Of the search's best (as many more as the context holds), those new to
        # it that bear on the query: only the rows of those shown are read.
        floor = limits["search_min_similarity"]
        found_hits = search_memory(
            owner,
            text,
            k=limits["search_limit"] + len(seen),
            agent=agent,
            query_vector=query_vector,
            files=False,
            known=[item.event for item in context.items],
            compared=compared,
            lexical=lexical,
            wanted=lambda event_id, branches: (
                event_id not in seen and bears_on_query(branches, floor)
            ),
            shown=limits["search_limit"],
        )
        for hit in found_hits:
            if isinstance(hit, SearchHit):  # files=False: events only
                context.items.append(ContextItem(hit.event, "search", hit.score))
    return context
