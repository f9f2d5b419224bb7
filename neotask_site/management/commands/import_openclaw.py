"""`python manage.py import_openclaw PATH --user U [--agent NAME] [--dry-run]`."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from neotask_site.importing.openclaw import Folder, import_openclaw
from neotask_site.importing.report import ImportRefused


class Command(BaseCommand):
    help = (
        "Import an OpenClaw agent folder (sessions/sessions.json, the JSONL transcripts, "
        "MEMORY.md and memory/) for a user; running it again imports only what is new."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="the agent folder, holding sessions/ and workspace/")
        parser.add_argument("--user", required=True, help="the username to import for")
        parser.add_argument("--agent", default="main", help="the agent to import into")
        parser.add_argument(
            "--dry-run", action="store_true", help="report what would be imported, write nothing"
        )

    def handle(
        self, *args: Any, path: str, user: str, agent: str, dry_run: bool, **options: Any
    ) -> None:
        users = get_user_model()
        owner = users.objects.filter(**{users.USERNAME_FIELD: user}).first()
        if owner is None:
            raise CommandError(f"There is no user {user!r}.")
        try:
            folder = Folder.locate(path)
            with tqdm(
                total=folder.transcript_bytes,
                unit="B",
                unit_scale=True,
                desc="transcripts",
                file=self.stderr._out,
                ascii=True,
            ) as bar:
                report = import_openclaw(path, owner, agent, dry_run=dry_run, progress=bar.update)
        except ImportRefused as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(report.table())
