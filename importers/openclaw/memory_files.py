"""Copying an OpenClaw folder's memory files (MEMORY.md, memory/**/*.md) into the
agent's workspace, never over a file with other content, and indexing them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from importers.openclaw.reading import Folder
from importers.report import ImportReport
from memory.files.discovery import walk_markdown
from memory.files.indexing import index_workspace
from memory.files.paths import (
    MEMORY_DIR,
    MEMORY_FILE,
    MemoryPathError,
    max_file_bytes,
    resolve_memory_path,
    skip_reason_for,
    write_memory_file,
)
from memory.workspace import workspace_dir
from sessions_app.models import Agent

MEMORY_FILES = "memory files"  # the report's kind


def memory_sources(source: Path, report: ImportReport) -> Iterator[tuple[str, Path]]:
    """(relative path, file) of MEMORY.md and memory/**/*.md; symlinks are reported, not read."""
    top = source / MEMORY_FILE
    if top.is_symlink():
        report.saw(MEMORY_FILES)
        report.skip(MEMORY_FILES, "symlink (not followed)")
    elif top.is_file():
        yield MEMORY_FILE, top
    directory = source / MEMORY_DIR
    if directory.is_symlink():
        report.saw(MEMORY_FILES)
        report.skip(MEMORY_FILES, "memory/ is a symlink (not followed)")
        return
    for relative, entry in walk_markdown(directory, MEMORY_DIR):
        path = Path(entry.path)
        if entry.is_symlink() or not path.resolve().is_relative_to(source):
            report.saw(MEMORY_FILES)
            report.skip(MEMORY_FILES, "symlink (not followed)")
        else:
            yield relative, path


def imported_path(relative: str) -> str:
    """Where an imported file goes when the workspace has another file at its place."""
    inner = relative.removeprefix(f"{MEMORY_DIR}/")
    return f"{MEMORY_DIR}/imported/{inner}"


def copy_memory_files(
    folder: Folder, owner: Any, agent_name: str, report: ImportReport, dry_run: bool
) -> None:
    if folder.memory_source is None:
        return
    source = folder.memory_source
    shown = "workspace/" if source != folder.root else "the folder itself"
    report.note(f"Memory files taken from {shown} ({source}).")
    workspace = workspace_dir(owner.pk, agent_name, create=not dry_run)
    for relative, path in memory_sources(source, report):
        report.saw(MEMORY_FILES)
        try:
            copied = copy_memory_file(workspace, relative, path, report, dry_run)
        except (OSError, MemoryPathError) as exc:
            report.skip(MEMORY_FILES, "could not be copied")
            report.note(f"{relative} not copied: {exc}")
            continue
        if copied:
            report.added(MEMORY_FILES)
    if not dry_run:
        Agent.objects.get_or_create(owner=owner, name=agent_name)
        index_workspace(owner, agent_name)


def copy_memory_file(
    workspace: Path, relative: str, path: Path, report: ImportReport, dry_run: bool
) -> bool:
    if path.stat().st_size > max_file_bytes():
        report.skip(MEMORY_FILES, f"larger than {max_file_bytes()} bytes")
        return False
    data = path.read_bytes()
    if reason := skip_reason_for(data):
        report.skip(MEMORY_FILES, reason)
        return False
    target = place_for(workspace, relative, data)
    if target is None:
        report.skip(MEMORY_FILES, "already there")
        return False
    if target == "":
        report.skip(MEMORY_FILES, "another version is there, and in memory/imported/ too")
        report.note(f"{relative} not copied: the workspace has other versions of it.")
        return False
    if target != relative:
        report.note(f"{relative}: the workspace has another one; copied to {target}.")
    if not dry_run:
        write_memory_file(workspace, target, data.decode("utf-8"))
    return True


def place_for(workspace: Path, relative: str, data: bytes) -> str | None:
    """The workspace path to write `data` to; None if it is there already, "" if both
    places hold something else."""
    for candidate in (relative, imported_path(relative)):
        _, full = resolve_memory_path(workspace, candidate)
        if not full.exists():
            return candidate
        if full.is_file() and full.read_bytes() == data:
            return None
    return ""
