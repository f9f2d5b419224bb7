"""Finding memory files: a workspace's files with a stat each (nothing is read), and
the workspaces that have any."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from memory.files.paths import MEMORY_DIR, MEMORY_FILE
from memory.workspace import is_agent_name


@dataclass(frozen=True)
class FileStat:
    path: str
    size: int
    mtime_ns: int
    outside: bool = False  # a symlink leading out of the workspace: listed, never read

    def matches(self, size: int, mtime_ns: int) -> bool:
        """Whether a stored size and mtime are this file's: then it is taken as unchanged."""
        return (size, mtime_ns) == (self.size, self.mtime_ns)


def stat_entry(root: Path, relative: str, full: Path | os.DirEntry) -> FileStat | None:
    # A DirEntry from scandir knows whether it is a symlink without another system call.
    try:
        info = full.stat()
    except OSError:  # a dangling symlink, or removed meanwhile
        return None
    outside = full.is_symlink() and not Path(full).resolve().is_relative_to(root)
    return FileStat(relative, info.st_size, info.st_mtime_ns, outside)


def scan_workspace(workspace: Path) -> dict[str, FileStat]:
    """Every memory file with its size and mtime: one stat each, no reading."""
    root = workspace.resolve()
    found: dict[str, FileStat] = {}
    if (root / MEMORY_FILE).is_file():
        top = stat_entry(root, MEMORY_FILE, root / MEMORY_FILE)
        if top is not None:
            found[MEMORY_FILE] = top
    # walk_markdown follows no symlinked folder, but memory/ itself may be one: if it
    # leads out of the workspace, the files behind it are not the agent's to index.
    if not (root / MEMORY_DIR).resolve().is_relative_to(root):
        return found
    for relative, entry in walk_markdown(root / MEMORY_DIR, MEMORY_DIR):
        stat = stat_entry(root, relative, entry)
        if stat is not None:
            found[relative] = stat
    return found


def walk_markdown(directory: Path, relative: str) -> Iterator[tuple[str, os.DirEntry]]:
    # Symlinked directories are not followed: no loops, no trees outside.
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        if entry.name.startswith("."):  # editors' and our own temporary files
            continue
        child = f"{relative}/{entry.name}"
        if entry.is_dir(follow_symlinks=False):
            yield from walk_markdown(Path(entry.path), child)
        elif entry.name.lower().endswith(".md") and entry.is_file():
            yield child, entry


def workspaces_with_files() -> Iterator[tuple[int, str]]:
    """(owner id, agent) of every workspace on disk with a MEMORY.md or a memory/."""
    root = Path(settings.DATA_DIR) / "workspaces"
    if not root.is_dir():
        return
    for owner in root.iterdir():
        if not owner.name.isdigit() or not owner.is_dir():
            continue
        for agent in owner.iterdir():
            if is_agent_name(agent.name) and (
                (agent / MEMORY_FILE).is_file() or (agent / MEMORY_DIR).is_dir()
            ):
                yield int(owner.name), agent.name
