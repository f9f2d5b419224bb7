"""An export beside a writer: a user's `--events` events (in `--sessions` sessions)
exported by the export job, while a thread of its own writes a chat message every
`--every` seconds for another user, as a chat would. Prints the export's time and
the writer's latency (median, p95, max) before and during the export, and whether
any write was refused.

    .venv/bin/python bench/export_writer.py [--events 20000] [--sessions 20] [--runs 3]

SQLite in a scratch data dir by default; with DATABASE_URL (and REDIS_URL) set,
that database, whose rows of the run are deleted again.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def describe(latencies: list[float]) -> str:
    if not latencies:
        return "no writes"
    ms = [value * 1000 for value in latencies]
    return (
        f"{len(ms)} writes, median {statistics.median(ms):.1f} ms, "
        f"p95 {percentile(ms, 0.95):.1f} ms, max {max(ms):.1f} ms"
    )


class Writer:
    """Writes a message every `every` seconds until stopped; times each write."""

    def __init__(self, owner: Any, session_id: str, every: float) -> None:
        self.owner, self.session_id, self.every = owner, session_id, every
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self) -> None:
        from django.db import connection

        from memory import recording

        try:
            while not self.stopped.is_set():
                began = time.perf_counter()
                try:
                    recording.record(
                        self.owner, self.session_id, "user_message", {"content": "still here"}
                    )
                except Exception as exc:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                self.latencies.append(time.perf_counter() - began)
                self.stopped.wait(self.every)
        finally:
            connection.close()

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join()


def build(owner: Any, events: int, sessions: int) -> None:
    from memory.recording import draft, record_many
    from sessions_app import chat

    per_session = events // sessions
    for number in range(sessions):
        session = chat.start_chat(owner)
        batch = [
            draft(
                owner,
                str(session.pk),
                "user_message" if n % 2 == 0 else "assistant_response",
                {"content": f"Message {n} of session {number}: the garden, Lisbon, a report."},
            )
            for n in range(per_session)
        ]
        record_many(batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--every", type=float, default=0.02)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        os.environ.update(
            NEOTASK_DATA_DIR=scratch,
            NEOTASK_CONFIG="",
            DJANGO_SETTINGS_MODULE="neotask_site.settings",
        )
        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from django.core.management import call_command
        from django.db import connection

        from importers.archive.jobs import run_export
        from importers.models import ExportJob
        from memory.models import Event
        from memory.tasks import EMBEDDING_REQUESTS
        from sessions_app import chat

        call_command("migrate", verbosity=0)
        logging.getLogger("django-q").setLevel(logging.WARNING)
        users = get_user_model().objects
        owner = users.create_user(f"bench-{uuid.uuid4().hex[:8]}")
        chatter = users.create_user(f"bench-chat-{uuid.uuid4().hex[:8]}")
        try:
            build(owner, options.events, options.sessions)
            EMBEDDING_REQUESTS.flush()
            session = chat.start_chat(chatter)
            print(
                f"{connection.vendor}: {Event.objects.filter(owner=owner).count():,} events "
                f"in {options.sessions} sessions; a write every {options.every * 1000:.0f} ms"
            )
            for run in range(1, options.runs + 1):
                with Writer(chatter, str(session.pk), options.every) as idle:
                    time.sleep(2)
                job = ExportJob.objects.create(owner=owner)
                with Writer(chatter, str(session.pk), options.every) as busy:
                    began = time.perf_counter()
                    run_export(str(job.pk))
                    took = time.perf_counter() - began
                job.refresh_from_db()
                print(
                    f"run {run}: export {job.status} in {took:.2f} s "
                    f"({(job.size or 0) / 1e6:.1f} MB){' ' + job.error if job.error else ''}"
                )
                print(f"  writer without export: {describe(idle.latencies)}")
                refused = f" ({busy.errors[0]})" if busy.errors else ""
                print(
                    f"  writer during export:  {describe(busy.latencies)}; "
                    f"refused: {len(busy.errors)}{refused}"
                )
                EMBEDDING_REQUESTS.flush()
        finally:
            for user in (owner, chatter):
                Event.objects.filter(owner=user).delete()
                user.delete()


if __name__ == "__main__":
    main()
