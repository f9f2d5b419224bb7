"""Writing one user's export archive: every member staged as a file, then zipped
behind a manifest that lists each one's size and sha256."""

from __future__ import annotations

import json
import shutil
import zipfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from agent.models import TerminalAllowedPrefix
from core.ownership import Owner
from core.progress import Progress, no_progress
from importers.archive import layout
from importers.archive.records import (
    AgentRecord,
    FactRecord,
    MacroRecord,
    RuleRecord,
    SessionRecord,
    TaskRecord,
)
from importers.manifests import file_entry, neotask_version
from memory.files.discovery import scan_workspace
from memory.files.paths import max_file_bytes, memory_path, skip_reason_for
from memory.files.workspace_fs import MemoryPathError, WorkspaceFS
from memory.models import Event, EventType, Fact, Macro
from memory.workspace import workspace_dir
from scheduler.models import ScheduledTask
from sessions_app.models import Agent, Session
from sessions_app.transcripts import event_batches, event_record

SUMMARIES = (EventType.SUMMARY, EventType.COMPACTION)  # events that condense others


def stamp(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def event_line(event: Event, condensed: dict[int, list[int]]) -> str:
    """A transcript line (sessions_app.transcripts) and what only an archive carries:
    when consolidation took the event in, and a summary's sources, so that an import
    neither consolidates that history again nor keeps a summary of a deleted turn."""
    record = event_record(event)
    if event.consolidated_at is not None:
        record["consolidated_at"] = stamp(event.consolidated_at)
    if event.pk in condensed:
        record["condensed"] = condensed[event.pk]
    return json_line(record)


def condensed_ids(batch: list[Event]) -> dict[int, list[int]]:
    """Summary id → the ids of the events it condensed (Event.condensed), for the
    summaries and compactions of `batch`."""
    summaries = [event.pk for event in batch if event.event_type in SUMMARIES]
    links: dict[int, list[int]] = {}
    if summaries:
        through = Event.condensed.through.objects.filter(from_event_id__in=summaries)
        for summary, source in through.order_by("to_event_id").values_list(
            "from_event_id", "to_event_id"
        ):
            links.setdefault(summary, []).append(source)
    return links


def json_line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False) + "\n"


class Staging:
    """The members written so far, as files under `root`, and what they count."""

    def __init__(self, root: Path, progress: Progress) -> None:
        self.root = root
        self.members: list[str] = []
        self.counts: Counter[str] = Counter()
        self.progress = progress

    def path(self, name: str) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        self.members.append(name)
        return path

    def records(self, name: str, kind: str, records: Any) -> None:
        with self.path(name).open("w", encoding="utf-8") as out:
            for record in records:
                out.write(json_line(record))
                self.counts[kind] += 1
        self.progress(1)


def export_user(owner: Owner, target: Path, progress: Progress = no_progress) -> dict[str, int]:
    """Write everything of `owner` to the zip `target`; returns what it counts."""
    staging = Staging(target.parent / f".{target.name}.staging", progress)
    shutil.rmtree(staging.root, ignore_errors=True)
    staging.root.mkdir(parents=True)
    try:
        with snapshot():
            write_members(owner, staging)
        write_zip(staging, target)
    finally:
        shutil.rmtree(staging.root, ignore_errors=True)
    return dict(staging.counts)


@contextmanager
def snapshot() -> Iterator[None]:
    """One read transaction for the whole export, so that a chat going on meanwhile
    is in it wholly or not at all (a session's events with its token counts), and
    goes on writing. Inside a caller's transaction, that one's view is read."""
    if connection.in_atomic_block:
        yield
    elif connection.vendor == "postgresql":
        with transaction.atomic():
            with connection.cursor() as cursor:  # only a transaction's first statement can
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield
    else:
        # Django's transactions take SQLite's write lock at once (BEGIN IMMEDIATE, see
        # core/profiles.py), which would stop every chat for the export's length;
        # a deferred one reads WAL's snapshot and lets them write. A write in it would
        # take the lock until the end (or fail, once another connection has written):
        # query_only makes one fail at once, as READ ONLY does on PostgreSQL.
        with connection.cursor() as cursor:
            cursor.execute("BEGIN DEFERRED")
            cursor.execute("PRAGMA query_only = ON")
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA query_only = OFF")
                cursor.execute("COMMIT")


def total_steps(owner: Owner) -> int:
    """What export_user's progress counts to: a step per session and per other member."""
    return Session.objects.owned_by(owner).count() + len(layout.RECORD_FILES) + 2


def write_members(owner: Owner, staging: Staging) -> None:
    agents = list(Agent.objects.owned_by(owner).order_by("name"))
    with staging.path(layout.AGENTS).open("w", encoding="utf-8") as out:
        json.dump([AgentRecord.of(agent) for agent in agents], out, ensure_ascii=False, indent=1)
    staging.counts["agents"] = len(agents)
    staging.progress(1)
    sessions = Session.objects.owned_by(owner).select_related("agent", "owner")
    for session in sessions.order_by("created_at", "pk"):
        with staging.path(layout.session_member(str(session.pk))).open(
            "w", encoding="utf-8"
        ) as out:
            out.write(json_line(SessionRecord.of(session)))
            for batch in event_batches(session):
                condensed = condensed_ids(batch)
                out.write("".join(event_line(event, condensed) for event in batch))
                staging.counts["events"] += len(batch)
        staging.counts["sessions"] += 1
        staging.progress(1)
    staging.records(
        layout.FACTS, "facts", map(FactRecord.of, Fact.objects.owned_by(owner).order_by("pk"))
    )
    staging.records(
        layout.MACROS, "macros", map(MacroRecord.of, Macro.objects.owned_by(owner).order_by("pk"))
    )
    tasks = ScheduledTask.objects.owned_by(owner).select_related("agent").order_by("created_at")
    staging.records(layout.TASKS, "tasks", map(TaskRecord.of, tasks))
    rules = TerminalAllowedPrefix.objects.owned_by(owner).order_by("prefix")
    staging.records(layout.RULES, "rules", map(RuleRecord.of, rules))
    for agent in agents:
        copy_memory_files(owner, agent.name, staging)
    staging.progress(1)


def copy_memory_files(owner: Owner, agent: str, staging: Staging) -> None:
    """The agent's memory files as they are on disk; links are not followed (nor
    exported); a file that cannot be read now, or is not text, is left out."""
    with WorkspaceFS(workspace_dir(owner.pk, agent, create=False)) as files:
        for entry in scan_workspace(files).values():
            if entry.is_link:
                continue
            try:
                memory_path(entry.path)  # a name no workspace may take (too long) stays out
                data, _ = files.read(entry.path, max_file_bytes())
            except MemoryPathError:
                continue
            if skip_reason_for(data):  # binary or not UTF-8: no import could take it
                continue
            staging.path(layout.memory_member(agent, entry.path)).write_bytes(data)
            staging.counts["memory_files"] += 1


def write_zip(staging: Staging, target: Path) -> None:
    entries = {name: file_entry(staging.root / name) for name in staging.members}
    members = {
        name: {"size": entry["size"], "sha256": entry["sha256"]}  # the order of version 1
        for name, entry in entries.items()
    }
    manifest = {
        "format": layout.FORMAT,
        "version": layout.VERSION,
        "exported_at": timezone.now().isoformat(),
        "neotask_version": neotask_version(),
        "counts": dict(staging.counts),
        "members": members,
    }
    partial = target.with_name(f".{target.name}.partial")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(layout.MANIFEST, json.dumps(manifest, indent=1, ensure_ascii=False))
        for name in staging.members:
            archive.write(staging.root / name, name)
    partial.rename(target)  # a finished archive or none: never half of one
