"""Transcripts: a session's events as append-only JSONL, one JSON object per
line, and a sessions.json index (key → its current session), for tools that
read conversations without knowing Neotask's tables."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from asgiref.sync import sync_to_async

from memory.files.workspace_fs import atomic_write
from memory.models import Event, EventType
from sessions_app.models import Session

INDEX_NAME = "sessions.json"
BATCH = 500
TAIL_BLOCK = 64 * 1024
REDACTED_MARK = b'"redacted": true'

# Keys of `Event.data` that get a field of their own; the rest stay under "data".
PROMOTED = ("content", "tool_calls", "tool_call_id", "is_error", "usage", "sources")


def event_record(event: Event) -> dict[str, Any]:
    """One transcript line: what happened, who said it, when, and its usage."""
    data = dict(event.data) if isinstance(event.data, dict) else {"value": event.data}
    record: dict[str, Any] = {
        "id": event.pk,
        "session_id": event.session_id,
        "type": event.event_type,
        "timestamp": event.created_at.isoformat(),
        "importance": event.importance,
    }
    if role := event.role:
        record["role"] = role
    record["content"] = data.pop("content") if "content" in data else event.text
    if event.event_type == EventType.TOOL_CALL:
        record["tool_call"] = {
            key: data.pop(key) for key in ("id", "name", "arguments") if key in data
        }
    record.update({key: data.pop(key) for key in PROMOTED if key in data})
    if event.tool_name:
        record["tool_name"] = event.tool_name
    if data:
        record["data"] = data
    return record


def event_line(event: Event) -> str:
    return json.dumps(event_record(event), ensure_ascii=False) + "\n"


def event_batches(session: Session, after: int = 0) -> Iterator[list[Event]]:
    """The session's events with an id above `after`, in the order they were
    stored, a batch at a time (keyset pages: constant memory, no open cursor)."""
    events = session.events()
    while batch := list(events.filter(id__gt=after).order_by("id")[:BATCH]):
        yield batch
        after = batch[-1].pk


def next_chunk(session: Session, after: int) -> tuple[str, int] | None:
    """The next batch of lines after event `after`, and its last event id."""
    batch = next(event_batches(session, after), None)
    if batch is None:
        return None
    return "".join(event_line(event) for event in batch), batch[-1].pk


def transcript_chunks(session: Session) -> Iterator[str]:
    after = 0
    while chunk := next_chunk(session, after):
        text, after = chunk
        yield text


async def atranscript_chunks(session: Session) -> AsyncIterator[str]:
    after = 0
    while chunk := await sync_to_async(next_chunk)(session, after):
        text, after = chunk
        yield text


def index_entry(session: Session) -> dict[str, Any]:
    fields = session.to_dict()
    del fields["key"]  # the index is keyed by it
    return {
        "session_id": fields.pop("id"),
        "user": session.owner.get_username(),
        **fields,
        "updated_at": session.updated_at.isoformat(),
        "transcript": f"{session.pk}.jsonl",
    }


def is_current(entry: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether `entry` rather than `other` is the session its key points at:
    the active one, else the one used last (older ones stay reachable
    through `continues_from`)."""

    def rank(item: dict[str, Any]) -> tuple[bool, datetime]:
        try:
            last = datetime.fromisoformat(item["last_activity_at"])
        except (KeyError, TypeError, ValueError):
            last = datetime.min
        # A hand-edited index may hold naive times; they cannot be compared with aware ones.
        return item.get("status") == Session.Status.ACTIVE, last.replace(tzinfo=last.tzinfo or UTC)

    return entry.get("session_id") == other.get("session_id") or rank(entry) >= rank(other)


def merge_index(index: dict[str, Any], sessions: Iterable[Session]) -> dict[str, Any]:
    merged = dict(index)
    for session in sessions:
        entry = index_entry(session)
        current = merged.get(session.key)
        if not isinstance(current, dict) or is_current(entry, current):
            merged[session.key] = entry
    return merged


def exported_id(name: str) -> str | None:
    """The session id a transcript's file name or index entry gives, if it is one."""
    try:
        return str(uuid.UUID(name)) if str(uuid.UUID(name)) == name else None
    except ValueError:
        return None


def without_deleted(index: dict[str, Any]) -> dict[str, Any]:
    """The index without the entries of sessions deleted since (memory.forgetting),
    and with the others' titles as they are now (a chat whose first message was
    deleted is named again)."""
    named = {
        key: session_id
        for key, entry in index.items()
        if isinstance(entry, dict) and (session_id := exported_id(str(entry.get("session_id"))))
    }
    titles = {
        str(pk): title
        for pk, title in Session.objects.filter(pk__in=named.values()).values_list("pk", "title")
    }
    return {
        key: {**entry, "title": titles[session_id]}
        for key, entry in index.items()
        if (session_id := named.get(key)) in titles
    }


def remove_deleted(out_dir: Path) -> int:
    """Delete the transcripts of sessions deleted since they were exported: a
    deleted chat leaves no copy behind. Only files named by a session id."""
    files = {
        session_id: path
        for path in out_dir.glob("*.jsonl")
        if (session_id := exported_id(path.stem))
    }
    existing = {str(pk) for pk in Session.objects.filter(pk__in=files).values_list("pk", flat=True)}
    gone = [path for session_id, path in files.items() if session_id not in existing]
    for path in gone:
        path.unlink(missing_ok=True)
    return len(gone)


def read_index(path: Path) -> dict[str, Any]:
    """The existing index; empty if missing or unreadable (it is rebuilt from
    the sessions exported now)."""
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return index if isinstance(index, dict) else {}


def write_index(out_dir: Path, sessions: Iterable[Session]) -> dict[str, Any]:
    path = out_dir / INDEX_NAME
    index = without_deleted(merge_index(read_index(path), sessions))
    with atomic_write(path) as handle:
        json.dump(index, handle, indent=2, sort_keys=True, ensure_ascii=False)
        handle.write("\n")
    return index


def last_exported_id(path: Path) -> int | None:
    """The id of the last event in `path` (0 if there is none yet), or None if
    its last line is damaged, e.g. by an interrupted append."""
    try:
        with path.open("rb") as handle:
            end = handle.seek(0, os.SEEK_END)
            if end == 0:
                return 0
            tail, start = b"", end
            # Read backwards until the block holds the whole last line.
            while start > 0 and b"\n" not in tail[:-1]:
                start = max(0, start - TAIL_BLOCK)
                handle.seek(start)
                tail = handle.read(end - start)
    except FileNotFoundError:
        return 0
    if not tail.endswith(b"\n"):
        return None
    try:
        event_id = json.loads(tail[:-1].rsplit(b"\n", 1)[-1])["id"]
    except (ValueError, TypeError, KeyError):
        return None
    return event_id if isinstance(event_id, int) and not isinstance(event_id, bool) else None


@dataclass(frozen=True)
class Export:
    appended: int
    rewritten: bool  # its last line was damaged
    pruned: bool = False  # it held events deleted since (memory.forgetting)


def holds_deleted(path: Path, session: Session, after: int) -> bool:
    """Whether the transcript has more lines than the session has events up to
    the last one it holds: some were deleted since they were exported; or fewer
    redacted ones than the session has (memory.forgetting.redact_origin)."""
    lines = redacted = 0
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(TAIL_BLOCK), b""):
            lines += block.count(b"\n")
            # A key, never inside a string (where json.dumps escapes the quotes);
            # counted per block: a match split by a block boundary only rewrites.
            redacted += block.count(REDACTED_MARK)
    events = session.events().filter(id__lte=after)
    return lines != events.count() or redacted < events.filter(data__redacted=True).count()


def export_session(session: Session, out_dir: Path) -> Export:
    """Append the events not yet in `<out_dir>/<session id>.jsonl`; a file with
    a damaged last line, or with lines of events deleted since, is written again
    whole (atomically), so no event is ever lost or duplicated, and none that was
    deleted is kept."""
    path = out_dir / f"{session.pk}.jsonl"
    after = last_exported_id(path)
    pruned = bool(after) and holds_deleted(path, session, after or 0)
    if after is None or pruned:
        with atomic_write(path) as handle:
            count = write_events(handle, session, 0)
        return Export(count, rewritten=not pruned, pruned=pruned)
    with path.open("a", encoding="utf-8") as handle:
        return Export(write_events(handle, session, after), rewritten=False)


def write_events(handle: IO[str], session: Session, after: int) -> int:
    count = 0
    for batch in event_batches(session, after):
        handle.write("".join(event_line(event) for event in batch))
        count += len(batch)
    return count
