"""Memory search: vector similarity, full-text (BM25) and their fusion.

Each branch ranks the owner's events on its own: the vector branch by the
cosine to the events' contextual vectors (memory.vector_index), the lexical
branch by BM25 over their keys and contexts (memory.search_keys, memory.fulltext).
The fused ranking takes both branches' candidates and scores each by

    VECTOR_WEIGHT · cosine (min-max scaled over the candidates)
    + (1 - VECTOR_WEIGHT) · BM25 / the best BM25 of the query

so both always contribute, and a branch with nothing to say (no word in
common, or no vector yet) adds nothing. Chosen with `memory_eval` on two
datasets that disagree about the branches (docs/memory.md): on the
project's own, vector search beats full text; on LoCoMo, full text beats
vectors. Reciprocal-rank fusion lost to the better branch on both; this
score fusion beats both branches on both datasets. On PostgreSQL both branches
and the fusion are one statement (memory.pgvector.fused.hybrid), ties broken by id.
`branch` also runs one branch alone; "recency" is the evaluation's baseline.

The fused ranking also searches the agent's memory files (`memory.files`) and merges
their chunks with the events by cosine similarity, each hit citing its source.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from core.ownership import Owner
from memory import fulltext
from memory.files.search import FileHit, search_files
from memory.models import RECALLED, Event, is_recalled
from memory.pgvector.fused import FUSED_IDS, hybrid
from memory.pgvector.queries import PgQuery
from memory.turns import cued, cues_statement, with_turn_cues
from memory.vector_index import in_database, index_for
from memory.vector_query import VectorQuery
from memory.workspace import DEFAULT_AGENT

MAX_QUERY_CHARS = 4000  # the embedding model reads 256 tokens; this is plenty
CANDIDATES = 50  # per branch, before fusing
VECTOR_WEIGHT = 0.6
BRANCHES = ("fused", "vector", "lexical", "recency")
# The search page shows an event only if its fused score is at least this share of
# the best event's (and it bears on the query): bench/search_cutoff.py, docs/memory.md.
SHOWN_RATIO = 0.4


@dataclass
class SearchHit:
    event: Event
    score: float
    branches: dict[str, float] = field(default_factory=dict)  # branch → its own score
    kind: str = field(default="event", init=False)

    @property
    def source(self) -> str:
        return f"session {self.event.session_id}, event {self.event.pk}"

    def bears_on_query(self, min_similarity: float) -> bool:
        return bears_on_query(self.branches, min_similarity)


def bears_on_query(branches: dict[str, float], min_similarity: float) -> bool:
    """Worth recalling, by its branches' scores: it shares a word with the query,
    or is close in meaning."""
    return "lexical" in branches or branches.get("vector", -1.0) >= min_similarity


Hit = TypeVar("Hit", SearchHit, FileHit, SearchHit | FileHit)


def kept_by_cutoff(hits: Sequence[Hit], min_similarity: float, ratio: float) -> list[Hit]:
    """The hits worth showing a person (the search page): an event that bears on the
    query (a word in common, or a cosine of at least `min_similarity`) and scores at
    least `ratio` of the best event's fused score; a file chunk at least that
    similar. Measured in bench/search_cutoff.py (docs/memory.md)."""
    best = max((hit.score for hit in hits if isinstance(hit, SearchHit)), default=0.0)
    return [
        hit
        for hit in hits
        if (
            hit.score >= ratio * best and hit.bears_on_query(min_similarity)
            if isinstance(hit, SearchHit)
            else hit.score >= min_similarity
        )
    ]


def search_memory(
    owner: Owner,
    query: str,
    k: int = 10,
    agent: str = DEFAULT_AGENT,
    branch: str = "fused",
    query_vector: np.ndarray | None = None,
    files: bool = True,
    known: Iterable[Event] = (),
    compared: VectorQuery | PgQuery | None = None,
    lexical: dict[int, float] | None = None,
    wanted: Callable[[int, dict[str, float]], bool] | None = None,
    shown: int | None = None,
) -> list[SearchHit | FileHit]:
    """The `k` best memories for `query`; `known`, events the caller has already
    read, are not read again when they are among them. `compared`, the query's
    vector already compared with the index, and `lexical`, the full-text branch's
    finds (`lexical_finds`), are not asked again (get_context asks them first, and
    its similarity branch reads the same comparison). `wanted` (an event's id and
    its branches' scores) and `shown`: only the first `shown` of the k that it
    accepts, the others left unread (best_events)."""
    if branch not in BRANCHES:
        raise ValueError(f"branch must be one of {', '.join(BRANCHES)}")
    text = (query or "").strip()[:MAX_QUERY_CHARS]
    if k <= 0 or (not text and branch != "recency"):
        return []
    owned = Event.objects.owned_by(owner).filter(RECALLED, agent=agent)
    if branch == "recency":
        return [SearchHit(e, 0.0) for e in owned.order_by("-created_at", "-id")[:k]]

    if compared is not None:
        query_vector = compared.vector
    elif branch != "lexical":
        if query_vector is None:
            from memory.embeddings import embed_text

            query_vector = embed_text(text)
        if query_vector is not None:
            compared = index_for(owner.pk, agent).query(query_vector)
    vector: dict[int, float] = {}
    if branch == "fused" and isinstance(compared, PgQuery):
        # Both branches, their fusion and the turns' cues in one statement, in the database.
        found = hybrid(
            compared.index,
            fulltext.terms(text),
            compared.vector,
            CANDIDATES,
            VECTOR_WEIGHT,
            cues=cues_statement(owner, agent, text, FUSED_IDS),
        )
        vector, lexical = found.vector, found.lexical
        scores = cued(found.fused, found.cues, text)
    else:
        if lexical is None:  # asked while the vector product runs
            lexical = {} if branch == "vector" else lexical_finds(owner, agent, text, compared)
        if branch != "lexical" and compared is not None:
            vector = dict(compared.top(CANDIDATES, contextual=True))
        if branch == "fused" and lexical and compared is not None:
            # The cosine of the words' finds, for those with a vector.
            found_scores = compared.scores([i for i in lexical if i not in vector], True)
            vector.update(found_scores)
        scores = fuse(vector, lexical)
        if branch == "fused":
            scores = with_turn_cues(owner, agent, scores, text)
    hits: list[SearchHit] = []
    mine = {
        event.pk: event
        for event in known
        if event.owner_id == owner.pk and event.agent == agent and is_recalled(event)
    }

    def branches(event_id: int) -> dict[str, float]:
        return {
            name: found[event_id]
            for name, found in (("vector", vector), ("lexical", lexical))
            if event_id in found
        }

    accepted = None if wanted is None else (lambda i: wanted(i, branches(i)))
    for event in best_events(owned, scores, k, mine, accepted, shown):
        hits.append(SearchHit(event, scores[event.pk], branches(event.pk)))
    if branch == "fused" and files and query_vector is not None:
        return merge_by_similarity(hits, search_files(owner, agent, query_vector, k), k)
    return [*hits]


def lexical_finds(
    owner: Any, agent: str, text: str, compared: VectorQuery | PgQuery | None = None
) -> dict[int, float]:
    """The full-text branch's candidates: event id → BM25."""
    memories = None  # what SQLite's FTS5 query leaves common words out by
    if not in_database():
        memories = compared.count if compared is not None else index_for(owner.pk, agent).count()
    return dict(fulltext.search(owner.pk, agent, text, CANDIDATES, memories=memories))


def best_events(
    owned: Any,
    scores: dict[int, float],
    k: int,
    known: dict[int, Event] | None = None,
    wanted: Callable[[int], bool] | None = None,
    shown: int | None = None,
) -> list[Event]:
    """The `k` best-scored events of `owned`, best first (ties keep the branches'
    order), fetched a few at a time: only what is shown is read, without its vector,
    and only if it is not `known` (events of `owned` already read).
    `owned` drops the ids of other owners, agents or types. With `wanted`, only
    those of the k that it accepts, the first `shown` of them: the reading stops
    there, and the others are read only if they are not `known` (they still count
    among the k)."""
    known = known or {}
    ranked = sorted(scores, key=lambda i: -scores[i])
    shown = k if shown is None else min(k, shown)
    found: list[Event] = []  # of the k best, those wanted
    counted = start = 0  # the k best met so far; the next rank to read
    while counted < k and len(found) < shown and start < len(ranked):
        # Read up to the rank where, if every one of them exists, enough are wanted
        # or the k are complete.
        end, needed = start, shown - len(found)
        while end < len(ranked) and needed and end - start < k - counted:
            needed -= wanted is None or wanted(ranked[end])
            end += 1
        chunk = ranked[start:end]
        unread = [i for i in chunk if i not in known]
        events = owned.defer("embedding").in_bulk(unread) if unread else {}
        events.update((i, known[i]) for i in chunk if i in known)
        for i in chunk:
            if i in events and counted < k and len(found) < shown:
                counted += 1
                if wanted is None or wanted(i):
                    found.append(events[i])
        start = end
    return found


def fuse(vector: dict[int, float], lexical: dict[int, float]) -> dict[int, float]:
    """Event id → fused score in [0, 1] (see the module docstring). An event with
    no vector yet is scored by its words alone: no vector is no evidence against it.
    With one branch empty, the other's order is kept (BM25 over the best BM25)."""
    if not lexical:
        return vector
    best = max(lexical.values()) or 1.0
    if not vector:  # on the same scale as a fused score (memory.turns adds to it)
        return {i: score / best for i, score in lexical.items()}
    low, high = min(vector.values()), max(vector.values())
    spread = (high - low) or 1.0
    fused = {i: lexical.get(i, 0.0) / best for i in [*vector, *lexical]}
    for i, similarity in vector.items():
        fused[i] = VECTOR_WEIGHT * (similarity - low) / spread + (1 - VECTOR_WEIGHT) * fused[i]
    return fused


def merge_by_similarity(
    events: list[SearchHit], file_hits: list[FileHit], k: int
) -> list[SearchHit | FileHit]:
    """File hits inserted among the fused event hits by cosine similarity; the events
    keep their order, and those found by words alone (no vector yet) their place."""
    merged: list[SearchHit | FileHit] = []
    pending = list(file_hits)
    for hit in events:
        similarity = hit.branches.get("vector")
        while similarity is not None and pending and pending[0].score > similarity:
            merged.append(pending.pop(0))
        merged.append(hit)
    merged.extend(pending)
    return merged[:k]
