"""`python manage.py export_user USER [--output FILE]`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from core.progress import progress_bar
from core.users import find_user
from importers.archive.writing import export_user, total_steps


class Command(BaseCommand):
    help = (
        "Export everything of a user (chats with their tool calls and usage, facts, macros, "
        "scheduled tasks, terminal rules, memory files, agents) to one archive that "
        "import_user brings back; the layout is docs/data-export.md."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("user", help="the username whose data is exported")
        parser.add_argument(
            "--output", help="the archive to write (default: neotask-export-USER-DATE.zip here)"
        )

    def handle(self, *args: Any, user: str, output: str | None, **options: Any) -> None:
        owner = find_user(user)
        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        target = Path(output or f"neotask-export-{owner.get_username()}-{stamp}.zip")
        if target.exists():
            raise CommandError(f"{target} exists; give another --output.")
        if not target.parent.is_dir():
            raise CommandError(f"{target.parent} is not a folder.")
        with progress_bar(self, total=total_steps(owner), unit="step", ascii=True) as bar:
            counts = export_user(owner, target, bar.update)
        summary = ", ".join(f"{count} {kind}" for kind, count in sorted(counts.items()))
        self.stdout.write(
            f"Wrote {target} ({target.stat().st_size:,} bytes): {summary or 'empty'}."
        )
