"""Background jobs of the memory: embedding every stored message.

Each stored message asks for its embedding through one entrance,
`request_embeddings` (django-q2); the requests a process makes within half a
second go out as one job. A sweep every minute embeds whatever is still
missing, so nothing is lost when a worker dies or the broker is down. Failures
are recorded on the event and retried with exponential backoff.
A message's whole path, end to end: docs/chat-runtime.md#events-and-memory.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.db import close_old_connections, connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from core.progress import Progress
from memory.fulltext import WORDS_TABLE
from memory.models import Event, EventType
from memory.search_keys import KEY_VERSION
from memory.vectors import pack

log = logging.getLogger(__name__)

BATCH_SIZE = 32
KEY_FIELDS = ("speaker", "search_key", "search_context", "key_version")
MAX_ATTEMPTS = 8
SWEEP_SCHEDULE = "memory: embed missing events"
SWEEP_GRACE = timedelta(minutes=1)
FILES_SCHEDULE = "memory: re-index changed memory files"
ANALYZE_SCHEDULE = "database: refresh planner statistics"
PRUNE_SCHEDULE = "memory: prune the log of deleted events"


def backoff(attempts: int) -> timedelta:
    return timedelta(minutes=min(2**attempts, 24 * 60))


def needs_embedding() -> QuerySet[Event]:
    """Events without a vector, or keyed by an older recipe (memory.search_keys): the
    latter keep their old key and vector until the new ones are stored."""
    now = timezone.now()
    return (
        Event.objects.filter(event_type__in=EventType.CONTENT)
        .filter(Q(embedding__isnull=True) | Q(key_version__lt=KEY_VERSION))
        .exclude(text="")
        .filter(embedding_attempts__lt=MAX_ATTEMPTS)
        .filter(Q(embedding_retry_at__isnull=True) | Q(embedding_retry_at__lte=now))
    )


def embed_events(ids: list[int]) -> int:
    """Embed these events (those without a vector or with a stale key, which
    is made anew first); returns how many."""
    from memory.embeddings import embed_texts

    events = list(
        Event.objects.filter(pk__in=ids)
        .filter(Q(embedding__isnull=True) | Q(key_version__lt=KEY_VERSION))
        .only("id", "owner_id", "session_id", "event_type", "text", "data", *KEY_FIELDS)
    )
    if not events:
        return 0
    stale = {event.pk: event.key_version for event in events if event.key_version < KEY_VERSION}
    for event in events:
        if event.pk in stale:
            event.set_keys(event.previous_turn_text())
    try:
        vectors = embed_texts([event.key_text for event in events])
    except Exception as exc:
        log.exception("embedding %d events failed", len(events))
        for event in Event.objects.filter(pk__in=[e.pk for e in events]):
            attempts = event.embedding_attempts + 1
            Event.objects.filter(pk=event.pk).update(
                embedding_attempts=attempts,
                embedding_error=f"{type(exc).__name__}: {exc}"[:2000],
                embedding_retry_at=timezone.now() + backoff(attempts),
            )
        return 0
    now = timezone.now()
    done = 0
    for event, vector in zip(events, vectors, strict=True):
        # Conditional: two workers on the same event write it once. A new key
        # and its vector are stored together, in place of the old ones.
        if event.pk in stale:
            unchanged: dict[str, Any] = {"key_version": stale[event.pk]}
            keys = {field: getattr(event, field) for field in KEY_FIELDS}
        else:
            unchanged, keys = {"embedding__isnull": True}, {}
        done += Event.objects.filter(pk=event.pk, **unchanged).update(
            embedding=pack(vector),
            embedded_at=now,
            embedding_error=None,
            embedding_retry_at=None,
            **keys,
        )
    return done


def embed_event(event_id: int) -> int:
    return embed_events([event_id])


def embed_missing(
    limit: int | None = None,
    progress: Progress | None = None,
    created_before: datetime | None = None,
) -> int:
    """Embed every event still missing a vector (stored before `created_before`,
    if given), in batches; returns how many were embedded."""
    tried = embedded = 0
    while limit is None or tried < limit:
        size = BATCH_SIZE if limit is None else min(BATCH_SIZE, limit - tried)
        missing = needs_embedding()
        if created_before is not None:
            missing = missing.filter(created_at__lt=created_before)
        ids = list(missing.order_by("id").values_list("id", flat=True)[:size])
        if not ids:
            break
        done = embed_events(ids)
        tried += len(ids)
        embedded += done
        if progress:
            progress(len(ids))
        if done == 0 and missing.filter(pk__in=ids).exists():
            break  # this batch failed and waits for its retry time
    return embedded


def sweep() -> int:
    """The minute's sweep: the events whose job never came (a worker died, the
    broker was down). What its job embeds in a moment is left to it: under
    load there is always a fresh message without a vector, and a sweep that
    took those ran the model a second time beside their jobs (the conditional
    write keeps one vector; the work was done twice)."""
    return embed_missing(created_before=timezone.now() - SWEEP_GRACE)


_local = threading.local()


@contextmanager
def embedding_queue_paused() -> Iterator[None]:
    """For tools that embed what they write themselves, right after it
    (`memory_eval`, benchmarks: `embed_missing`): `request_embeddings` asks
    nothing meanwhile, or the job cluster would embed it all a second time."""
    _local.paused = True
    try:
        yield
    finally:
        _local.paused = False


class EmbeddingRequests:
    """The events this process asked to have embedded, sent to the job cluster
    as one job per `window` seconds. At tens of messages a second a job per
    message cost the cluster more in django-q's own bookkeeping (the dequeue,
    the result row and its pruning, the worker hand-offs) than in embedding,
    and one batch runs the model once. A process that exits sends what it
    holds; one that dies leaves it to the sweep."""

    def __init__(self, window: float) -> None:
        self.window = window
        self.start_over()
        # A forked process (the job cluster's workers) starts with no sender
        # thread, and a lock held at the fork would stay held.
        os.register_at_fork(after_in_child=self.start_over)

    def start_over(self) -> None:
        self.lock = threading.Lock()
        self.waiting: list[int] = []
        self.wake = threading.Event()
        self.sender: threading.Thread | None = None

    def add(self, *event_ids: int) -> None:
        if self.window <= 0:
            return send_embedding_job(list(event_ids))
        with self.lock:
            self.waiting.extend(event_ids)
            if self.sender is None:
                self.sender = threading.Thread(
                    target=self.run, name="embedding requests", daemon=True
                )
                self.sender.start()
                atexit.register(self.flush)  # a command's last messages
        self.wake.set()

    def run(self) -> None:
        while True:
            self.wake.wait()
            time.sleep(self.window)
            self.wake.clear()  # before the take: a request after it wakes the next round
            self.flush()
            close_old_connections()  # the ORM broker's connection, if it is broken or old

    def flush(self) -> None:
        with self.lock:
            ids, self.waiting = self.waiting, []
        if ids:
            send_embedding_job(ids)


def send_embedding_job(ids: list[int]) -> None:
    from django_q.tasks import async_task

    for start in range(0, len(ids), BATCH_SIZE):
        try:
            async_task(
                "memory.tasks.embed_events", ids[start : start + BATCH_SIZE], group="embeddings"
            )
        except Exception:
            # The broker is down: the sweep embeds them later.
            log.warning("could not queue the embedding of events %s", ids, exc_info=True)
            return


EMBEDDING_REQUESTS = EmbeddingRequests(window=0.5)


def request_embeddings(events: Iterable[Event]) -> None:
    """The one way to ask for the vectors of stored events: those that need one
    (content with text and no vector yet) go to the job cluster after the
    transaction commits, with the other requests of the moment (BATCH_SIZE to a
    job). Only their ids wait for the commit: an import's events, texts and
    all, are not held until then. The sweep embeds whatever a lost request
    missed."""
    if getattr(_local, "paused", False):
        return
    ids = [
        event.pk
        for event in events
        if event.embedding is None and event.event_type in EventType.CONTENT and event.text
    ]
    if ids:
        transaction.on_commit(lambda: EMBEDDING_REQUESTS.add(*ids))


def analyze_database() -> None:
    """Refresh the query planner's statistics. Without them SQLite cannot tell
    that, for one user, "owner = me" matches every row, and fetches 50 events
    by id through the owner index instead of the primary key: 15 ms instead of
    2 at 100k events (memory_bench). On PostgreSQL the full-text search's own
    table too (memory.fulltext.WORDS_TABLE): with statistics from when it was
    small, the planner walks the owner's every row for a query's matches, 58
    instead of 14 ms at 100k (the same plan without autovacuum, which is off
    on some installs)."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA analysis_limit = 1000")  # approximate, fast
            cursor.execute("ANALYZE")
        elif connection.vendor == "postgresql":
            cursor.execute(f"ANALYZE events, {WORDS_TABLE}")


def install_schedules(sender: object, **kwargs: object) -> None:
    """The jobs the cluster runs on its own (created once, kept in sync)."""
    from django_q.models import Schedule

    for name, func, minutes in [
        (SWEEP_SCHEDULE, "memory.tasks.sweep", 1),
        (FILES_SCHEDULE, "memory.files.indexing.index_all_workspaces", 1),
        (ANALYZE_SCHEDULE, "memory.tasks.analyze_database", 60),
        (PRUNE_SCHEDULE, "memory.forgetting.prune_forgotten", 24 * 60),
    ]:
        Schedule.objects.update_or_create(
            name=name,
            defaults={
                "func": func,
                "schedule_type": Schedule.MINUTES,
                "minutes": minutes,
                "repeats": -1,
            },
        )
