"""Restoring a backup: every member checked before anything is written, the archived
database's rows counted against the manifest, then the database loaded (whole or not
at all) and counted again, then the workspaces and the secret key moved into place."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from core.progress import Progress, no_progress
from importers.backup import BackupError
from importers.backup.archive import (
    extract_archive,
    has_entries,
    member_path,
    verify_archive,
    workspaces_root,
)
from importers.backup.manifest import SECRET_KEY_NAME, WORKSPACES_PREFIX
from importers.backup.snapshot import archived_counts, check_target, restore_database


@dataclass(frozen=True)
class Restored:
    manifest: dict[str, Any]
    tables: dict[str, int]
    files: int
    secret_key: bool


def restore_backup(archive: Path, force: bool, progress: Progress = no_progress) -> Restored:
    manifest = verify_archive(archive)
    database = manifest["database"]
    check_target(database["vendor"], force)
    workspaces = workspaces_root()
    if has_entries(workspaces) and not force:
        raise BackupError(
            f"{workspaces} is not empty: restore into an empty data dir, "
            "or pass --force to replace it."
        )
    data_dir = Path(settings.DATA_DIR)
    staging = Path(tempfile.mkdtemp(dir=data_dir, prefix=".restore-"))
    try:
        files = extract_archive(archive, manifest, staging, progress)
        snapshot = member_path(staging, database["member"])
        # Every count checked before the target is touched, and again once loaded.
        archived = archived_counts(snapshot, database["vendor"])
        check_counts(database["tables"], archived, "The archived database (nothing restored)")
        tables = restore_database(snapshot, database["vendor"], force)
        check_counts(database["tables"], tables, "The restored database")
        if workspaces.exists():  # only with --force, checked above
            os.rename(workspaces, staging / "replaced-workspaces")
        restored_workspaces = member_path(staging, WORKSPACES_PREFIX)
        if restored_workspaces.exists():
            os.rename(restored_workspaces, workspaces)
        secret_key = SECRET_KEY_NAME in manifest["members"]
        if secret_key:
            os.replace(member_path(staging, SECRET_KEY_NAME), data_dir / SECRET_KEY_NAME)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Restored(manifest, tables, files, secret_key)


def check_counts(expected: dict[str, int], found: dict[str, int], what: str) -> None:
    wrong = [
        f"{table}: {found.get(table, 'no table')} rows, the manifest says {count}"
        for table, count in expected.items()
        if found.get(table) != count
    ]
    if wrong:
        raise BackupError(f"{what} differs from the backup's manifest: {'; '.join(wrong)}.")
