"""Neotask's management commands as a test runs them: in process, their output
returned."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

from django.core.management import call_command


def export(out_dir: Path, *args: str) -> str:
    stdout = StringIO()
    call_command("export_transcripts", str(out_dir), *args, stdout=stdout, stderr=StringIO())
    return stdout.getvalue()
