"""`python manage.py consolidate [--user U]`: summarise old conversation into memory now."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agent.consolidation_job import run
from core.users import find_user


class Command(BaseCommand):
    help = "Summarise old, unconsolidated conversation into summaries and facts."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", help="only this user's conversations")

    def handle(self, *args: Any, user: str | None, **options: Any) -> None:
        report = run(find_user(user).pk if user else None)
        self.stdout.write(
            f"Consolidated {report.events} messages of {report.sessions} sessions into "
            f"{report.summaries} summaries. Facts: {report.facts_added} added, "
            f"{report.facts_updated} updated, {report.facts_skipped} skipped as duplicates."
        )
        for failure in report.failures:
            self.stderr.write(f"Not consolidated: {failure}")
