"""Export and import jobs that hold (issue 40: D1, D2): an export beside a writer
writes its progress outside its snapshot and holds no write lock; an archive
imported twice adds nothing; a job whose worker died is found by its heartbeat
and says truly what it left.

Run without a test transaction (transaction=True): the export's snapshot is the
one production takes, never skipped for a caller's transaction."""

from __future__ import annotations

import json
import shutil
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import DatabaseError, connection
from django.utils import timezone

from importers import jobs as import_jobs
from importers.archive import jobs as archive_jobs
from importers.archive import layout, writing
from importers.archive.importing import import_archive
from importers.archive.jobs import run_export
from importers.archive.writing import export_user
from importers.models import ExportJob, ImportJob
from memory import recording
from memory.models import Event, Fact
from memory.workspace import workspace_dir
from scheduler.models import ScheduledTask
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


def test_a_write_inside_the_export_snapshot_fails_at_once():
    """Nothing may write on the snapshot's connection: it would take SQLite's write
    lock until the export ends. It fails at once instead, and the connection goes on."""
    owner = User.objects.create_user("fay")

    with pytest.raises(DatabaseError), writing.snapshot():
        Fact.objects.create(owner=owner, category="home", key="city", value="Lyon")

    assert not Fact.objects.filter(owner=owner).exists()
    Fact.objects.create(owner=owner, category="home", key="city", value="Lyon")


def test_a_dead_export_is_found_by_its_heartbeat_in_minutes():
    owner = User.objects.create_user("erin")
    now = timezone.now()
    dead = ExportJob.objects.create(
        owner=owner,
        status=ExportJob.Status.RUNNING,
        started_at=now - timedelta(minutes=20),
        heartbeat_at=now - timedelta(minutes=6),  # beats every 30 s; stale after 5 min
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


def exported(tmp_path: Path) -> Path:
    """An archive of a user with one of everything (memory files included)."""
    source = User.objects.create_user("frank")
    build_user_data(source)
    path = tmp_path / "frank.zip"
    export_user(source, path)
    return path


def queued_import(owner: User, archive: Path, **fields: object) -> ImportJob:
    job = ImportJob.objects.create(owner=owner, kind="neotask", filename=archive.name, **fields)
    stored = import_jobs.upload_path(job)
    stored.parent.mkdir(parents=True)
    shutil.copy(archive, stored)
    return job


def owned_rows(owner: User) -> dict[str, int]:
    return {
        "events": Event.objects.filter(owner=owner).count(),
        "sessions": Session.objects.filter(owner=owner).count(),
        "facts": Fact.objects.filter(owner=owner).count(),
        "tasks": ScheduledTask.objects.filter(owner=owner).count(),
    }


def test_an_archive_imported_twice_adds_nothing_the_second_time(tmp_path):
    archive = exported(tmp_path)
    owner = User.objects.create_user("gina")
    first = queued_import(owner, archive)
    import_jobs.run_import(str(first.pk))
    first.refresh_from_db()
    assert first.status == ImportJob.Status.DONE, first.error
    after_first = owned_rows(owner)
    assert after_first["events"] > 0 and after_first["tasks"] == 1

    again = queued_import(owner, archive)
    import_jobs.run_import(str(again.pk))

    again.refresh_from_db()
    assert owned_rows(owner) == after_first
    assert again.status == ImportJob.Status.FAILED
    assert again.error.startswith("This archive was already imported on ")
    assert again.error.endswith(": nothing added.")
    # Another user may import the same archive: it is theirs once.
    other = User.objects.create_user("hugo")
    theirs = queued_import(other, archive)
    import_jobs.run_import(str(theirs.pk))
    theirs.refresh_from_db()
    assert theirs.status == ImportJob.Status.DONE and owned_rows(other) == after_first


def dead_import(owner: User, archive: Path, started: timedelta) -> ImportJob:
    now = timezone.now()
    return queued_import(
        owner,
        archive,
        status=ImportJob.Status.RUNNING,
        started_at=now - started,
        heartbeat_at=now - timedelta(minutes=6),  # beats every 30 s; stale after 5 min
    )


def test_a_dead_import_that_stored_nothing_says_so_and_a_second_import_adds_it(tmp_path):
    archive = exported(tmp_path)
    owner = User.objects.create_user("ines")
    dead = dead_import(owner, archive, started=timedelta(minutes=10))

    import_jobs.expire_stale(owner)

    dead.refresh_from_db()
    assert dead.status == ImportJob.Status.FAILED
    assert "no heartbeat for 5 minutes" in dead.error
    assert "nothing of it was added" in dead.error
    assert not dead.upload_dir.exists()
    again = queued_import(owner, archive)
    import_jobs.run_import(str(again.pk))
    again.refresh_from_db()
    assert again.status == ImportJob.Status.DONE and owned_rows(owner)["events"] > 0


def test_a_dead_import_past_its_commit_says_a_second_import_is_safe_and_it_is(tmp_path):
    """The worker died after the rows' commit, before the memory files: the message
    says so, and importing again adds no row but writes the missing files."""
    archive = exported(tmp_path)
    owner = User.objects.create_user("jon")
    dead = dead_import(owner, archive, started=timedelta(minutes=10))
    import_archive(archive, owner)  # what the dead job had done: rows and files
    rows = owned_rows(owner)
    memory = workspace_dir(owner.pk, "main") / "MEMORY.md"
    memory.unlink()  # …all but its memory files, say

    import_jobs.expire_stale(owner)

    dead.refresh_from_db()
    assert dead.status == ImportJob.Status.FAILED
    assert "after the archive's rows were stored" in dead.error
    assert "its rows are not added twice" in dead.error
    again = queued_import(owner, archive)
    import_jobs.run_import(str(again.pk))
    again.refresh_from_db()
    assert again.status == ImportJob.Status.DONE, again.error
    assert owned_rows(owner) == rows and memory.is_file()
    assert any("already imported" in note for note in again.report["notes"])
