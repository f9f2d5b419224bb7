"""Imports uploaded in the browser, run as django-q2 jobs with their progress
stored on the `ImportJob` row the page polls."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path, PurePath

from django.core.exceptions import SuspiciousFileOperation
from django.utils import timezone
from django.utils.text import get_valid_filename

from importers import uploads
from importers.models import ExportJob, ImportJob
from importers.report import ImportRefused, ImportReport, ImportStopped
from neotask_site.ownership import Owner
from neotask_site.progress import Progress

log = logging.getLogger(__name__)

# Longer than any upload takes to import; the cluster's default (300 s) is not.
JOB_TIMEOUT = 4 * 60 * 60
PROGRESS_EVERY = 1.0  # seconds between progress writes


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
    """A job's progress callback (an import's or an export's): counts, and writes
    to the job row at most once a second."""

    def __init__(self, job: ImportJob | ExportJob) -> None:
        self.job = job
        self.done = 0
        self.written_at = 0.0

    def __call__(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if now - self.written_at >= PROGRESS_EVERY:
            self.written_at = now
            type(self.job).objects.filter(pk=self.job.pk).update(progress_done=self.done)


def run_import(job_id: str) -> None:
    """The job: import the upload, store the report, remove the upload."""
    started = ImportJob.objects.filter(pk=job_id, status=ImportJob.Status.QUEUED).update(
        status=ImportJob.Status.RUNNING, started_at=timezone.now()
    )
    if not started:
        return  # done, or another worker has it (the broker delivered it twice)
    job = ImportJob.objects.select_related("owner").get(pk=job_id)
    progress = JobProgress(job)
    try:
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
    "The import stopped without finishing (its worker was stopped, or it ran past "
    "the job timeout). Sessions it finished are kept; import the file again to add "
    "the rest: nothing is imported twice."
)


def expire_stale(owner: Owner) -> None:
    """A job whose worker died stays "running" for ever; past the job timeout it
    cannot still be running, so it failed."""
    cutoff = timezone.now() - timedelta(seconds=JOB_TIMEOUT)
    stale = ImportJob.objects.owned_by(owner).filter(
        status=ImportJob.Status.RUNNING, started_at__lt=cutoff
    )
    for job in stale:
        uploads.remove(job.upload_dir)
    stale.update(status=ImportJob.Status.FAILED, error=STOPPED, finished_at=timezone.now())


def finish(
    job: ImportJob, done: int = 0, report: ImportReport | None = None, error: str = ""
) -> None:
    job.status = ImportJob.Status.FAILED if error else ImportJob.Status.DONE
    job.error = error
    job.report = report.to_dict() if report else None
    job.progress_done = done
    job.finished_at = timezone.now()
    job.save(update_fields=["status", "error", "report", "progress_done", "finished_at"])
