"""Imports uploaded in the browser, run as django-q2 jobs with their progress
stored on the `ImportJob` row the page polls."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from pathlib import Path, PurePath

from django.core.exceptions import SuspiciousFileOperation
from django.db import DatabaseError, connection
from django.utils import timezone
from django.utils.text import get_valid_filename

from core.ownership import Owner
from core.progress import Progress
from importers import uploads
from importers.archive.reading import manifest_digest
from importers.models import STALE_AFTER, BackgroundJob, ImportedArchive, ImportJob
from importers.report import ImportRefused, ImportReport, ImportStopped

log = logging.getLogger(__name__)

# Longer than any upload takes to import; the cluster's default (300 s) is not.
JOB_TIMEOUT = 4 * 60 * 60
PROGRESS_EVERY = 1.0  # seconds between progress writes
# A running job writes its heartbeat at least this often (seconds); one whose
# heartbeat is older than STALE_AFTER has lost its worker (BackgroundJob).
HEARTBEAT_EVERY = 30.0


def upload_path(job: ImportJob) -> Path:
    """The stored upload, under its own name: messages about it then name it."""
    try:
        name = get_valid_filename(PurePath(job.filename).name)
    except SuspiciousFileOperation:
        name = "upload"
    return job.upload_dir / "upload" / name


def start(
    owner: Owner, kind: str, filename: str, chunks: Iterable[bytes], agent: str, dry_run: bool
) -> ImportJob:
    """Store the upload under the data dir and queue its import."""
    from django_q.tasks import async_task

    job = ImportJob.objects.create(
        owner=owner, kind=kind, filename=filename[:255], agent=agent, dry_run=dry_run
    )
    path = upload_path(job)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as out:
            for chunk in chunks:
                out.write(chunk)
    except OSError as exc:
        uploads.remove(job.upload_dir)
        finish(job, error=f"The upload could not be stored ({exc}).")
        return job
    try:
        async_task(
            "importers.jobs.run_import",
            str(job.pk),
            group="imports",
            timeout=JOB_TIMEOUT,
        )
    except Exception as exc:
        log.warning("could not queue import %s", job.pk, exc_info=True)
        uploads.remove(job.upload_dir)
        finish(job, error=f"The import could not be queued ({exc}); try again later.")
    return job


class JobProgress:
    """A job's progress callback (an import's or an export's) and its heartbeat. It
    counts; a thread of its own writes the count and the time to the job row, on a
    database connection of its own, at most once a second and at least every
    HEARTBEAT_EVERY: outside the job's transactions (an export's read-only snapshot,
    an import's write), so the page sees it move, the snapshot takes no write lock,
    and a job whose heartbeat stops is found dead in minutes (expire_stale).

    Used as a context manager around the work. A job run inside a caller's
    transaction (a test's) writes inline instead: no other connection could see its
    row, and on SQLite one would wait for that transaction's write lock."""

    def __init__(self, job: BackgroundJob) -> None:
        self.job = job
        self.done = 0
        self.written_at = 0.0
        self.inline = False
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def __call__(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if self.inline and now - self.written_at >= PROGRESS_EVERY:
            self.written_at = now
            self.write(self.done)

    def __enter__(self) -> JobProgress:
        self.inline = connection.in_atomic_block
        if not self.inline:
            self.thread = threading.Thread(
                target=self.beat, name=f"heartbeat {self.job.pk}", daemon=True
            )
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join()

    def write(self, done: int) -> None:
        self.job.beat(done)

    def beat(self) -> None:
        written, beaten = -1, 0.0
        try:
            while True:
                done, now = self.done, time.monotonic()
                if done != written or now - beaten >= HEARTBEAT_EVERY:
                    try:
                        self.write(done)
                        written, beaten = done, now
                    except DatabaseError:  # SQLite's write lock held by the import: later
                        log.info("job %s: heartbeat not written", self.job.pk, exc_info=True)
                        connection.close()  # a fresh one next time, if this one broke
                if self.stopped.wait(PROGRESS_EVERY):
                    return
        finally:
            connection.close()  # this thread's own


def run_import(job_id: str) -> None:
    """The job: import the upload, store the report, remove the upload."""
    if not ImportJob.claim(job_id):
        return  # done, or another worker has it (the broker delivered it twice)
    job = ImportJob.objects.select_related("owner").get(pk=job_id)
    progress = JobProgress(job)
    try:
        with progress:
            report = run(job, progress)
    except ImportRefused as exc:
        finish(job, progress.done, error=str(exc))
    except ImportStopped as exc:  # failed, with the report of what it finished
        finish(job, progress.done, report=exc.report, error=str(exc))
    except Exception as exc:
        log.exception("import %s failed", job.pk)
        finish(job, progress.done, error=f"The import stopped: {type(exc).__name__}: {exc}")
    else:
        finish(job, progress.done, report=report)
    finally:
        uploads.remove(job.upload_dir)


def run(job: ImportJob, progress: Progress) -> ImportReport:
    from importers.kinds import IMPORTERS

    path = upload_path(job)
    if job.kind == ImportJob.Kind.OPENCLAW:
        folder = uploads.unpack_zip(path, job.upload_dir / "unpacked")
        path.unlink()  # unpacked: half the disk space
        path = folder
    importer = IMPORTERS[job.kind]
    ImportJob.objects.filter(pk=job.pk).update(progress_total=importer.total(path))
    return importer(path, job.owner, job.agent, job.dry_run, progress)


STOPPED = (
    "The import stopped without finishing: its worker was stopped (no heartbeat for "
    "{minutes} minutes). Sessions it finished are kept; import the file again to add "
    "the rest: nothing is imported twice."
)
STOPPED_STORED = (
    "The import stopped without finishing: its worker was stopped (no heartbeat for "
    "{minutes} minutes) after the archive's rows were stored; memory files may be "
    "missing. Import the file again: its rows are not added twice, and the memory "
    "files it had not written yet are."
)
STOPPED_NOTHING = (
    "The import stopped without finishing: its worker was stopped (no heartbeat for "
    "{minutes} minutes) before the archive's rows were stored, so nothing of it was "
    "added. Import the file again."
)


def expire_stale(owner: Owner) -> None:
    """A job whose worker died stays "running" for ever; one whose heartbeat stopped
    failed, and its message says what it left (an archive's rows are all stored or
    none: ImportedArchive tells which)."""
    minutes = int(STALE_AFTER.total_seconds() // 60)
    for job in ImportJob.stale_for(owner):
        if job.kind != ImportJob.Kind.NEOTASK:
            error = STOPPED
        elif archive_stored(job, owner):
            error = STOPPED_STORED
        else:
            error = STOPPED_NOTHING
        if job.fail_if_stale(error.format(minutes=minutes)):
            uploads.remove(job.upload_dir)


def archive_stored(job: ImportJob, owner: Owner) -> bool:
    """Whether the archive a job was importing had its rows stored (by this job: on
    or after its start); an upload that cannot be read was never imported either."""
    digest = manifest_digest(upload_path(job))
    return (
        digest is not None
        and ImportedArchive.objects.owned_by(owner)
        .filter(digest=digest, imported_at__gte=job.started_at)
        .exists()
    )


def finish(
    job: ImportJob, done: int = 0, report: ImportReport | None = None, error: str = ""
) -> None:
    job.status = ImportJob.Status.FAILED if error else ImportJob.Status.DONE
    job.error = error
    job.report = report.to_dict() if report else None
    job.progress_done = done
    job.finished_at = timezone.now()
    job.save(update_fields=["status", "error", "report", "progress_done", "finished_at"])
