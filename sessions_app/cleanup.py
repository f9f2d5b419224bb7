"""Cleanup: sessions nobody has used for `cleanup_after_days` are candidates
for deletion (with their events). Archived sessions — the transcripts that
resets and compactions leave behind — are kept unless chosen explicitly."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, QuerySet, Sum, TextField
from django.db.models.functions import Cast, Coalesce, Length
from django.utils import timezone

from core.history import Actor
from memory.forgetting import forget_sessions
from memory.models import Event
from sessions_app.models import Session

log = logging.getLogger(__name__)

CLEANUP_SCHEDULE = "sessions: clean up idle sessions"
CLEANUP = Actor.system("session cleanup")
# Ids per query when measuring events: well under every database's parameter limit.
ID_BATCH = 500
MAX_SELECTED = 1000


@dataclass(frozen=True)
class Candidate:
    session: Session
    events: int
    size: int  # characters of the events' text and data: roughly their bytes

    @property
    def archived(self) -> bool:
        return self.session.status == Session.Status.ARCHIVED


@dataclass(frozen=True)
class Selection:
    """The candidates a request picked, and how many of its ids matched none
    (malformed, unknown, someone else's, or in use again since)."""

    candidates: list[Candidate] = field(default_factory=list)
    ignored: int = 0

    @property
    def events(self) -> int:
        return sum(candidate.events for candidate in self.candidates)

    @property
    def size(self) -> int:
        return sum(candidate.size for candidate in self.candidates)


def configured_days() -> int:
    return settings.NEOTASK["sessions"]["cleanup_after_days"]


def candidate_sessions(
    sessions: QuerySet[Session],
    days: int,
    include_archived: bool = False,
    now: datetime | None = None,
) -> QuerySet[Session]:
    """Those of `sessions` not active in the last `days` days, longest idle first."""
    cutoff = (now or timezone.now()) - timedelta(days=days)
    candidates = sessions.filter(last_activity_at__lt=cutoff)
    if not include_archived:
        candidates = candidates.exclude(status=Session.Status.ARCHIVED)
    return candidates.select_related("owner").order_by("last_activity_at", "pk")


def measure(sessions: QuerySet[Session]) -> list[Candidate]:
    """Each session with the number and approximate size of its events."""
    found = list(sessions)
    stats: dict[str, dict[str, int]] = {}
    for start in range(0, len(found), ID_BATCH):
        stats.update(event_stats(found[start : start + ID_BATCH]))
    empty = {"events": 0, "size": 0}
    return [Candidate(session, **stats.get(str(session.pk), empty)) for session in found]


def event_stats(sessions: list[Session]) -> dict[str, dict[str, int]]:
    stats: dict[str, dict[str, int]] = {}
    owners = {session.owner_id: session.owner for session in sessions}
    size = Length("text") + Length(Cast("data", TextField()))
    for owner in owners.values():
        ids = [str(session.pk) for session in sessions if session.owner_id == owner.pk]
        rows = (
            Event.objects.owned_by(owner)
            .filter(session_id__in=ids)
            .values("session_id")
            .annotate(events=Count("id"), size=Coalesce(Sum(size), 0))
            .order_by()
        )
        stats.update({row.pop("session_id"): row for row in rows})
    return stats


def parse_ids(values: Iterable[str]) -> tuple[set[uuid.UUID], int]:
    """The well-formed session ids among `values`, and how many were not."""
    ids: set[uuid.UUID] = set()
    malformed = 0
    for value in values:
        try:
            ids.add(uuid.UUID(str(value).strip()))
        except ValueError:
            malformed += 1
    return ids, malformed


def select(sessions: QuerySet[Session], values: list[str], days: int) -> Selection:
    """The candidates among `sessions` that `values` name. Archived ones count:
    naming a session is choosing it explicitly."""
    ids, malformed = parse_ids(values[:MAX_SELECTED])
    chosen = candidate_sessions(sessions, days, include_archived=True).filter(pk__in=ids)
    candidates = measure(chosen)
    ignored = malformed + len(ids) - len(candidates) + max(0, len(values) - MAX_SELECTED)
    return Selection(candidates, ignored)


def remove(sessions: QuerySet[Session], candidates: list[Candidate]) -> None:
    """Delete the candidates among `sessions` with their events: each owner's
    forgotten at once (memory.forgetting), rather than a session at a time by
    sessions_app.signals, which then finds none left."""
    chosen = sessions.filter(pk__in=[candidate.session.pk for candidate in candidates])
    owners: dict[int, list[Candidate]] = {}
    for candidate in candidates:
        owners.setdefault(candidate.session.owner_id, []).append(candidate)
    for owned in owners.values():
        owner = owned[0].session.owner
        forget_sessions(owner, [str(c.session.pk) for c in owned], CLEANUP)
    chosen.delete()


def remove_selected(sessions: QuerySet[Session], values: list[str], days: int) -> Selection:
    with transaction.atomic():
        selection = select(sessions, values, days)
        remove(sessions, selection.candidates)
    return selection


def remove_candidates(
    sessions: QuerySet[Session], days: int, include_archived: bool
) -> list[Candidate]:
    """Measure and delete every candidate in one transaction: what was removed."""
    with transaction.atomic():
        candidates = measure(candidate_sessions(sessions, days, include_archived))
        remove(sessions, candidates)
    return candidates


def scheduled_cleanup() -> str:
    """The daily job: report the candidates, and delete them only when
    [sessions] cleanup_delete is set."""
    days = configured_days()
    if settings.NEOTASK["sessions"]["cleanup_delete"]:
        removed = remove_candidates(Session.objects.all(), days, include_archived=False)
        summary = f"removed {describe(removed)} idle for {days}+ days"
    else:
        found = measure(candidate_sessions(Session.objects.all(), days))
        summary = (
            f"{describe(found)} idle for {days}+ days would be removed "
            "(report only: set [sessions] cleanup_delete = true to delete)"
        )
    log.info("session cleanup: %s", summary)
    return summary


def describe(candidates: list[Candidate]) -> str:
    total = Selection(candidates)
    return (
        f"{len(candidates)} session{'s' * (len(candidates) != 1)} "
        f"({total.events} event{'s' * (total.events != 1)}, ~{total.size} bytes)"
    )


def install_schedule(sender: Any, **kwargs: Any) -> None:
    """The daily cleanup job (created once, kept in sync)."""
    from django_q.models import Schedule

    Schedule.objects.update_or_create(
        name=CLEANUP_SCHEDULE,
        defaults={
            "func": "sessions_app.cleanup.scheduled_cleanup",
            "schedule_type": Schedule.DAILY,
            "repeats": -1,
        },
    )
