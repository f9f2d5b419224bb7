"""Working memory: each session's recent events, kept in process.

Recent history then needs no query beyond a cheap version check: the
(count, newest id) of the session's events. If another process wrote to the
session meanwhile, the check differs and the deque is rebuilt from the
database, which is always the truth.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Count, Expression, Max, Subquery
from django.db.models.functions import Coalesce

from core.ownership import Owner
from memory.models import Event, EventType

MAX_SESSIONS = 2000  # sessions kept per process; the least recently used go first


@dataclass
class Entry:
    marker: tuple[int, int]
    events: deque[Event]


class WorkingMemory:
    def __init__(self) -> None:
        # Keyed by owner too: two owners may hold events under the same session id
        # (imported or legacy ids), and one's cached events must never serve the other.
        self.sessions: OrderedDict[tuple[int, str], Entry] = OrderedDict()
        self.lock = threading.Lock()
        self.rebuilds = 0  # for tests and the benchmark

    @staticmethod
    def cap() -> int:
        return settings.NEOTASK["memory"]["working_memory_cap"]

    @staticmethod
    def rows(owner: Owner, session_id: str):  # -> QuerySet[Event]
        return Event.objects.filter(
            owner=owner, session_id=session_id, event_type__in=EventType.CONTENT
        )

    def marker(self, owner: Owner, session_id: str) -> tuple[int, int]:
        found = self.rows(owner, session_id).aggregate(count=Count("id"), newest=Max("id"))
        return found["count"], found["newest"] or 0

    @staticmethod
    def marker_of(owner_id: Any, session_id: Any) -> tuple[Expression, Expression]:
        """`marker`'s two numbers as expressions, for a query that reads something
        else of the session (its row: sessions_app.models.SessionQuerySet.active)."""
        rows = Event.objects.filter(
            owner_id=owner_id, session_id=session_id, event_type__in=EventType.CONTENT
        )
        grouped = rows.order_by().values("owner_id")
        count = Subquery(grouped.annotate(count=Count("id")).values("count"))
        newest = Subquery(grouped.annotate(newest=Max("id")).values("newest"))
        return Coalesce(count, 0), Coalesce(newest, 0)

    def recent(
        self, owner: Owner, session_id: str, limit: int, marker: tuple[int, int] | None = None
    ) -> list[Event]:
        """The session's last `limit` conversation events, oldest first. `marker`:
        the session's, if the caller read it with something else (a turn, with its
        session's row, agent.runtime.Before)."""
        marker = marker or self.marker(owner, session_id)
        key = (owner.pk, session_id)
        with self.lock:
            entry = self.sessions.get(key)
            if entry is not None and entry.marker == marker:
                self.sessions.move_to_end(key)
                return list(entry.events)[-limit:] if limit else []
        events = list(reversed(self.rows(owner, session_id).order_by("-id")[: self.cap()]))
        with self.lock:
            self.rebuilds += 1
            self.sessions[key] = Entry(marker, deque(events, maxlen=self.cap()))
            while len(self.sessions) > MAX_SESSIONS:
                self.sessions.popitem(last=False)
        return events[-limit:] if limit else []

    def remember(self, event: Event) -> None:
        """Add a just-stored event, if the cached session is otherwise current."""
        if event.event_type not in EventType.CONTENT:
            return
        key = (event.owner_id, event.session_id)
        with self.lock:
            entry = self.sessions.get(key)
            if entry is None:
                return
            count, newest = entry.marker
            if event.pk > newest:
                entry.events.append(event)
                entry.marker = (count + 1, event.pk)
            else:
                del self.sessions[key]  # out of order: rebuild on next read

    def forget(self, owner_id: int, session_ids: set[str]) -> None:
        """Drop these sessions' cached events (some were deleted). Other processes
        see a smaller count in their version check and rebuild."""
        with self.lock:
            for session_id in session_ids:
                self.sessions.pop((owner_id, session_id), None)

    def clear(self) -> None:
        with self.lock:
            self.sessions.clear()


working_memory = WorkingMemory()
