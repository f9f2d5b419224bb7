"""Counters every process adds to: rows of `monitoring.Counter` (see
health.metrics for why the totals are not kept in process memory).

What a process counts waits a moment in it (`PendingCounts`) and goes to the
database as one upsert per `window`: a turn costs no statement of its own, and
a scrape is at most `window` behind another process's counts (the process
scraped sends its own first)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from multiprocessing.util import Finalize
from typing import Any

from django.db import DatabaseError, close_old_connections, connection, transaction
from django_q.utils import get_func_repr

from monitoring.models import Counter

log = logging.getLogger(__name__)

TURNS = "turns"
FIRST_TOKEN_BUCKET = "first_token_seconds_bucket"
FIRST_TOKEN_SUM = "first_token_seconds_sum"
SANDBOX_RUNS = "sandbox_runs"
JOB_FAILURES = "job_failures"
HEALTH_WRITES = "health_write_checks"  # /healthz's write probes (health.checks)

# Seconds from an input's start to its first streamed token: a model answering
# at once takes well under a second; 100 chats on two cores took 4-5 s (p50).
FIRST_TOKEN_BUCKETS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
BUCKET_LABELS = [f"{le:g}" for le in FIRST_TOKEN_BUCKETS] + ["+Inf"]

Amounts = Mapping[tuple[str, str], float]


def add(amounts: Amounts) -> None:
    """Add to counter series (name, label), creating them at first use: sent
    with the others of the moment (`PendingCounts`); a failure is logged, never
    raised: counting must not break what it counts."""
    COUNTS.add(amounts)


def flush() -> None:
    """Send what this process has counted and not sent yet (a scrape does first)."""
    COUNTS.flush()


class PendingCounts:
    """The amounts this process counted and has not sent yet, summed per series,
    sent as one upsert `window` seconds after the first of them, by a thread of
    its own. A process that exits sends what it holds (a forked job-cluster
    worker too: multiprocessing's finalizers run where atexit's do not); one
    that dies loses at most a window's counts. One the database refused is
    kept for the next round."""

    def __init__(self, window: float) -> None:
        self.window = window
        self.start_over()
        # A forked process (the job cluster's workers) starts with no sender
        # thread and nothing of its parent's to send; a lock held at the fork
        # would stay held.
        os.register_at_fork(after_in_child=self.start_over)

    def start_over(self) -> None:
        self.lock = threading.Lock()
        self.pending: defaultdict[tuple[str, str], float] = defaultdict(float)
        self.wake = threading.Event()
        self.sender: threading.Thread | None = None

    def add(self, amounts: Amounts) -> None:
        if self.window <= 0:
            send(amounts)
            return
        with self.lock:
            for key, amount in amounts.items():
                self.pending[key] += amount
            if self.sender is None:
                self.sender = threading.Thread(target=self.run, name="counters", daemon=True)
                self.sender.start()
                Finalize(self, self.flush, exitpriority=0)
        self.wake.set()

    def run(self) -> None:
        while True:
            self.wake.wait()
            time.sleep(self.window)
            self.wake.clear()  # before the take: an add after it wakes the next round
            if not self.flush():
                self.wake.set()  # the database refused: try again in a window
            close_old_connections()

    def flush(self) -> bool:
        """Send what waits; False if the database refused it (it is kept)."""
        with self.lock:
            amounts, self.pending = self.pending, defaultdict(float)
        if not amounts or send(amounts):
            return True
        with self.lock:
            for key, amount in amounts.items():
                self.pending[key] += amount
        return False


def send(amounts: Amounts) -> bool:
    """`upsert`, a failure logged; whether it was stored."""
    try:
        upsert(amounts)
    except DatabaseError as exc:
        log.warning("metrics: could not add to %s (%s)", ", ".join(k[0] for k in amounts), exc)
        return False
    return True


def upsert(amounts: Amounts) -> None:
    """Add to counter series in one statement, so processes adding at once neither
    lose nor double a count. Raises DatabaseError."""
    keys = sorted(amounts)  # one lock order for every process (PostgreSQL)
    quote = connection.ops.quote_name
    table = quote(Counter._meta.db_table)
    value = quote("value")
    sql = (
        f"INSERT INTO {table} ({quote('name')}, {quote('label')}, {value}) "
        f"VALUES {', '.join(['(%s, %s, %s)'] * len(keys))} "
        f"ON CONFLICT ({quote('name')}, {quote('label')}) "
        f"DO UPDATE SET {value} = {table}.{value} + excluded.{value}"
    )
    params = [part for key in keys for part in (*key, amounts[key])]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)


COUNTS = PendingCounts(window=2.0)


def count_turn(status: str, first_token_seconds: float | None) -> None:
    """One input run to its end (`status`: Done's), and how long its first token took."""
    amounts: dict[tuple[str, str], float] = {(TURNS, status): 1}
    if first_token_seconds is not None:
        for label, le in zip(BUCKET_LABELS, [*FIRST_TOKEN_BUCKETS, float("inf")], strict=True):
            if first_token_seconds <= le:
                amounts[(FIRST_TOKEN_BUCKET, label)] = 1
        amounts[(FIRST_TOKEN_SUM, "")] = first_token_seconds
    add(amounts)


def count_sandbox_run(outcome: str) -> None:
    add({(SANDBOX_RUNS, outcome): 1})


def count_job(sender: object, task: dict[str, Any], **kwargs: object) -> None:
    """django-q2's post_execute, in the cluster's monitor process: failed jobs, by function."""
    if not task.get("success"):
        add({(JOB_FAILURES, get_func_repr(task.get("func"))[:100]): 1})
