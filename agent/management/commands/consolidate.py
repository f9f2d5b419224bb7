"""`python manage.py consolidate [--user U]`: summarise old conversation into memory now."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agent.consolidation import run


class Command(BaseCommand):
    help = "Summarise old, unconsolidated conversation into summaries and facts."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", help="only this user's conversations")

    def handle(self, *args: Any, user: str | None, **options: Any) -> None:
        owner_id = None
        if user:
            try:
                owner_id = get_user_model().objects.get(username=user).pk
            except get_user_model().DoesNotExist:
                raise CommandError(f"There is no user {user!r}.") from None
        report = run(owner_id)
        self.stdout.write(
            f"Consolidated {report.events} messages of {report.sessions} sessions into "
            f"{report.summaries} summaries. Facts: {report.facts_added} added, "
            f"{report.facts_updated} updated, {report.facts_skipped} skipped as duplicates."
        )
        for failure in report.failures:
            self.stderr.write(f"Not consolidated: {failure}")
