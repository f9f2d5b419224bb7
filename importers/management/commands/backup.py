"""`python manage.py backup [--output FILE] [--include-secret-key]`: the whole
installation in one .tar, taken while Neotask runs (docs/data.md, "Backups")."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError
from django.utils import timezone

from core.progress import progress_bar
from importers.backup import BackupError
from importers.backup.archive import write_backup


class Command(BaseCommand):
    help = (
        "Back up Neotask while it runs: a consistent database snapshot, the agents' "
        "workspaces and a manifest of counts and checksums, in one .tar."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--output", type=Path, help="The archive to write (default: ./neotask-<time>.tar)."
        )
        parser.add_argument(
            "--include-secret-key",
            action="store_true",
            help="Also store the secret key (keep such an archive as private as the data dir).",
        )

    def handle(
        self, *args: Any, output: Path | None, include_secret_key: bool, **options: Any
    ) -> None:
        output = output or Path(f"neotask-{timezone.now():%Y%m%d-%H%M%S}.tar")
        try:
            with progress_bar(self, unit="B", unit_scale=True, desc="backup") as bar:
                manifest = write_backup(output.absolute(), include_secret_key, bar.update)
        except BackupError as exc:
            raise CommandError(str(exc)) from None
        except OSError as exc:  # a full disk, a folder it may not write in
            raise CommandError(f"The backup could not be written: {exc}") from None
        except (sqlite3.Error, DatabaseError) as exc:  # the snapshot: mostly a full disk
            failed = f"the database snapshot failed ({exc}){room(output)}"
            raise CommandError(f"The backup could not be written: {failed}") from None
        tables = manifest["database"]["tables"]
        files = sum(name.startswith("workspaces/") for name in manifest["members"])
        vendor = manifest["database"]["vendor"]
        self.stdout.write(
            f"Wrote {output} ({output.stat().st_size:,} bytes): the {vendor} database"
            f" ({len(tables)} tables, {sum(tables.values()):,} rows), {files} workspace "
            f"files, secret key {'included' if include_secret_key else 'left out'}."
        )
        for skipped in manifest["skipped"]:
            self.stdout.write(f"  skipped workspaces/{skipped['path']}: {skipped['why']}")


def room(output: Path) -> str:
    """What the snapshot's disk (beside `output`) says, if it is full."""
    folder = output.absolute().parent
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return "."
    return f"; no space is left on the disk of {folder}." if free < (1 << 20) else "."
