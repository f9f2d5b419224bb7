"""`python manage.py cleanup_sessions [--days N] [--dry-run] [--user U] [--include-archived]`:
list the sessions idle for N days and delete them with their events."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.users import find_user
from sessions_app import cleanup
from sessions_app.models import Session


class Command(BaseCommand):
    help = (
        "Delete sessions (and their events) not used for N days; archived sessions "
        "only with --include-archived."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--days",
            type=int,
            default=None,
            help="idle this many days or more (default: [sessions] cleanup_after_days)",
        )
        parser.add_argument("--dry-run", action="store_true", help="list, delete nothing")
        parser.add_argument("--user", help="only this user's sessions (username)")
        parser.add_argument(
            "--include-archived",
            action="store_true",
            help="also archived sessions (transcripts left by resets and compactions)",
        )

    def handle(
        self,
        *args: Any,
        days: int | None,
        dry_run: bool,
        user: str | None,
        include_archived: bool,
        **options: Any,
    ) -> None:
        if days is None:
            days = cleanup.configured_days()
        if days < 1:
            raise CommandError(f"--days must be at least 1, not {days}.")
        sessions = (
            Session.objects.all() if user is None else Session.objects.owned_by(find_user(user))
        )
        if dry_run:
            found = cleanup.measure(cleanup.candidate_sessions(sessions, days, include_archived))
            self.print_candidates(found)
            self.stdout.write(f"Would remove {cleanup.describe(found)}; --dry-run deleted nothing.")
            return
        removed = cleanup.remove_candidates(sessions, days, include_archived)
        self.print_candidates(removed, prefix="removed ")
        self.stdout.write(f"Removed {cleanup.describe(removed)} idle for {days}+ days.")

    def print_candidates(self, candidates: list[cleanup.Candidate], prefix: str = "") -> None:
        for candidate in candidates:
            session = candidate.session
            self.stdout.write(
                f"{prefix}{session.key}\t{session.title or '-'}\t{session.status}\t"
                f"{session.last_activity_at.isoformat(timespec='seconds')}\t"
                f"{candidate.events} events\t{candidate.size} bytes"
            )
