"""Retrieval quality: recall@k of each search branch on a conversation dataset
(memory.evaluation), and what of it reaches the agent's prompt.

Each question is asked of every branch of the memory search, and recall@k is
the share of evidence turns found in the top k. Then the agent's context: each
question is sent as the first message of a fresh session, as a chat turn handles
it (the message stored with its vector, auto-recall, `get_context`), and
`context.recall` is the share of evidence turns that reach the prompt, with the
memory items and tokens that took; both also per question category, when the
dataset names them (worded as agent.prompt words them: so this
sits in agent, above memory).
"""

from __future__ import annotations

from typing import Any

from agent.prompt import memory_blocks
from core.ownership import Owner
from core.progress import Progress
from memory import recording
from memory.embeddings import embed_text
from memory.evaluation import category_of, ingest, throwaway_user
from memory.models import Event, EventType
from memory.recall import record_recall
from memory.retrieval import estimate_tokens, get_context
from memory.search import BRANCHES, SearchHit, search_memory
from memory.tasks import embedding_queue_paused
from memory.vector_index import forget_indexes
from memory.workspace import DEFAULT_AGENT


def context_probe(user: Owner, conversation_id: str, number: int, question: str) -> dict[str, Any]:
    """What a fresh session's first turn puts into the prompt for `question`."""
    session_id = f"{conversation_id}:probe-{number}"
    query_vector = embed_text(question)
    with embedding_queue_paused():
        recording.record(
            user, session_id, EventType.USER_MESSAGE, {"content": question}, vector=query_vector
        )
        record_recall(user, DEFAULT_AGENT, session_id, question, query_vector)
    context = get_context(user, session_id, question, query_vector=query_vector)
    recalled_ids = [item["event_id"] for item in context.session_recall if "event_id" in item]
    recalled_ids += [item.event.pk for item in context.recalled]
    turn_ids = {event.data.get("turn_id") for event in Event.objects.filter(pk__in=recalled_ids)}
    items = len(context.session_recall) + len(context.recalled)
    tokens = sum(estimate_tokens(block) for block in memory_blocks(context))
    # The probe is gone before the next question: no later one may recall it.
    Event.objects.filter(owner=user, session_id=session_id).delete()
    forget_indexes()
    return {"turn_ids": turn_ids, "items": items, "tokens": tokens}


def evaluate(
    conversations: list[dict[str, Any]],
    ks: list[int],
    progress: Progress | None = None,
) -> dict[str, Any]:
    depth = max(ks)
    found: dict[str, dict[int, float]] = {b: dict.fromkeys(ks, 0.0) for b in BRANCHES}
    questions = 0
    in_context = items = tokens = 0.0
    # Per category (when the dataset names them): questions, fused recall@k, context.
    by_category: dict[str, dict[str, Any]] = {}
    for conversation in conversations:
        with throwaway_user() as user:
            ingest(user, conversation)
            for number, question in enumerate(conversation["questions"]):
                evidence = set(question["evidence"])
                questions += 1
                category = category_of(question)
                if category is not None:
                    counts = by_category.setdefault(
                        category, {"questions": 0, "fused": dict.fromkeys(ks, 0.0), "context": 0.0}
                    )
                    counts["questions"] += 1
                for branch in BRANCHES:
                    hits = search_memory(
                        user, question["question"], k=depth, branch=branch, files=False
                    )
                    ranked = [
                        hit.event.data.get("turn_id") for hit in hits if isinstance(hit, SearchHit)
                    ]
                    for k in ks:
                        share = len(evidence & set(ranked[:k])) / len(evidence)
                        found[branch][k] += share
                        if category is not None and branch == "fused":
                            counts["fused"][k] += share
                probe = context_probe(user, conversation["id"], number, question["question"])
                share = len(evidence & probe["turn_ids"]) / len(evidence)
                in_context += share
                if category is not None:
                    counts["context"] += share
                items += probe["items"]
                tokens += probe["tokens"]
                if progress:
                    progress(1)
    asked = max(questions, 1)
    return {
        "conversations": len(conversations),
        "questions": questions,
        "k": ks,
        "recall": {
            branch: {str(k): round(found[branch][k] / asked, 4) for k in ks} for branch in BRANCHES
        },
        "context": {
            "recall": round(in_context / asked, 4),
            "mean_items": round(items / asked, 2),
            "mean_tokens": round(tokens / asked, 1),
        },
        "categories": {
            name: {
                "questions": counts["questions"],
                "fused": {str(k): round(counts["fused"][k] / counts["questions"], 4) for k in ks},
                "context": round(counts["context"] / counts["questions"], 4),
            }
            for name, counts in sorted(by_category.items())
        },
    }
