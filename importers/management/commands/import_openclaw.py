"""`python manage.py import_openclaw PATH --user U [--agent NAME] [--dry-run]`."""

from __future__ import annotations

from importers.command import ImportCommand


class Command(ImportCommand):
    help = (
        "Import an OpenClaw agent folder (sessions/sessions.json, the JSONL transcripts, "
        "MEMORY.md and memory/) for a user; running it again imports only what is new."
    )
    kind = "openclaw"
    path_help = "the agent folder, holding sessions/ and workspace/"
