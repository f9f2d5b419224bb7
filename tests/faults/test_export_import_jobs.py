"""Export and import jobs that hold (issue 40: D1, D2): an export beside a writer
writes its progress outside its snapshot and holds no write lock; an archive
imported twice adds nothing; a job whose worker died is found by its heartbeat
and says truly what it left.

Run without a test transaction (transaction=True): the export's snapshot is the
one production takes, never skipped for a caller's transaction."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from importers import jobs as import_jobs
from importers.archive import jobs as archive_jobs
from importers.archive import layout, writing
from importers.archive.jobs import run_export
from importers.models import ExportJob
from memory import recording
from memory.models import Event, Fact
from sessions_app.models import Session
from tests.support.archives import build_user_data, lines, members

pytestmark = pytest.mark.django_db(transaction=True)


def never_wait() -> None:
    """This thread's connection refuses at once instead of waiting for a lock: a
    write that had to wait for the export fails the test."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA busy_timeout = 0")
        else:
            cursor.execute("SET lock_timeout = '1ms'")


class Writer:
    """Writes a message and a fact on a connection of its own, in a thread, while
    the export is in its snapshot; keeps what went wrong."""

    def __init__(self, owner: User, session: Session) -> None:
        self.owner, self.session = owner, session
        self.errors: list[str] = []
        self.progress_seen: list[int] = []
        self.writes = 0

    def write(self, wait_for_progress: bool = False) -> None:
        thread = threading.Thread(target=self.run, args=(wait_for_progress,))
        thread.start()
        thread.join()

    def run(self, wait_for_progress: bool) -> None:
        try:
            never_wait()
            self.writes += 1
            recording.record(
                self.owner, str(self.session.pk), "user_message", {"content": "written meanwhile"}
            )
            Fact.objects.create(
                owner=self.owner, category="meanwhile", key=f"k{self.writes}", value="x"
            )
            if wait_for_progress:  # the page's bar moves during the export
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    done = ExportJob.objects.get(owner=self.owner).progress_done
                    if done:
                        self.progress_seen.append(done)
                        break
                    time.sleep(0.1)
        except Exception as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            connection.close()


def test_an_export_beside_a_writer_succeeds_without_the_write_lock(monkeypatch):
    owner = User.objects.create_user("dana")
    build_user_data(owner)
    session = Session.objects.filter(owner=owner).order_by("created_at").first()
    assert session is not None
    events_before = Event.objects.filter(owner=owner, session_id__isnull=False).count()
    facts_before = Fact.objects.filter(owner=owner).count()
    writer = Writer(owner, session)
    staged = writing.Staging.path

    def meanwhile(staging: writing.Staging, name: str) -> Path:
        # Agents read (the snapshot has begun), first progress not yet counted.
        if name == layout.AGENTS:
            writer.write()
        # A later member: progress counted; the bar must move and writers go on.
        if name.startswith(layout.SESSIONS_DIR) and staging.counts["sessions"] == 1:
            writer.write(wait_for_progress=True)
        return staged(staging, name)

    monkeypatch.setattr(writing.Staging, "path", meanwhile)
    job = ExportJob.objects.create(owner=owner)
    assert not connection.in_atomic_block  # the snapshot is really taken

    run_export(str(job.pk))

    job.refresh_from_db()
    assert job.error == "" and job.status == ExportJob.Status.DONE
    assert writer.errors == [] and writer.writes == 2
    assert writer.progress_seen and writer.progress_seen[0] >= 1
    assert job.progress_done == job.progress_total and job.heartbeat_at is not None
    # One moment: what the writer stored after it began is not in the archive.
    found = members(job.archive_path)
    manifest = json.loads(found[layout.MANIFEST])
    sessions = [name for name in found if name.startswith(layout.SESSIONS_DIR)]
    exported = [event for name in sessions for event in lines(found[name])[1:]]
    assert manifest["counts"]["events"] == len(exported) == events_before
    assert "written meanwhile" not in json.dumps(exported)
    assert manifest["counts"]["facts"] == facts_before
    assert Fact.objects.filter(owner=owner).count() == facts_before + 2


def test_a_dead_export_is_found_by_its_heartbeat_in_minutes():
    owner = User.objects.create_user("erin")
    now = timezone.now()
    dead = ExportJob.objects.create(
        owner=owner,
        status=ExportJob.Status.RUNNING,
        started_at=now - timedelta(minutes=20),
        heartbeat_at=now - import_jobs.STALE_AFTER - timedelta(seconds=5),
    )
    dead.folder.mkdir(parents=True)
    alive = ExportJob.objects.create(
        owner=owner,
        status=ExportJob.Status.RUNNING,
        started_at=now - timedelta(hours=2),  # long, but beating
        heartbeat_at=now - timedelta(seconds=20),
    )

    archive_jobs.expire_stale(owner)

    dead.refresh_from_db()
    alive.refresh_from_db()
    assert dead.status == ExportJob.Status.FAILED and "no heartbeat" in dead.error
    assert not dead.folder.exists()
    assert alive.status == ExportJob.Status.RUNNING
