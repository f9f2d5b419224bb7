"""What `import_aidaemon` and `import_openclaw` share: arguments, progress bar, report."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.progress import progress_bar
from core.users import find_user
from importers.kinds import IMPORTERS
from importers.report import ImportRefused, ImportStopped
from memory.workspace import DEFAULT_AGENT


class ImportCommand(BaseCommand):
    kind = ""  # a key of IMPORTERS
    path_help = ""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help=self.path_help)
        parser.add_argument("--user", required=True, help="the username that gets the data")
        parser.add_argument(
            "--agent", default=DEFAULT_AGENT, help=f"the agent it belongs to ({DEFAULT_AGENT})"
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="report what would be imported, write nothing"
        )

    def handle(
        self, *args: Any, path: str, user: str, agent: str, dry_run: bool, **options: Any
    ) -> None:
        owner = find_user(user)
        importer = IMPORTERS[self.kind]
        try:
            total = importer.total(path)
            bar = progress_bar(
                self,
                total=total,
                unit=importer.unit,
                unit_scale=importer.unit == "B",
                desc=importer.label,
                ascii=True,
            )
            with bar:
                report = importer(path, owner, agent, dry_run, bar.update)
        except ImportRefused as exc:
            raise CommandError(str(exc)) from None
        except ImportStopped as exc:
            if exc.report is not None:
                self.stdout.write(exc.report.table())
            raise CommandError(str(exc)) from None
        self.stdout.write(report.table())
