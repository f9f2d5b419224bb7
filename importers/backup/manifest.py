"""The manifest: what a backup archive holds, and the checks a restore makes of it.

manifest.json is the archive's last member (it lists the checksums of all the
others). Layout, format version 1:

    manifest.json                 this file
    database/neotask.sqlite3      SQLite: the online-backup copy, one file
    database/neotask.dump         PostgreSQL: pg_dump --format=custom
    workspaces/<owner>/<agent>/…  every regular file of every workspace
    secret_key                    only with --include-secret-key
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from importers.backup import BackupError
from importers.manifests import is_entry_map, load_json, neotask_version

FORMAT = "neotask-backup"
FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
SECRET_KEY_NAME = "secret_key"
WORKSPACES_PREFIX = "workspaces/"
DATABASE_MEMBERS = {"sqlite": "database/neotask.sqlite3", "postgresql": "database/neotask.dump"}
# A manifest lists every workspace file; far below this even for big installations.
MANIFEST_MAX_BYTES = 64 * 1024 * 1024
# Not in the archive: rebuilt or re-fetched by Neotask itself.
LEFT_OUT = [
    "lancedb/ (LanceDB tables: rebuilt from the database when missing)",
    "models/ (embedding and language model files: assembled again at start)",
    "static/ (collected static files)",
    "imports/ (uploads waiting for an import job)",
    "local_llm.address, local_llm.error, setup_token (state of a running server)",
]


def build_manifest(
    vendor: str,
    tables: dict[str, int],
    members: dict[str, dict[str, Any]],
    skipped: list[dict[str, str]],
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "neotask_version": neotask_version(),
        "created_at": timezone.now().isoformat(),
        "database": {"vendor": vendor, "member": DATABASE_MEMBERS[vendor], "tables": tables},
        "members": members,
        "skipped": skipped,
        "left_out": LEFT_OUT,
    }


def parse_manifest(raw: bytes) -> dict[str, Any]:
    """The manifest, if it is one this Neotask can restore; BackupError otherwise."""
    try:
        manifest = load_json(raw)
    except ValueError:
        raise BackupError(f"{MANIFEST_NAME} is not valid JSON: the archive is damaged.") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"{MANIFEST_NAME} is not a Neotask backup manifest.")
    found = manifest.get("format_version")
    if found != FORMAT_VERSION:
        raise BackupError(
            f"The archive's format version is {found!r}; this Neotask "
            f"({neotask_version()}) restores format version {FORMAT_VERSION} only."
        )
    database = manifest.get("database")
    members = manifest.get("members")
    if (
        not isinstance(database, dict)
        or database.get("vendor") not in DATABASE_MEMBERS
        or database.get("member") != DATABASE_MEMBERS[database["vendor"]]
        or not is_count_map(database.get("tables"))
        or not is_entry_map(members)
        or database["member"] not in members
    ):
        raise BackupError(f"{MANIFEST_NAME} is incomplete or malformed: the archive is damaged.")
    return manifest


def is_count_map(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(count, int) and not isinstance(count, bool) and count >= 0
        for count in value.values()
    )
