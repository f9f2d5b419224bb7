"""Retrieval quality: recall@k of each search branch on a conversation dataset.

The dataset (docs/memory.md) holds conversations between two named people and
questions with the ids of the turns that answer them. Each conversation is
written through the real write path (events, then embeddings) into a
throw-away user, each question is asked of every branch of the memory
search, and recall@k is the share of evidence turns found in the top k.

Then the agent's context: each question is sent as the first message of a
fresh session, as a chat turn handles it (the message stored with its vector,
auto-recall, `get_context`), and `context.recall` is the share of evidence
turns that reach the prompt, with the memory items and tokens that took.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model

from agent.prompt import memory_blocks  # the prompt as a turn words it
from core.ownership import Owner
from core.progress import Progress
from memory import recording
from memory.embeddings import embed_text
from memory.models import Event, EventType
from memory.recall import record_recall
from memory.retrieval import estimate_tokens, get_context
from memory.search import BRANCHES, SearchHit, search_memory
from memory.tasks import embed_missing, embedding_queue_paused
from memory.vector_index import forget_indexes
from memory.workspace import DEFAULT_AGENT


class DatasetError(ValueError):
    """The dataset file is not of the documented form; the message says where."""


def load_dataset(path: Path) -> list[dict[str, Any]]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DatasetError(f"{path}: cannot be read ({exc.strerror})") from None
    except ValueError as exc:
        raise DatasetError(f"{path}: not valid JSON ({exc})") from None
    conversations = document.get("conversations") if isinstance(document, dict) else None
    if not isinstance(conversations, list) or not conversations:
        raise DatasetError(f'{path}: expected {{"conversations": [...]}} with at least one')
    for number, conversation in enumerate(conversations, start=1):
        where = f"{path}: conversation #{number}"
        if not isinstance(conversation, dict):
            raise DatasetError(f"{where} is not an object")
        for key in ("id", "turns", "questions"):
            if key not in conversation:
                raise DatasetError(f"{where} has no {key!r}")
        if not isinstance(conversation["id"], str):
            raise DatasetError(f"{where}: its id must be a string")
        for key in ("turns", "questions"):
            if not isinstance(conversation[key], list):
                raise DatasetError(f"{where}: {key!r} must be a list")
        turn_ids = set()
        for turn in conversation["turns"]:
            if not isinstance(turn, dict) or not all(
                isinstance(turn.get(k), str) for k in ("id", "speaker", "text")
            ):
                raise DatasetError(f"{where}: every turn needs string id, speaker and text")
            try:
                timestamp(turn.get("timestamp"))
            except (TypeError, ValueError):
                raise DatasetError(
                    f"{where}: turn {turn['id']} has a timestamp that is not ISO 8601"
                ) from None
            turn_ids.add(turn["id"])
        for question in conversation["questions"]:
            evidence = question.get("evidence") if isinstance(question, dict) else None
            if (
                not isinstance(question, dict)
                or not isinstance(question.get("question"), str)
                or not isinstance(evidence, list)
                or not evidence
                or not all(isinstance(e, str) for e in evidence)
            ):
                raise DatasetError(
                    f"{where}: every question needs a question and a list of evidence turn ids"
                )
            if missing := set(evidence) - turn_ids:
                raise DatasetError(f"{where}: evidence {sorted(missing)} names no turn")
    return conversations


def timestamp(raw: str | None) -> datetime:
    if not raw:
        return datetime.now(UTC)
    value = datetime.fromisoformat(raw)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


@contextmanager
def throwaway_user() -> Iterator[Any]:
    user = get_user_model().objects.create(
        username=f"memory-eval-{uuid.uuid4().hex[:12]}", is_active=False
    )
    try:
        yield user
    finally:
        user.delete()
        forget_indexes()


def ingest(user: Owner, conversation: dict[str, Any]) -> None:
    with embedding_queue_paused():
        for turn in conversation["turns"]:
            session = turn["id"].split(":", 1)[0]
            recording.record(
                user,
                f"{conversation['id']}:{session}",
                EventType.USER_MESSAGE,
                {
                    "content": turn["text"],
                    "speaker": turn["speaker"],
                    "turn_id": turn["id"],
                },
                created_at=timestamp(turn.get("timestamp")),
            )
    embed_missing()


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
    for conversation in conversations:
        with throwaway_user() as user:
            ingest(user, conversation)
            for number, question in enumerate(conversation["questions"]):
                evidence = set(question["evidence"])
                questions += 1
                for branch in BRANCHES:
                    hits = search_memory(
                        user, question["question"], k=depth, branch=branch, files=False
                    )
                    ranked = [
                        hit.event.data.get("turn_id") for hit in hits if isinstance(hit, SearchHit)
                    ]
                    for k in ks:
                        found[branch][k] += len(evidence & set(ranked[:k])) / len(evidence)
                probe = context_probe(user, conversation["id"], number, question["question"])
                in_context += len(evidence & probe["turn_ids"]) / len(evidence)
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
    }
