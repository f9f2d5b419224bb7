"""Your data's background jobs (an import, an export) and the archives imported."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import OperationalError, models
from django.db.models import Q
from django.utils import timezone

from core.ownership import OwnedModel, Owner
from memory.workspace import DEFAULT_AGENT

log = logging.getLogger(__name__)

# A running job writes its heartbeat at least every HEARTBEAT_EVERY (importers.jobs);
# one whose heartbeat is older than this has lost its worker (SQLite: or has held its
# write lock that long, see docs/data.md).
STALE_AFTER = timedelta(minutes=5)


class BackgroundJob(OwnedModel):
    """What an import and an export job share: their owner, lifecycle (queued,
    running, then done or failed), progress, heartbeat and error. Each job keeps
    its own `Status` (the labels differ) and its own `status` field."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    progress_done = models.PositiveBigIntegerField(default=0)
    progress_total = models.PositiveBigIntegerField(null=True, blank=True)  # None: unknown
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # Written by the running job (importers.jobs.JobProgress): stale, its worker died.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    # The values every job's own Status has: its lifecycle, below.
    QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"

    status: Any  # each job's own field, with its own labels

    class Meta:
        abstract = True
        ordering = ["-created_at"]

    @classmethod
    def claim(cls, job_id: str) -> bool:
        """Queued → running, by one worker only (a broker may deliver a job twice)."""
        now = timezone.now()
        return bool(
            cls.objects.filter(Q(pk=job_id, status=cls.QUEUED)).update(
                status=cls.RUNNING, started_at=now, heartbeat_at=now
            )
        )

    def beat(self, done: int) -> None:
        """The progress so far, and that the job is alive (while it runs)."""
        type(self).objects.filter(Q(pk=self.pk, status=self.RUNNING)).update(
            progress_done=done, heartbeat_at=timezone.now()
        )

    def fail(self, error: str) -> None:
        type(self).objects.filter(pk=self.pk).update(
            status=self.FAILED, error=error, finished_at=timezone.now()
        )
        self.refresh_from_db()

    @staticmethod
    def stale_condition() -> Q:
        """Running, with a heartbeat stopped STALE_AFTER ago (or never beaten since
        its start): its worker died, or was stopped."""
        cutoff = timezone.now() - STALE_AFTER
        return Q(status=BackgroundJob.RUNNING) & (
            Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff)
        )

    @classmethod
    def stale_for(cls, owner: Owner) -> list[Any]:
        return list(cls.objects.owned_by(owner).filter(cls.stale_condition()))

    def fail_if_stale(self, error: str) -> bool:
        """Fail the job unless it beat meanwhile; whether it was failed."""
        try:
            return bool(
                type(self)
                .objects.filter(self.stale_condition(), pk=self.pk)
                .update(status=self.FAILED, error=error, finished_at=timezone.now())
            )
        except OperationalError:  # SQLite's write lock held (by the import itself?): later
            log.info("job %s: not marked failed yet", self.pk, exc_info=True)
            return False

    @property
    def is_active(self) -> bool:
        return self.status in (self.QUEUED, self.RUNNING)

    @property
    def percent(self) -> int | None:
        if not self.progress_total:
            return None
        return min(100, self.progress_done * 100 // self.progress_total)


class ImportJob(BackgroundJob):
    """One uploaded file being imported: its state, progress and report."""

    class Kind(models.TextChoices):
        AIDAEMON = "aidaemon", "aidaemon database"
        OPENCLAW = "openclaw", "OpenClaw folder"
        NEOTASK = "neotask", "Neotask export"

    class Status(models.TextChoices):
        QUEUED = "queued", "Waiting for a worker"
        RUNNING = "running", "Importing"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    filename = models.CharField(max_length=255)  # as uploaded, for the page only
    agent = models.CharField(max_length=64, default=DEFAULT_AGENT)
    dry_run = models.BooleanField(default=False)
    report = models.JSONField(null=True, blank=True)  # ImportReport.to_dict()

    class Meta(BackgroundJob.Meta):
        db_table = "neotask_site_importjob"  # made when it was the site's model

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.filename}"

    @property
    def upload_dir(self) -> Path:
        """Where the upload waits for the job; removed when the job ends."""
        return Path(settings.DATA_DIR) / "imports" / str(self.pk)


class ExportJob(BackgroundJob):
    """One export of everything of its owner's, written by a background job to a
    zip under the data dir that only its owner downloads."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Waiting for a worker"
        RUNNING = "running", "Exporting"
        DONE = "done", "Ready"
        FAILED = "failed", "Failed"

    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    filename = models.CharField(max_length=255, blank=True)  # the archive's, once written
    size = models.PositiveBigIntegerField(null=True, blank=True)
    counts = models.JSONField(null=True, blank=True)  # what the archive holds, by kind

    def __str__(self) -> str:
        return f"Export of {self.created_at:%Y-%m-%d %H:%M}"

    @property
    def folder(self) -> Path:
        return Path(settings.DATA_DIR) / "exports" / str(self.pk)

    @property
    def archive_path(self) -> Path | None:
        """The finished archive; None until the job is done."""
        if self.status != self.Status.DONE or not self.filename:
            return None
        return self.folder / self.filename


class ImportedArchive(OwnedModel):
    """A Neotask export archive whose rows were imported for its owner, known by the
    sha256 of its manifest (which holds every member's sha256): importing it again
    adds no row. Written in the import's transaction: it exists once the rows do."""

    digest = models.CharField(max_length=64)
    label = models.CharField(max_length=255, blank=True)  # the import, as its history names it
    exported_at = models.CharField(max_length=64, blank=True)  # as the manifest says it
    imported_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "digest"], name="imported_archive_once")
        ]

    def __str__(self) -> str:
        return f"{self.label or self.digest[:12]} (imported {self.imported_at:%Y-%m-%d})"
