"""Counters a process holds when it exits: sent, from a forked worker too."""

from __future__ import annotations

import multiprocessing
from typing import Any

from django.core.management import call_command
from django.db import connections

from monitoring import counters
from monitoring.models import Counter


def count_and_exit() -> None:
    """Count in this process and in a forked worker (as the job cluster forks
    them), each exiting long before its counts' window ends."""
    call_command("migrate", verbosity=0)
    counters.COUNTS.window = 600
    counters.count_turn("completed", 0.3)
    connections.close_all()  # a forked child opens its own
    worker = multiprocessing.get_context("fork").Process(target=count_in_worker)
    worker.start()
    worker.join()
    # The worker's count went out as it exited; this process still holds its own.
    assert list(Counter.objects.values_list("name", flat=True)) == [counters.SANDBOX_RUNS]


def count_in_worker() -> None:
    counters.count_sandbox_run("exited")


def counted() -> dict[str, Any]:
    return {f"{c.name}{{{c.label}}}": c.value for c in Counter.objects.all()}
