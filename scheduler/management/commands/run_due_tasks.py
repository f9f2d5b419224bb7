from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from scheduler.due_tasks import run_due_tasks


class Command(BaseCommand):
    help = "Run the scheduled tasks that are due now (the job cluster does this every minute)."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(str(run_due_tasks()))
