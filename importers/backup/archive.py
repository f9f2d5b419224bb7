"""The backup archive: one .tar, written whole under a temporary name and renamed
into place, and read back member by member against its manifest.

Workspaces are read the way the server reads them (memory/files/workspace_fs.py):
each folder opened from its parent's descriptor with O_NOFOLLOW, so a link a
sandboxed command made is recorded in the manifest as skipped, never followed.
"""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

from django.conf import settings

from core.progress import Progress, no_progress
from importers.backup import BackupError
from importers.backup.manifest import (
    DATABASE_MEMBERS,
    MANIFEST_MAX_BYTES,
    MANIFEST_NAME,
    SECRET_KEY_NAME,
    WORKSPACES_PREFIX,
    build_manifest,
    parse_manifest,
)
from importers.backup.snapshot import take_snapshot
from importers.manifests import chunks_of, differences, digest, matches
from memory.files.workspace_fs import (
    DIRECTORY,
    MAX_USAGE_DEPTH,
    READ,
    MemoryPathError,
    WorkspaceFS,
    atomic_file,
)

# A workspace file can change while it is read (a sandboxed command writing it): it is
# copied aside first, so the tar header's size is that of the bytes archived.
SPOOL_BYTES = 8 * 1024 * 1024


def workspaces_root() -> Path:
    return Path(settings.DATA_DIR) / "workspaces"


# Writing -----------------------------------------------------------------------------


def write_backup(
    output: Path, include_secret_key: bool, progress: Progress = no_progress
) -> dict[str, Any]:
    """Write the archive to `output` (which must not exist yet); return its manifest."""
    if output.exists():
        raise BackupError(f"{output} already exists; choose another --output.")
    if not output.parent.is_dir():
        raise BackupError(f"{output.parent} is not a folder.")
    # Beside the output: the snapshot can be big, and the rename must not cross disks.
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=".neotask-backup-") as scratch:
        snapshot = take_snapshot(Path(scratch))
        partial = Path(scratch) / "archive.tar"
        members: dict[str, dict[str, Any]] = {}
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
            members[snapshot.member] = add_snapshot(tar, snapshot.member, snapshot.path, progress)
            skipped = add_workspaces(tar, members, Path(scratch), progress)
            if include_secret_key:
                key = io.BytesIO(settings.SECRET_KEY.encode())
                members[SECRET_KEY_NAME] = add_member(tar, SECRET_KEY_NAME, key, Path(scratch))
            manifest = build_manifest(snapshot.vendor, snapshot.tables, members, skipped)
            raw = json.dumps(manifest, indent=2, sort_keys=True).encode()
            add_member(tar, MANIFEST_NAME, io.BytesIO(raw), Path(scratch))
        partial.chmod(0o600)  # it may hold the secret key, and holds everyone's data
        os.replace(partial, output)
    return manifest


def add_snapshot(tar: tarfile.TarFile, name: str, path: Path, progress: Progress) -> dict[str, Any]:
    """The database snapshot, a file of the backup's own that nothing changes: hashed,
    then archived, without a copy."""
    with path.open("rb") as handle:
        entry = digest(chunks_of(handle))
        handle.seek(0)
        info = tarfile.TarInfo(name)
        info.size, info.mode = entry["size"], 0o600
        tar.addfile(info, handle)
    progress(entry["size"])
    return entry


def add_member(
    tar: tarfile.TarFile,
    name: str,
    source: IO[bytes],
    spool_dir: Path,
    progress: Progress = no_progress,
    mtime: float = 0,
) -> dict[str, Any]:
    """A member read from `source` once, through a copy in `spool_dir` (beside the
    archive: /tmp may be too small for a big workspace file)."""
    with tempfile.SpooledTemporaryFile(SPOOL_BYTES, dir=str(spool_dir)) as spool:
        entry = digest(chunks_of(source), into=spool)
        spool.seek(0)
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = entry["size"], 0o600, mtime
        tar.addfile(info, spool)
    progress(entry["size"])
    return entry


def add_workspaces(
    tar: tarfile.TarFile, members: dict[str, dict[str, Any]], spool_dir: Path, progress: Progress
) -> list[dict[str, str]]:
    """Every regular file under workspaces/; returns what was skipped, and why."""
    skipped: list[dict[str, str]] = []
    try:
        root = os.open(workspaces_root(), DIRECTORY)
    except FileNotFoundError:
        return skipped
    except OSError as exc:
        raise BackupError(f"{workspaces_root()} cannot be read: {exc.strerror}.") from None
    try:
        for folder, name, relative in regular_files(root, "", 0, skipped):
            try:
                descriptor = os.open(name, READ, dir_fd=folder)
            except FileNotFoundError:
                continue  # removed meanwhile
            except OSError as exc:  # swapped for a link meanwhile (ELOOP), unreadable
                skipped.append({"path": relative, "why": f"cannot be read: {exc.strerror}"})
                continue
            with os.fdopen(descriptor, "rb") as handle:
                info = os.fstat(descriptor)
                if not stat.S_ISREG(info.st_mode):
                    skipped.append({"path": relative, "why": "not a regular file"})
                    continue
                member = WORKSPACES_PREFIX + relative
                members[member] = add_member(
                    tar, member, handle, spool_dir, progress, info.st_mtime
                )
    finally:
        os.close(root)
    return skipped


def regular_files(
    folder: int, relative: str, depth: int, skipped: list[dict[str, str]]
) -> Iterator[tuple[int, str, str]]:
    """(folder descriptor, name, path under workspaces/) of each regular file."""
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError:  # removed meanwhile
        return
    for entry in entries:
        path = f"{relative}/{entry.name}" if relative else entry.name
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            target = os.readlink(entry.name, dir_fd=folder)
            skipped.append({"path": path, "why": f"symbolic link to {target}, not followed"})
        elif stat.S_ISREG(mode):
            yield folder, entry.name, path
        elif not stat.S_ISDIR(mode):
            skipped.append({"path": path, "why": "not a regular file"})
        elif depth >= MAX_USAGE_DEPTH:
            skipped.append({"path": path, "why": f"nested deeper than {MAX_USAGE_DEPTH}"})
        else:
            try:
                inner = os.open(entry.name, DIRECTORY, dir_fd=folder)
            except OSError:  # swapped for a link or removed meanwhile
                skipped.append({"path": path, "why": "changed while read"})
                continue
            try:
                yield from regular_files(inner, path, depth + 1, skipped)
            finally:
                os.close(inner)


# Reading -----------------------------------------------------------------------------


def checked_member(member: tarfile.TarInfo) -> str:
    """The member's name, if it is a regular file where the layout puts one."""
    name = member.name
    parts = name.split("/")
    # A backslash is a file name's character here, as in the workspace it came from.
    if name.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise BackupError(f"The archive member {name!r} is not a safe path; nothing was restored.")
    if not member.isreg():
        raise BackupError(
            f"The archive member {name!r} is a link or a special file; nothing was restored."
        )
    expected = name in (MANIFEST_NAME, SECRET_KEY_NAME, *DATABASE_MEMBERS.values())
    if not expected and not (name.startswith(WORKSPACES_PREFIX) and len(parts) > 1):
        raise BackupError(f"The archive member {name!r} is not part of a Neotask backup.")
    return name


def open_archive(path: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(path, "r:*")
    except FileNotFoundError:
        raise BackupError(f"{path} does not exist.") from None
    except IsADirectoryError:
        raise BackupError(f"{path} is a folder, not a backup archive.") from None


UNREADABLE = (tarfile.TarError, EOFError, zlib.error, OSError)


def verify_archive(path: Path) -> dict[str, Any]:
    """The manifest, once every member was read and matched its checksum; writes nothing."""
    found: dict[str, dict[str, Any]] = {}
    raw_manifest: bytes | None = None
    try:
        with open_archive(path) as tar:
            for member in tar:
                name = checked_member(member)
                if name in found or (name == MANIFEST_NAME and raw_manifest is not None):
                    raise BackupError(f"The archive holds {name!r} twice; nothing was restored.")
                handle = tar.extractfile(member)
                assert handle is not None  # a regular file's
                if name == MANIFEST_NAME:
                    if member.size > MANIFEST_MAX_BYTES:
                        raise BackupError(
                            f"{MANIFEST_NAME} is {member.size} bytes: not a manifest."
                        )
                    raw_manifest = handle.read()
                else:
                    found[name] = digest(chunks_of(handle))
    except UNREADABLE as exc:
        raise BackupError(
            f"{path} is truncated or not a tar archive ({exc}); nothing was restored."
        ) from None
    if raw_manifest is None:
        raise BackupError(
            f"{path} has no {MANIFEST_NAME}: it is truncated or not a Neotask backup."
        )
    manifest = parse_manifest(raw_manifest)
    listed: dict[str, dict[str, Any]] = manifest["members"]
    missing, unlisted = differences(listed, found)
    if missing:
        raise BackupError(f"The archive lacks {len(missing)} listed members ({missing[0]}, …).")
    if unlisted:
        raise BackupError(
            f"The archive holds members its manifest does not list ({unlisted[0]}, …)."
        )
    for name, entry in found.items():
        if not matches(entry, listed[name]):
            raise BackupError(f"Checksum mismatch for {name}: the archive is damaged.")
    return manifest


def extract_archive(
    path: Path, manifest: dict[str, Any], staging: Path, progress: Progress = no_progress
) -> int:
    """Write every member but the manifest under `staging` (a new, private folder),
    checking each again as it goes; returns the number of workspace files."""
    listed: dict[str, dict[str, Any]] = manifest["members"]
    files = 0
    try:
        with open_archive(path) as tar, WorkspaceFS(staging) as folder:
            for member in tar:
                name = checked_member(member)
                if name == MANIFEST_NAME:
                    continue
                handle = tar.extractfile(member)
                assert handle is not None
                with (
                    folder.folder_of(name, create=True) as (parent, leaf),
                    atomic_file(parent, leaf) as out,
                ):
                    written = digest(chunks_of(handle), out, progress)
                if not matches(written, listed.get(name)):
                    raise BackupError(f"{path} changed while it was restored ({name}).")
                files += name.startswith(WORKSPACES_PREFIX)
    except MemoryPathError as exc:
        raise BackupError(f"An archive member cannot be written: {exc}") from None
    except UNREADABLE as exc:
        raise BackupError(f"{path} could not be read again ({exc}).") from None
    return files


def has_entries(folder: Path) -> bool:
    try:
        with os.scandir(folder) as entries:
            return any(True for _ in entries)
    except FileNotFoundError:
        return False


def member_path(staging: Path, name: str) -> Path:
    return staging.joinpath(*PurePosixPath(name).parts)
