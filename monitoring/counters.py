"""Counters every process adds to: rows of `monitoring.Counter` (see
monitoring.metrics for why they are not kept in process memory)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.db import DatabaseError, connection, transaction
from django_q.utils import get_func_repr

from monitoring.models import Counter

log = logging.getLogger(__name__)

TURNS = "turns"
FIRST_TOKEN_BUCKET = "first_token_seconds_bucket"
FIRST_TOKEN_SUM = "first_token_seconds_sum"
SANDBOX_RUNS = "sandbox_runs"
JOB_FAILURES = "job_failures"
HEALTH_WRITES = "health_write_checks"  # /healthz's write probes (monitoring.health)

# Seconds from an input's start to its first streamed token: a model answering
# at once takes well under a second; 100 chats on two cores took 4-5 s (p50).
FIRST_TOKEN_BUCKETS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
BUCKET_LABELS = [f"{le:g}" for le in FIRST_TOKEN_BUCKETS] + ["+Inf"]

Amounts = Mapping[tuple[str, str], float]


def add(amounts: Amounts) -> None:
    """Add to counter series (name, label), creating them at first use (`upsert`);
    a failure is logged, never raised: counting must not break what it counts."""
    try:
        upsert(amounts)
    except DatabaseError as exc:
        log.warning("metrics: could not add to %s (%s)", ", ".join(k[0] for k in amounts), exc)


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
