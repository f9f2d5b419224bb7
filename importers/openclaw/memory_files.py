"""Copying an OpenClaw folder's memory files (MEMORY.md, memory/**/*.md) into the
agent's workspace, never over a file with other content, and indexing them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from core.history import Actor
from core.ownership import Owner
from importers.openclaw.reading import Folder
from importers.report import ImportReport
from memory.files.discovery import scan_workspace
from memory.files.history import record_file_change, text_now
from memory.files.indexing import index_workspace
from memory.files.paths import (
    MEMORY_DIR,
    MemoryPathError,
    NotFound,
    max_file_bytes,
    memory_path,
    read_memory_bytes,
    skip_reason_for,
    write_memory_file,
)
from memory.files.workspace_fs import FileStat, WorkspaceFS
from memory.workspace import workspace_dir
from sessions_app.models import Agent

MEMORY_FILES = "memory files"  # the report's kind


def memory_sources(files: WorkspaceFS, report: ImportReport) -> Iterator[FileStat]:
    """MEMORY.md and memory/**/*.md of the folder, found as in a workspace: symlinks
    are reported, never read (a memory/ that is a link is not entered)."""
    if os.path.islink(files.root / MEMORY_DIR):
        report.saw(MEMORY_FILES)
        report.skip(MEMORY_FILES, "memory/ is a symlink (not followed)")
    for entry in scan_workspace(files).values():
        if entry.is_link:
            report.saw(MEMORY_FILES)
            report.skip(MEMORY_FILES, "symlink (not followed)")
        else:
            yield entry


def imported_path(relative: str) -> str:
    """Where an imported file goes when the workspace has another file at its place."""
    inner = relative.removeprefix(f"{MEMORY_DIR}/")
    return f"{MEMORY_DIR}/imported/{inner}"


def copy_memory_files(
    folder: Folder, owner: Owner, agent_name: str, report: ImportReport, dry_run: bool
) -> None:
    if folder.memory_source is None:
        return
    source = folder.memory_source
    shown = "workspace/" if source != folder.root else "the folder itself"
    report.note(f"Memory files taken from {shown} ({source}).")
    workspace = workspace_dir(owner.pk, agent_name, create=not dry_run)
    actor = Actor.importing(f"OpenClaw import {folder.root.name}")
    with WorkspaceFS(source) as files:
        for entry in memory_sources(files, report):
            report.saw(MEMORY_FILES)
            try:
                copied = copy_memory_file(workspace, files, entry, report, dry_run)
            except (OSError, MemoryPathError) as exc:
                report.skip(MEMORY_FILES, "could not be copied")
                report.note(f"{entry.path} not copied: {exc}")
                continue
            if copied is not None:
                report.added(MEMORY_FILES)
                if not dry_run:  # a new file: place_for never picks one that is there
                    after = text_now(workspace, copied)
                    record_file_change(owner, agent_name, copied, actor, None, after)
    if not dry_run:
        Agent.objects.get_or_create(owner=owner, name=agent_name)
        index_workspace(owner, agent_name)


def copy_memory_file(
    workspace: Path, files: WorkspaceFS, entry: FileStat, report: ImportReport, dry_run: bool
) -> str | None:
    """Where the file is copied to (or would be, in a dry run); None if it is not."""
    relative = memory_path(entry.path)  # a name too long for a workspace is reported
    if entry.size > max_file_bytes():
        report.skip(MEMORY_FILES, f"larger than {max_file_bytes()} bytes")
        return None
    data, _ = files.read(relative, max_file_bytes())
    if reason := skip_reason_for(data):
        report.skip(MEMORY_FILES, reason)
        return None
    target = place_for(workspace, relative, data)
    if target is None:
        report.skip(MEMORY_FILES, "already there")
        return None
    if target == "":
        report.skip(MEMORY_FILES, "another version is there, and in memory/imported/ too")
        report.note(f"{relative} not copied: the workspace has other versions of it.")
        return None
    if target != relative:
        report.note(f"{relative}: the workspace has another one; copied to {target}.")
    if not dry_run:
        write_memory_file(workspace, target, data.decode("utf-8"))
    return target


def place_for(workspace: Path, relative: str, data: bytes) -> str | None:
    """The workspace path to write `data` to; None if it is there already, "" if both
    places hold something else."""
    for candidate in (relative, imported_path(relative)):
        try:
            if read_memory_bytes(workspace, candidate) == data:
                return None
        except NotFound:
            return candidate
        except MemoryPathError:  # a link, a folder, too large: something else is there
            pass
    return ""
