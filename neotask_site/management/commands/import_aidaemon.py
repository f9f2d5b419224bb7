"""`python manage.py import_aidaemon DB --user U [--agent NAME] [--dry-run]`."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from neotask_site.importing.aidaemon import count_rows, import_aidaemon
from neotask_site.importing.report import ImportRefused


class Command(BaseCommand):
    help = (
        "Import an aidaemon database (conversations, facts, macros, scheduled tasks, "
        "terminal prefixes) for one user. Safe to run again: nothing is imported twice."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="the aidaemon SQLite database (read only)")
        parser.add_argument("--user", required=True, help="the username that gets the data")
        parser.add_argument("--agent", default="main", help="the agent it belongs to (main)")
        parser.add_argument("--dry-run", action="store_true", help="report, write nothing")

    def handle(
        self, *args: Any, path: str, user: str, agent: str, dry_run: bool, **options: Any
    ) -> None:
        owner = get_user_model().objects.filter(username=user).first()
        if owner is None:
            raise CommandError(f'There is no user "{user}".')
        try:
            total = count_rows(path)
            with tqdm(total=total, unit="row", file=self.stderr._out, ascii=True) as bar:
                report = import_aidaemon(
                    path, owner, agent_name=agent, dry_run=dry_run, progress=bar.update
                )
        except ImportRefused as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(report.table())
