"""The datasets of memory's evaluation and benchmarks (docs/memory.md): conversations
between two named people and questions with the ids of the turns that answer
them, each conversation written through the real write path (events, then
embeddings) into a throw-away user. `manage.py memory_eval` (agent.memory_eval)
measures recall on them.
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

from core.ownership import Owner
from memory import recording
from memory.models import EventType
from memory.tasks import embed_missing, embedding_queue_paused
from memory.vector_index import forget_indexes


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
            category = question.get("category")
            if category is not None and (
                isinstance(category, bool) or not isinstance(category, str | int)
            ):
                raise DatasetError(f"{where}: a question's category must be a string or number")
    return conversations


# LoCoMo numbers its question categories (its paper, and the evaluations that
# cite it); memory_eval reports them by name.
LOCOMO_CATEGORIES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}


def category_of(question: dict[str, Any]) -> str | None:
    category = question.get("category")
    if category is None:
        return None
    return LOCOMO_CATEGORIES.get(category, str(category))


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
