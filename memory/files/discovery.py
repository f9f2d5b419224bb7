"""Finding memory files: a workspace's files with a stat each (nothing is read), and
the workspaces that have any."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

from memory.files.paths import MEMORY_DIR, MEMORY_FILE
from memory.files.workspace_fs import FileStat, WorkspaceFS
from memory.workspace import is_agent_name


def scan_workspace(files: WorkspaceFS) -> dict[str, FileStat]:
    """Every memory file with its size and mtime: one lstat each, no reading. Links are
    listed (to be shown as such), never followed; nor is a memory/ that is a link."""
    found: dict[str, FileStat] = {}
    top = files.file_entry(MEMORY_FILE)
    if top is not None:
        found[MEMORY_FILE] = top
    for entry in files.walk(MEMORY_DIR, ".md"):
        found[entry.path] = entry
    return found


def workspaces_with_files() -> Iterator[tuple[int, str]]:
    """(owner id, agent) of every workspace on disk with a MEMORY.md or a memory/."""
    root = Path(settings.DATA_DIR) / "workspaces"
    if not root.is_dir():
        return
    for owner in root.iterdir():
        if not owner.name.isdigit() or not owner.is_dir():
            continue
        for agent in owner.iterdir():
            # lexists: whatever a name is (a link included), it is worth a look.
            if is_agent_name(agent.name) and (
                os.path.lexists(agent / MEMORY_FILE) or os.path.lexists(agent / MEMORY_DIR)
            ):
                yield int(owner.name), agent.name
