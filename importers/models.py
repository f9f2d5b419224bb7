"""An import from another agent, run as a background job."""

from __future__ import annotations

import uuid
from pathlib import Path

from django.conf import settings
from django.db import models

from core.ownership import OwnedModel
from memory.workspace import DEFAULT_AGENT


class ImportJob(OwnedModel):
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

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    filename = models.CharField(max_length=255)  # as uploaded, for the page only
    agent = models.CharField(max_length=64, default=DEFAULT_AGENT)
    dry_run = models.BooleanField(default=False)
    progress_done = models.PositiveBigIntegerField(default=0)
    progress_total = models.PositiveBigIntegerField(null=True, blank=True)  # None: unknown
    report = models.JSONField(null=True, blank=True)  # ImportReport.to_dict()
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # Written by the running job (importers.jobs.JobProgress): stale, its worker died.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        db_table = "neotask_site_importjob"  # made when it was the site's model

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.filename}"

    @property
    def upload_dir(self) -> Path:
        """Where the upload waits for the job; removed when the job ends."""
        return Path(settings.DATA_DIR) / "imports" / str(self.pk)

    @property
    def is_active(self) -> bool:
        return self.status in (self.Status.QUEUED, self.Status.RUNNING)

    @property
    def percent(self) -> int | None:
        if not self.progress_total:
            return None
        return min(100, self.progress_done * 100 // self.progress_total)


class ExportJob(OwnedModel):
    """One export of everything of its owner's, written by a background job to a
    zip under the data dir that only its owner downloads."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Waiting for a worker"
        RUNNING = "running", "Exporting"
        DONE = "done", "Ready"
        FAILED = "failed", "Failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    progress_done = models.PositiveBigIntegerField(default=0)
    progress_total = models.PositiveBigIntegerField(null=True, blank=True)  # None: unknown
    filename = models.CharField(max_length=255, blank=True)  # the archive's, once written
    size = models.PositiveBigIntegerField(null=True, blank=True)
    counts = models.JSONField(null=True, blank=True)  # what the archive holds, by kind
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # Written by the running job (importers.jobs.JobProgress): stale, its worker died.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

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

    @property
    def is_active(self) -> bool:
        return self.status in (self.Status.QUEUED, self.Status.RUNNING)

    @property
    def percent(self) -> int | None:
        if not self.progress_total:
            return None
        return min(100, self.progress_done * 100 // self.progress_total)


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
