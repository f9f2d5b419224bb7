"""`python manage.py restore FILE [--force]`: a backup back into an empty data dir
and database, checked before and after (docs/data.md, "Backups")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.progress import progress_bar
from importers.backup import BackupError
from importers.backup.restore import restore_backup


class Command(BaseCommand):
    help = (
        "Restore a backup made by `manage.py backup` into an empty data dir and database; "
        "every checksum is checked before anything is written."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("archive", type=Path, help="The .tar written by `manage.py backup`.")
        parser.add_argument(
            "--force",
            action="store_true",
            help="Replace a database and workspaces that are not empty.",
        )

    def handle(self, *args: Any, archive: Path, force: bool, **options: Any) -> None:
        try:
            with progress_bar(self, unit="B", unit_scale=True, desc="restore") as bar:
                restored = restore_backup(archive, force, bar.update)
        except BackupError as exc:
            raise CommandError(str(exc)) from None
        except OSError as exc:  # a full disk: the database is as it was, or whole
            raise CommandError(f"The restore could not be completed: {exc}") from None
        manifest = restored.manifest
        self.stdout.write(
            f"Restored the backup of {manifest['created_at']} (Neotask "
            f"{manifest['neotask_version']}): {restored.files} workspace files, secret key "
            f"{'restored' if restored.secret_key else 'not in the backup'}. Rows per table, "
            "as the manifest lists them:"
        )
        for table, count in restored.tables.items():
            self.stdout.write(f"  {table}: {count:,}")
        self.stdout.write("Run `python manage.py migrate` before starting Neotask.")
