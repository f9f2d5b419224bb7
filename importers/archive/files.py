"""The archive's memory files: each checked with the rest before anything is written,
then written into the workspaces once the import's rows are committed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from core.history import Actor
from core.ownership import Owner
from core.progress import Progress
from importers.archive import layout
from importers.archive.reading import Archive, refused
from importers.archive.records import BadRecord
from importers.openclaw.memory_files import place_for
from importers.report import ImportReport
from memory.files.history import record_file_change
from memory.files.indexing import index_workspace
from memory.files.paths import memory_path, skip_reason_for, write_memory_file
from memory.files.workspace_fs import MemoryPathError
from memory.workspace import is_agent_name, workspace_dir


@dataclass
class MemoryFileEntry:
    member: str
    agent: str
    path: str


def memory_entry(member: str) -> MemoryFileEntry:
    parts = PurePosixPath(member.removeprefix(layout.MEMORY_DIR)).parts
    if len(parts) < 2 or not is_agent_name(parts[0]):
        raise BadRecord("not under memory/<agent>/")
    try:
        path = memory_path("/".join(parts[1:]))
    except MemoryPathError as exc:
        raise BadRecord(str(exc)) from None
    return MemoryFileEntry(member, parts[0], path)


def memory_files(archive: Archive) -> list[MemoryFileEntry]:
    entries = []
    for name in archive.members:
        if not name.startswith(layout.MEMORY_DIR):
            continue
        try:
            entries.append(memory_entry(name))
        except BadRecord as exc:
            raise refused(f"{name} is not a memory file: {exc}.") from None
    return entries


def count_memory_files(archive: Archive, report: ImportReport) -> None:
    """What a dry run says of the memory files: all would be written."""
    entries = memory_files(archive)
    report.saw("memory files", len(entries))
    report.added("memory files", len(entries))


def write_memory_files(
    archive: Archive, owner: Owner, report: ImportReport, progress: Progress, actor: Actor
) -> None:
    agents = set()
    for entry in memory_files(archive):
        report.saw("memory files")
        data = archive.read(entry.member, layout.MAX_MEMBER_BYTES)
        progress(1)
        workspace = workspace_dir(owner.pk, entry.agent)
        target = place_for(workspace, entry.path, data)
        if not target:
            reason = "already there" if target is None else "other versions are there"
            report.skip("memory files", reason)
            continue
        if target != entry.path:
            report.note(f"{entry.path}: the workspace has another one; copied to {target}.")
        text = data.decode("utf-8")
        try:
            write_memory_file(workspace, target, text)
        except MemoryPathError as exc:
            report.skip("memory files", "could not be written")
            report.note(f"{entry.agent}/{entry.path} not written: {exc}")
            continue
        # A new file: place_for never picks one that is there.
        record_file_change(owner, entry.agent, target, actor, None, text)
        agents.add(entry.agent)
        report.added("memory files")
    for agent in sorted(agents):
        index_workspace(owner, agent)


def check_memory_files(archive: Archive, agents: set[str], progress: Progress) -> None:
    """Each memory file of an agent the archive has, and a text file a workspace takes."""
    for entry in memory_files(archive):
        if entry.agent not in agents:
            raise refused(f"{entry.member}: its agent is not in {layout.AGENTS}.")
        data = archive.read(entry.member, layout.MAX_MEMBER_BYTES)
        if reason := skip_reason_for(data):
            raise refused(f"{entry.member} cannot be a memory file: {reason}.")
        progress(1)
