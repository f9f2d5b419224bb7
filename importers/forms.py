from __future__ import annotations

from typing import Any

from django import forms

from core.ownership import Owner
from importers import jobs, uploads
from importers.archive.reading import check_upload
from importers.models import ImportJob
from importers.report import ImportRefused
from memory.workspace import DEFAULT_AGENT, validate_agent_name


class ImportForm(forms.Form):
    """One upload: an aidaemon database, or an OpenClaw agent folder as a zip.
    What can be checked without importing is checked here, at once."""

    file = forms.FileField()
    agent = forms.CharField(
        initial=DEFAULT_AGENT,
        max_length=64,
        validators=[validate_agent_name],
        help_text="The agent the history and memory go to (created if missing).",
    )
    dry_run = forms.BooleanField(
        required=False, label="Dry run: only report what would be imported"
    )

    def __init__(self, kind: str, *args: Any, **kwargs: Any) -> None:
        kwargs["prefix"] = kind
        super().__init__(*args, **kwargs)
        self.kind = kind
        if kind == ImportJob.Kind.NEOTASK:
            del self.fields["agent"]  # an export names its own agents
            self.fields["file"].widget.attrs["accept"] = ".zip,application/zip"
            self.fields["file"].label = "Neotask export (.zip)"
        elif kind == ImportJob.Kind.OPENCLAW:
            self.fields["file"].widget.attrs["accept"] = ".zip,application/zip"
            self.fields["file"].label = "OpenClaw agent folder, as a .zip"
        else:
            self.fields["file"].label = "aidaemon database (aidaemon.db)"

    def clean_file(self) -> Any:
        upload = self.cleaned_data["file"]
        try:
            uploads.check_size(upload.size)
            if self.kind == ImportJob.Kind.NEOTASK:
                check_upload(upload, upload.size)
            elif self.kind == ImportJob.Kind.OPENCLAW:
                with uploads.open_zip(upload) as archive:
                    uploads.check_zip(archive, upload.size)
            elif not uploads.looks_like_sqlite(upload.read(len(uploads.SQLITE_HEADER))):
                raise ImportRefused(f"{upload.name} is not a SQLite database.")
        except ImportRefused as exc:
            raise forms.ValidationError(str(exc)) from None
        finally:
            upload.seek(0)
        return upload

    @property
    def agent_name(self) -> str:
        return self.cleaned_data.get("agent", DEFAULT_AGENT)

    def start(self, owner: Owner) -> ImportJob:
        """The valid upload stored and its import queued (importers.jobs.start)."""
        upload = self.cleaned_data["file"]
        return jobs.start(
            owner,
            self.kind,
            upload.name,
            upload.chunks(),
            self.agent_name,
            self.cleaned_data["dry_run"],
        )
