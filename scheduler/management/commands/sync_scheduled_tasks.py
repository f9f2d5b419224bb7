from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from scheduler.config_sync import SyncError, sync_config_tasks


class Command(BaseCommand):
    help = "Create, update and delete the tasks of [[scheduled_tasks]] in config.toml."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = sync_config_tasks()
        except SyncError as exc:
            raise CommandError(f"configuration error: {exc}") from None
        self.stdout.write(str(report))
