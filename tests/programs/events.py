"""Events: written as a chat or an old conversation leaves them, and read back."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import numpy as np
from django.contrib.auth import get_user_model
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.models import Failure, Success

from memory import recording
from memory.embeddings import embed_texts
from memory.models import Event, EventType, Fact
from memory.tasks import embed_missing
from memory.vectors import unpack
from sessions_app.models import Session


def of_chats(keys: list[str]) -> dict[str, list[list[Any]]]:
    """Each chat's events, by chat key, oldest first: [event type, text, data]
    (a chat that started over has several sessions)."""
    chats: dict[str, list[list[Any]]] = {}
    for key in keys:
        sessions = [str(pk) for pk in Session.objects.filter(key=key).values_list("pk", flat=True)]
        events = Event.objects.filter(session_id__in=sessions).order_by("id")
        chats[key] = [[e.event_type, e.text, e.data] for e in events]
    return chats


def store(count: int) -> None:
    """`count` distinct messages of a new user, each queueing its own embedding job."""
    user = get_user_model().objects.create_user("embedder")
    for number in range(count):
        text = f"note {number}: the fault suite stored this about topic {number % 7}"
        recording.record(user, "fault-session", EventType.USER_MESSAGE, {"content": text})


def sweep_and_check() -> dict[str, Any]:
    """The job cluster's minute sweep, run once here, and how the events' embeddings
    look after it; the jobs a dead cluster left queued go."""
    swept = embed_missing()
    events = list(Event.objects.order_by("id"))
    embedded = [e for e in events if e.embedding is not None]
    stored = np.stack([unpack(e.embedding) for e in embedded])
    fresh = embed_texts([e.text for e in embedded])
    get_broker().purge_queue()
    return {
        "swept": swept,
        "texts": [e.text for e in events],
        "embedded": len(embedded),
        "dimensions": sorted({len(bytes(e.embedding)) // 4 for e in embedded}),
        "errors": [e.embedding_error for e in events if e.embedding_error],
        "min_cosine_to_fresh": float((stored * fresh).sum(axis=1).min()),
    }


def old_chat(username: str) -> list[str]:
    """A conversation of the user's two days ago (session "old-chat"): its texts."""
    owner = get_user_model().objects.get(username=username)
    lines = [
        ("user_message", "I am going to Porto in May."),
        ("assistant_response", "Lovely. For how long?"),
        ("user_message", "Two weeks, by train."),
        ("assistant_response", "Then book the night train early."),
    ]
    for number, (kind, text) in enumerate(lines):
        event = recording.record(owner, "old-chat", kind, {"content": text})
        Event.objects.filter(pk=event.pk).update(
            created_at=timezone.now() - timedelta(days=2) + timedelta(minutes=number)
        )
    return [text for _, text in lines]


def consolidated() -> dict[str, Any]:
    """What consolidation made of the "old-chat" session."""
    events = Event.objects.filter(session_id="old-chat")
    return {
        "summaries": list(events.filter(event_type="summary").values_list("text", flat=True)),
        "unconsolidated": events.exclude(event_type="summary")
        .filter(consolidated_at__isnull=True)
        .count(),
        "claimed": events.filter(consolidation_claim__isnull=False).count(),
        "facts": list(Fact.objects.filter(key="may_trip").values_list("value", flat=True)),
    }


def embeddings() -> dict[str, Any]:
    """Every event with content, and what embedded it: the jobs (how many asked for
    each event, how many vectors they wrote), the sweep, the turns."""
    events = Event.objects.filter(event_type__in=EventType.CONTENT).exclude(text="")
    jobs: dict[str, int] = {}
    by_jobs = 0
    for job in Success.objects.filter(func="memory.tasks.embed_events"):
        by_jobs += job.result or 0
        for pk in job.args[0]:
            jobs[str(pk)] = jobs.get(str(pk), 0) + 1
    # A turn embeds its user message itself (for recall) and stores that vector.
    in_turn = events.filter(event_type="user_message", data__has_key="turn_usage")
    return {
        "events": [str(pk) for pk in events.values_list("id", flat=True)],
        "in_turn": [str(pk) for pk in in_turn.values_list("id", flat=True)],
        "missing": events.filter(embedding__isnull=True).count(),
        "jobs": jobs,
        "by_jobs": by_jobs,
        "swept": sum(r.result or 0 for r in Success.objects.filter(func="memory.tasks.sweep")),
        "failures": Failure.objects.filter(func__startswith="memory.tasks.embed").count(),
    }
