"""Memory search: vector similarity, full-text (BM25) and their fusion.

Each branch ranks the owner's events on its own; the fused ranking scores an
event by Σ 1 / (RRF_K + rank) over the branches that found it (reciprocal
rank fusion). What the lexical branch may contribute was decided by
`memory_eval` on tests/data/memory_eval.json (README, "Memory"): fused with
OpenClaw's 0.7/0.3 weights it lost 11 points of recall@10 against vector
alone, and no weighting beat vector alone at recall@10. So the fused ranking
takes from the lexical branch only the events the vector branch cannot see:
those without an embedding yet (just written, or whose embedding failed).
`branch` also runs one branch alone; "recency" is the evaluation's baseline.

The fused ranking also searches the agent's memory files (`memory.files`) and merges
their chunks with the events by cosine similarity, each hit citing its source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memory import fulltext
from memory.files import FileHit, search_files
from memory.models import Event
from memory.retrieval import MAX_QUERY_CHARS, MEMORY_TYPES
from memory.vector_index import index_for

RRF_K = 60
CANDIDATES = 50  # per branch, before fusing
UNEMBEDDED = 500  # at most this many not-yet-embedded events are searched by words
BRANCHES = ("fused", "vector", "lexical", "recency")


@dataclass
class SearchHit:
    event: Event
    score: float
    branches: dict[str, float] = field(default_factory=dict)  # branch → its own score
    kind: str = field(default="event", init=False)

    @property
    def source(self) -> str:
        return f"session {self.event.session_id}, event {self.event.pk}"


def search_memory(
    owner: Any,
    query: str,
    k: int = 10,
    agent: str = "main",
    branch: str = "fused",
    query_vector: np.ndarray | None = None,
    files: bool = True,
) -> list[SearchHit | FileHit]:
    if branch not in BRANCHES:
        raise ValueError(f"branch must be one of {', '.join(BRANCHES)}")
    text = (query or "").strip()[:MAX_QUERY_CHARS]
    if k <= 0 or (not text and branch != "recency"):
        return []
    owned = Event.objects.owned_by(owner).filter(agent=agent, event_type__in=MEMORY_TYPES)
    if branch == "recency":
        return [SearchHit(e, 0.0) for e in owned.order_by("-created_at", "-id")[:k]]

    ranked: dict[str, list[tuple[int, float]]] = {}
    if branch in ("fused", "vector"):
        if query_vector is None:
            from memory.embeddings import embed_text

            query_vector = embed_text(text)
        ranked["vector"] = index_for(owner.pk, agent).search(query_vector, CANDIDATES)
    if branch == "lexical":
        ranked["lexical"] = fulltext.search(owner.pk, agent, text, MEMORY_TYPES, CANDIDATES)
    elif branch == "fused":
        # Usually none or a few (the embedding jobs keep up): then no full-text
        # query is needed at all.
        unembedded = list(
            owned.filter(embedding__isnull=True)
            .order_by("id")  # lets the planner use the partial index of these rows
            .values_list("pk", flat=True)[:UNEMBEDDED]
        )
        if unembedded:
            ranked["lexical"] = fulltext.search(
                owner.pk, agent, text, MEMORY_TYPES, CANDIDATES, only_ids=unembedded
            )

    scores: dict[int, float] = {}
    own_scores: dict[int, dict[str, float]] = {}
    for name, results in ranked.items():
        for rank, (event_id, score) in enumerate(results, start=1):
            scores[event_id] = scores.get(event_id, 0.0) + 1 / (RRF_K + rank)
            own_scores.setdefault(event_id, {})[name] = score
    events = owned.in_bulk(list(scores))  # drops ids of other owners, agents or types
    hits = [SearchHit(events[i], scores[i], own_scores[i]) for i in scores if i in events]
    hits.sort(key=lambda hit: -hit.score)
    if branch == "fused" and files and query_vector is not None:
        return merge_by_similarity(hits, search_files(owner, agent, query_vector, k), k)
    return hits[:k]


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
