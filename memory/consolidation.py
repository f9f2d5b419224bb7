"""Consolidation: old conversation becomes a summary and facts; nothing is lost.

Every `consolidation_interval_hours` (and `manage.py consolidate`), per
session: the unconsolidated messages older than `consolidation_min_age_hours`
are claimed (so that no other worker takes them), summarised by the fast
model into a `summary` event (importance 0.8) with proposed facts, the facts
are merged (same category/key: updated; a near-duplicate value: skipped), and
the messages are marked `consolidated_at`. The originals stay. The writes
happen in one transaction after the model answered: a crash or a failed call
leaves the claim to expire and nothing half-written.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.history import Actor
from memory import recording
from memory.models import Event, EventType, Fact, transcript

log = logging.getLogger(__name__)

CLAIM_TIMEOUT = timedelta(minutes=30)
MAX_EVENTS = 400  # per session and run; the rest waits for the next run
TRANSCRIPT_CHARS = 40_000
PROMPT = (
    "Consolidate this conversation into long-term memory. Answer with JSON only, in this "
    'form: {"summary": "<a few sentences: what was discussed, decided, planned>", '
    '"facts": [{"category": "<e.g. person, preference, plan>", "key": "<short snake_case>", '
    '"value": "<the fact>"}]}. Facts are durable things about the user and their world; '
    "leave out small talk. Do not invent anything."
)
JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


class ConsolidationError(Exception):
    """The model could not be asked, or its answer could not be used."""


Complete = Callable[[list[dict[str, str]]], str]


@dataclass
class Proposal:
    summary: str
    facts: list[dict[str, str]] = field(default_factory=list)


@dataclass
class Report:
    sessions: int = 0
    events: int = 0
    summaries: int = 0
    facts_added: int = 0
    facts_updated: int = 0
    facts_skipped: int = 0
    failures: list[str] = field(default_factory=list)


def due_events() -> Any:
    options = settings.NEOTASK["memory"]
    now = timezone.now()
    cutoff = now - timedelta(hours=options["consolidation_min_age_hours"])
    return Event.objects.filter(
        Q(consolidation_claim__isnull=True) | Q(consolidation_claimed_at__lt=now - CLAIM_TIMEOUT),
        consolidated_at__isnull=True,
        event_type__in=EventType.TURNS,
        created_at__lte=cutoff,
    ).exclude(text="")


def claim(session_id: str, owner_id: int) -> tuple[uuid.UUID, list[Event]]:
    """Mark a session's due events as ours; another worker's claim is never taken."""
    token = uuid.uuid4()
    with transaction.atomic():
        ids = list(
            due_events()
            .filter(session_id=session_id, owner_id=owner_id)
            .order_by("created_at", "id")
            .values_list("id", flat=True)[:MAX_EVENTS]
        )
        # Conditional: a row claimed meanwhile by someone else is not ours.
        due_events().filter(pk__in=ids).update(
            consolidation_claim=token, consolidation_claimed_at=timezone.now()
        )
    events = list(Event.objects.filter(consolidation_claim=token).order_by("created_at", "id"))
    return token, events


def release(token: uuid.UUID) -> None:
    Event.objects.filter(consolidation_claim=token, consolidated_at__isnull=True).update(
        consolidation_claim=None, consolidation_claimed_at=None
    )


def parse(answer: str) -> Proposal:
    found = JSON_OBJECT.search(answer or "")
    try:
        document = json.loads(found.group(0)) if found else None
    except ValueError:
        document = None
    if not isinstance(document, dict) or not str(document.get("summary", "")).strip():
        raise ConsolidationError("the model did not answer with the expected JSON")
    facts = []
    for item in document.get("facts") or []:
        if not isinstance(item, dict):
            continue
        category, key, value = (str(item.get(k, "")).strip() for k in ("category", "key", "value"))
        if category and key and value:
            facts.append(
                {
                    "category": Fact.normalise(category)[:100],
                    "key": Fact.normalise(key)[:255],
                    "value": value,
                }
            )
    return Proposal(str(document["summary"]).strip(), facts)


def propose(events: list[Event], complete: Complete) -> Proposal:
    messages = [
        {"role": "system", "content": PROMPT},
        {"role": "user", "content": transcript(events, TRANSCRIPT_CHARS)},
    ]
    return parse(complete(messages))


def is_near_duplicate(owner_id: int, value: str, threshold: float) -> bool:
    """True if a stored fact of this owner says nearly the same thing."""
    from memory.embeddings import embed_texts

    stored = list(Fact.objects.filter(owner_id=owner_id).values_list("value", flat=True)[:500])
    if not stored:
        return False
    vectors = embed_texts([value, *stored])
    return bool(np.max(vectors[1:] @ vectors[0]) >= threshold)


def merge_facts(
    summary: Event, facts: list[dict[str, str]], report: Report, unverified: bool = False
) -> None:
    """The summary's proposed facts merged into its owner's, each linked to it;
    `unverified` when what it condensed holds imported events (outside text: the
    prompt shows such a fact as unverified data, as one a click let through)."""
    owner_id = summary.owner_id
    threshold = settings.NEOTASK["memory"]["fact_duplicate_similarity"]
    for fact in facts:
        existing = Fact.objects.filter(
            owner_id=owner_id, category=fact["category"], key=fact["key"]
        ).first()
        if existing is not None and existing.value == fact["value"]:
            report.facts_skipped += 1
            continue
        if existing is None and is_near_duplicate(owner_id, fact["value"], threshold):
            report.facts_skipped += 1
            continue
        Fact.objects.remember(
            summary.owner,
            fact["category"],
            fact["key"],
            fact["value"],
            actor=Actor.system("consolidation"),
            source=Fact.Source.AGENT,
            origin=Fact.Origin.CONSOLIDATION,
            origin_event_id=summary.pk,
            origin_session_id=summary.session_id,
            unverified=unverified,
        )
        if existing is None:
            report.facts_added += 1
        else:
            report.facts_updated += 1


def consolidate_session(session_id: str, owner_id: int, complete: Complete, report: Report) -> None:
    token, events = claim(session_id, owner_id)
    if not events:
        return
    try:
        proposal = propose(events, complete)
        with transaction.atomic():
            summary = recording.record(
                events[0].owner,
                session_id,
                EventType.SUMMARY,
                {
                    "content": proposal.summary,
                    "first_event_id": events[0].pk,
                    "last_event_id": events[-1].pk,
                    "events": len(events),
                    "facts": proposal.facts,
                },
                agent=events[0].agent,
                created_at=events[-1].created_at,
            )
            summary.condensed.set(events)
            imported = any(event.imported_from for event in events)
            merge_facts(summary, proposal.facts, report, unverified=imported)
            Event.objects.filter(consolidation_claim=token).update(
                consolidated_at=timezone.now(), consolidation_claim=None
            )
    except ConsolidationError as exc:
        release(token)
        report.failures.append(f"session {session_id}: {exc}")
        log.warning("consolidation of session %s failed: %s", session_id, exc)
        return
    except BaseException:
        release(token)
        raise
    report.sessions += 1
    report.events += len(events)
    report.summaries += 1


def consolidate(complete: Complete, owner_id: int | None = None) -> Report:
    """One consolidation run over every session with due messages. `complete`
    sends chat messages to the fast model and returns its answer (the agent app
    provides it; memory knows no LLM), raising ConsolidationError on failure."""
    report = Report()
    sessions = due_events()
    if owner_id is not None:
        sessions = sessions.filter(owner_id=owner_id)
    pairs = sessions.order_by().values_list("session_id", "owner_id").distinct()
    for session_id, owner in list(pairs):
        consolidate_session(session_id, owner, complete, report)
    return report
