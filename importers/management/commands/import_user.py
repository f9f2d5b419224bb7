"""`python manage.py import_user ARCHIVE --user U [--dry-run]`."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from importers.command import ImportCommand
from memory.workspace import DEFAULT_AGENT


class Command(ImportCommand):
    help = (
        "Import a Neotask export archive (export_user, the Your data page) for a user: "
        "chats, facts, macros, tasks (untrusted), terminal rules (switched off), memory "
        "files and agents, with new ids. A bad archive is refused whole: nothing is written."
    )
    kind = "neotask"
    path_help = "the export archive (.zip)"

    def add_arguments(self, parser: CommandParser) -> None:
        # No --agent: an archive names its own agents.
        parser.add_argument("path", help=self.path_help)
        parser.add_argument("--user", required=True, help="the username that gets the data")
        parser.add_argument(
            "--dry-run", action="store_true", help="report what would be imported, write nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        super().handle(*args, agent=DEFAULT_AGENT, **options)
