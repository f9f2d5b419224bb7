"""How much a workspace may hold: `[terminal] workspace_mb`, counted as `du` counts.

Checked before every memory-file write (the write is refused, nothing is lost) and
while and after each terminal command (agent.tools.terminal): a command that grows
a full workspace is stopped; what it wrote stays, for the user to look at and delete.
"""

from __future__ import annotations

import time
from pathlib import Path

from django.conf import settings

from memory.files.workspace_fs import MemoryPathError, TooDeep, WorkspaceFS

MB = 1024 * 1024


class WorkspaceFull(MemoryPathError):
    """A write that would take the workspace past its limit."""


def limit_bytes() -> int:
    return settings.NEOTASK["terminal"]["workspace_mb"] * MB


def megabytes(size: int) -> str:
    return f"{size / MB:.1f} MB"


def used_bytes(workspace: Path) -> int:
    """The workspace's size; one too deep to measure counts as past any limit."""
    with WorkspaceFS(workspace) as files:
        try:
            return files.usage()
        except TooDeep:
            return limit_bytes() + 1


def full_message(used: int) -> str:
    return (
        f"The workspace holds {megabytes(used)}, more than its limit of "
        f"{megabytes(limit_bytes())} ([terminal] workspace_mb): delete files to make room."
    )


def check_room(workspace: Path, relative: str, size: int) -> None:
    """Raise WorkspaceFull if `size` bytes at `relative` (replacing what is there)
    take the workspace past its limit; a write that shrinks it always may."""
    with WorkspaceFS(workspace) as files:
        try:
            used = files.usage()
        except TooDeep as exc:
            raise WorkspaceFull(f"{exc} Its size cannot be known: nothing was written.") from None
        try:
            existing = files.lstat(relative)
        except MemoryPathError:
            existing = None
    replaced = existing.st_blocks * 512 if existing is not None else 0
    after = used - replaced + size
    if after > limit_bytes() and size > replaced:
        raise WorkspaceFull(
            f"{relative} ({megabytes(size)}) would take the workspace to {megabytes(after)}, "
            f"past its limit of {megabytes(limit_bytes())} ([terminal] workspace_mb): "
            "delete files to make room. Nothing was written."
        )


class WorkspaceWatch:
    """Asked while a command runs: a reason to stop it once it grows the workspace
    past its limit. Looks as often as costs at most a tenth of a core (a workspace
    of 100 files: every 50 ms; of 20,000: every 0.7 s), since a command can write
    hundreds of MB a second."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.before = used_bytes(workspace)
        self.next_look = 0.0

    def __call__(self) -> str | None:
        if time.monotonic() < self.next_look:
            return None
        started = time.monotonic()
        used = used_bytes(self.workspace)
        self.next_look = time.monotonic() + 10 * (time.monotonic() - started)
        if used > limit_bytes() and used > self.before:
            return full_message(used)
        return None
