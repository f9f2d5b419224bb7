"""`python manage.py embed_backfill`: embed every event still missing a vector."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from core.progress import progress_bar
from memory.tasks import embed_missing, needs_embedding


class Command(BaseCommand):
    help = "Embed every stored message that has no embedding yet (with a progress bar)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--limit", type=int, default=None, help="stop after this many")

    def handle(self, *args: Any, limit: int | None, **options: Any) -> None:
        total = needs_embedding().count()
        if limit is not None:
            total = min(total, limit)
        with progress_bar(self, total=total, unit="event", ascii=True) as bar:
            done = embed_missing(limit=limit, progress=bar.update)
        failed = needs_embedding().count()
        self.stdout.write(f"Embedded {done} events.")
        if failed:
            self.stdout.write(f"{failed} events still wait for a retry (see embedding_error).")
