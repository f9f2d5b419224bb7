"""Exports run as django-q2 jobs, their progress stored on the `ExportJob` row the
page and the API poll (the import jobs' machinery, importers.jobs)."""

from __future__ import annotations

import logging
import shutil

from django.db import transaction
from django.utils import timezone

from core.ownership import Owner
from importers.archive.writing import export_user, total_steps
from importers.jobs import JOB_TIMEOUT, JobProgress
from importers.models import STALE_AFTER, ExportJob

log = logging.getLogger(__name__)

KEEP_EXPORTS = 3  # finished exports kept per user: a newer one replaces the oldest
OUTDATED = "Something was deleted while this export ran: start another one."
STOPPED = (
    "The export stopped without finishing: its worker was stopped (no heartbeat for "
    "{minutes} minutes). Start another one."
)


def archive_name(job: ExportJob) -> str:
    return f"neotask-export-{job.owner.get_username()}-{job.created_at:%Y%m%d-%H%M%S}.zip"


def start(owner: Owner) -> ExportJob:
    """Queue an export of everything of `owner`'s."""
    from django_q.tasks import async_task

    job = ExportJob.objects.create(owner=owner)
    try:
        async_task(
            "importers.archive.jobs.run_export", str(job.pk), group="exports", timeout=JOB_TIMEOUT
        )
    except Exception as exc:
        log.warning("could not queue export %s", job.pk, exc_info=True)
        job.fail(f"The export could not be queued ({exc}); try again later.")
    return job


def run_export(job_id: str) -> None:
    """The job: write the archive under the job's folder, then mark it ready."""
    if not ExportJob.claim(job_id):
        return  # done, or another worker has it (the broker delivered it twice)
    job = ExportJob.objects.select_related("owner").get(pk=job_id)
    progress = JobProgress(job)
    ExportJob.objects.filter(pk=job.pk).update(progress_total=total_steps(job.owner))
    name = archive_name(job)
    try:
        job.folder.mkdir(parents=True, exist_ok=True)
        with progress:  # written beside the snapshot, never in it
            counts = export_user(job.owner, job.folder / name, progress)
    except Exception as exc:
        log.exception("export %s failed", job.pk)
        shutil.rmtree(job.folder, ignore_errors=True)
        job.fail(f"The export stopped: {type(exc).__name__}: {exc}")
        return
    finished = ExportJob.objects.filter(pk=job.pk, status=ExportJob.Status.RUNNING).update(
        status=ExportJob.Status.DONE,
        filename=name,
        size=(job.folder / name).stat().st_size,
        counts=counts,
        progress_done=progress.done,
        finished_at=timezone.now(),
    )
    if not finished:  # a deletion meanwhile refused it (drop_exports)
        shutil.rmtree(job.folder, ignore_errors=True)
        return
    prune(job.owner)


def prune(owner: Owner) -> None:
    """Remove the owner's finished exports beyond the KEEP_EXPORTS newest."""
    done = ExportJob.objects.owned_by(owner).filter(status=ExportJob.Status.DONE)
    old = done.order_by("-created_at").values_list("pk", flat=True)[KEEP_EXPORTS:]
    for stale in ExportJob.objects.filter(pk__in=list(old)):
        stale.delete()  # its archive goes with it (remove_archive)


def drop_exports(sender: object, owner: Owner, **kwargs: object) -> None:
    """memory.forgetting's `forgotten`: the owner's finished exports hold what was
    just deleted, so they go (row and archive) once the deletion is committed.
    An export running meanwhile is refused when it finishes (`run_export`)."""
    cutoff = timezone.now()

    def drop() -> None:
        earlier = ExportJob.objects.owned_by(owner).filter(created_at__lte=cutoff)
        for job in earlier.filter(status=ExportJob.Status.DONE):
            job.delete()  # its archive goes with it (remove_archive)
        earlier.filter(status=ExportJob.Status.RUNNING).update(
            status=ExportJob.Status.FAILED, error=OUTDATED, finished_at=timezone.now()
        )

    transaction.on_commit(drop)


def remove_archive(sender: type[ExportJob], instance: ExportJob, **kwargs: object) -> None:
    shutil.rmtree(instance.folder, ignore_errors=True)


def expire_stale(owner: Owner) -> None:
    """A job whose worker died stays "running" for ever; one whose heartbeat stopped failed."""
    minutes = int(STALE_AFTER.total_seconds() // 60)
    for job in ExportJob.stale_for(owner):
        if job.fail_if_stale(STOPPED.format(minutes=minutes)):
            shutil.rmtree(job.folder, ignore_errors=True)
