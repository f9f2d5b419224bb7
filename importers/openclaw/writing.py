"""Writing one OpenClaw session: its transcript streamed into a Neotask session's
events, in bounded batches, inside the session's transaction."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from agent.llm import Usage
from core.ownership import Owner
from core.progress import Progress
from importers.models import ImportJob
from importers.openclaw.reading import (
    MAX_LINE_BYTES,
    SESSIONS,
    UNSAFE_ESCAPE,
    Parsed,
    Source,
    entry_time,
    parse_entry,
    parse_time,
    read_lines,
    usage_of,
)
from importers.report import ImportReport
from importers.text import cut, storable
from memory.models import Event, EventType
from memory.recording import draft, record_imported
from sessions_app.keys import SessionKey, SessionKeyError, is_part
from sessions_app.models import Agent, Session

# A batch is written when it holds this many events or this many bytes of lines.
BATCH_EVENTS = 500
BATCH_BYTES = 1024 * 1024
MAX_LINE_REASONS = 20  # per transcript: further bad lines share one reason
IMPORT_CHANNEL = "import"
SESSION_MARK = "openclaw:"
LEGACY_ID_LENGTH = 64  # Event.legacy_message_id

# The report's kinds
LINES = "transcript lines"
EVENTS = "events"
PARTS = "message parts"


# Keys


def slug(text: str) -> str:
    """`text` as one part of a session key."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-._")
    if not is_part(cleaned):
        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        cleaned = f"{cleaned[:55].strip('-._')}-{digest}".strip("-")
    return cleaned


def neotask_key(agent: str, source: Source) -> SessionKey:
    if source.key is None:
        return SessionKey(agent, IMPORT_CHANNEL, slug(source.session_id))
    try:
        parsed = SessionKey.parse(source.key)
    except SessionKeyError:
        parsed = None
    if parsed is not None and not parsed.is_scheduled:  # cron keys name Neotask's own tasks
        return SessionKey(agent, parsed.channel, parsed.chat)
    rest = source.key
    if rest.startswith("agent:") and rest.count(":") >= 2:
        rest = rest.split(":", 2)[2]  # the agent part is replaced anyway
    return SessionKey(agent, IMPORT_CHANNEL, slug(rest))


def legacy_id(text: str) -> str:
    if len(text) <= LEGACY_ID_LENGTH:
        return text
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[: LEGACY_ID_LENGTH - 7]


# One session


@dataclass
class Pending:
    """A parsed entry waiting for its batch to be written."""

    legacy: str
    events: list[Event]
    parsed: Parsed


class SessionImport:
    """Streams one transcript into one session; runs inside the session's transaction."""

    def __init__(
        self,
        owner: Owner,
        agent: Agent,
        source: Source,
        imported: dict[str, str],
        report: ImportReport,
    ) -> None:
        self.owner = owner
        self.agent = agent
        self.imported = imported
        self.source = source
        self.report = report
        self.name = source.transcript.name
        self.session: Session | None = None  # found or started by open_session
        self.created = False
        self.default_time = parse_time(source.entry.get("updatedAt")) or datetime.fromtimestamp(
            source.transcript.stat().st_mtime, UTC
        )
        self.start_event: Event | None = None
        # The session header's time; None: the first entry's, known at the first batch.
        self.header_time: datetime | None = None
        self.last_time: datetime | None = None
        self.started_at: datetime | None = None
        self.pending: list[Pending] = []
        self.pending_events = 0
        self.pending_bytes = 0
        self.bad_lines = 0
        self.new_entries = 0
        self.usage = Usage()
        self.turn_event: Event | None = None  # the user message that opened the current turn
        self.turn_usage = Usage()
        self.title = ""

    # The session

    @property
    def target(self) -> Session:
        """The session being written, once open_session has found or started it."""
        if self.session is None:
            raise RuntimeError("open_session() comes first")
        return self.session

    def open_session(self, header: dict[str, Any] | None) -> None:
        mark = legacy_id(SESSION_MARK + self.source.session_id)
        if mark in self.imported:
            self.session = Session.objects.filter(owner=self.owner, pk=self.imported[mark]).first()
        if self.session is not None:
            if header is not None:
                self.report.saw(LINES)
                self.report.skip(LINES, "already imported")
            return
        key = neotask_key(self.agent.name, self.source)
        active = Session.objects.active(self.owner, str(key))
        fresh = active.continue_as(title=self.index_title()) if active else None
        self.session = fresh or Session.start(
            self.owner, self.agent, key.channel, key.chat, title=self.index_title()
        )
        self.created = True
        shown = self.source.key or f"transcript {self.name}"
        if self.source.key != str(key):
            self.report.note(f"{shown} → {key}")
        header = header or {}
        started = parse_time(header.get("timestamp"))
        data = {
            "content": f"Imported from OpenClaw ({shown}).",
            "source": "openclaw",
            "openclaw_session_id": self.source.session_id,
            "openclaw_key": self.source.key,
        }
        data.update({name: header[name] for name in ("cwd", "version") if name in header})
        self.header_time = started
        self.start_event = self.new_event(
            EventType.SESSION_START, storable(data), mark, started or self.default_time
        )
        self.last_time = started
        if header:
            self.report.saw(LINES)
            self.report.added(LINES)

    def index_title(self) -> str:
        for name in ("displayName", "label", "subject"):
            value = self.source.entry.get(name)
            if isinstance(value, str) and value.strip():
                return Session.title_from(storable(value))
        return ""

    def new_event(
        self,
        event_type: str,
        data: dict[str, Any],
        legacy: str,
        created_at: datetime,
        tool_name: str | None = None,
    ) -> Event:
        return draft(
            self.owner,
            str(self.target.pk),
            event_type,
            data,
            agent=self.agent.name,
            created_at=created_at,
            tool_name=tool_name[:128] if tool_name else None,
            legacy_message_id=legacy,
        )

    # The transcript

    def run(self, progress: Progress) -> None:
        with self.source.transcript.open("rb") as handle:
            lines = read_lines(handle)
            first = next(lines, None)
            header = self.header(first)
            self.open_session(header)
            if first is not None:
                self.pending_bytes += first[2]
                if header is None:
                    self.take(first[0], first[1])
            for line_number, line, size in lines:
                self.pending_bytes += size
                self.take(line_number, line)
                if self.pending_events >= BATCH_EVENTS or self.pending_bytes >= BATCH_BYTES:
                    progress(self.pending_bytes)
                    self.flush()
        progress(self.pending_bytes)
        self.flush()
        self.close_turn()
        self.finish()

    @staticmethod
    def header(first: tuple[int, bytes | None, int] | None) -> dict[str, Any] | None:
        if first is None or first[1] is None:
            return None
        try:
            entry = json.loads(first[1])
        except ValueError:
            return None
        return entry if isinstance(entry, dict) and entry.get("type") == "session" else None

    def skip_line(self, line_number: int, problem: str) -> None:
        self.bad_lines += 1
        if self.bad_lines <= MAX_LINE_REASONS:
            self.report.skip(LINES, f"{self.name} line {line_number}: {problem}")
        else:
            self.report.skip(LINES, f"{problem} (further lines)")

    def take(self, line_number: int, line: bytes | None) -> None:
        if line is not None and not line.strip():
            return
        self.report.saw(LINES)
        if line is None:
            self.skip_line(line_number, f"longer than {MAX_LINE_BYTES // 1024} KB")
            return
        try:
            entry = json.loads(line)
        except ValueError:
            self.skip_line(line_number, "invalid JSON")
            return
        if not isinstance(entry, dict):
            self.skip_line(line_number, "not a JSON object")
            return
        if UNSAFE_ESCAPE.search(line):
            entry = storable(entry)
        parsed = parse_entry(entry)
        if isinstance(parsed, str):
            self.report.skip(LINES, parsed)
            return
        entry_id = entry.get("id")
        legacy = legacy_id(str(entry_id) if entry_id else f"line:{line_number}")
        when = entry_time(entry) or self.last_time or self.default_time
        # Never before the entry above it: the chat orders by time, the file's order is the truth.
        if self.last_time is not None and when < self.last_time:
            when = self.last_time
        self.last_time = when
        events = [
            self.new_event(kind, data, legacy if n == 0 else legacy_id(f"{legacy}#{n}"), when, tool)
            for n, (kind, data, tool) in enumerate(parsed.events)
        ]
        self.pending.append(Pending(legacy, events, parsed))
        self.pending_events += len(events)

    def flush(self) -> None:
        """Write the pending entries that are not in the session yet, as one batch."""
        batch, self.pending = self.pending, []
        self.pending_events = self.pending_bytes = 0
        if self.start_event is not None:
            first_time = next((p.events[0].created_at for p in batch), None)
            self.started_at = self.header_time or first_time or self.default_time
            self.start_event.created_at = self.started_at
        # Searched through the unique (session, type, legacy id) index: without the owner
        # (the session id is this owner's own UUID) and without the default ordering, which
        # would lead the planner to scan all of the owner's events.
        stored = set(
            Event.objects.filter(
                session_id=str(self.target.pk),
                event_type__in={p.events[0].event_type for p in batch},
                legacy_message_id__in=[p.legacy for p in batch],
            )
            .order_by()
            .values_list("event_type", "legacy_message_id")
        )
        events = [self.start_event] if self.start_event is not None else []
        self.start_event = None
        for pending in batch:
            mark = (pending.events[0].event_type, pending.legacy)
            if mark in stored:
                self.report.skip(LINES, "already imported")
                continue
            stored.add(mark)
            self.count(pending)
            events += pending.events
        if not events:
            return
        for event in events:
            if (smaller := cut(event.data)) is not None:
                event.data, event.text = smaller, str(smaller.get("content") or "")
                self.report.cut_short(EVENTS)
        record_imported(events, ImportJob.Kind.OPENCLAW)

    def count(self, pending: Pending) -> None:
        self.report.added(LINES)
        self.report.saw(EVENTS, len(pending.events))
        self.report.added(EVENTS, len(pending.events))
        parsed = pending.parsed
        self.report.saw(PARTS, parsed.parts + len(parsed.dropped))
        self.report.added(PARTS, parsed.parts)
        for reason in parsed.dropped:
            self.report.skip(PARTS, reason)
        self.new_entries += 1
        first = pending.events[0]
        if first.event_type == EventType.USER_MESSAGE:
            self.close_turn()
            self.turn_event = first
            self.title = self.title or Session.title_from(first.text)
        if parsed.usage is not None:
            self.usage += parsed.usage
            self.turn_usage += parsed.usage

    def close_turn(self) -> None:
        """The turn's usage (all its answers) kept with the message that started it,
        as a chat turn keeps it."""
        event, usage = self.turn_event, self.turn_usage
        self.turn_event, self.turn_usage = None, Usage()
        if event is None or usage == Usage():
            return
        event.data["turn_usage"] = usage.as_dict()
        if event.pk is not None:  # written with an earlier batch
            Event.objects.filter(pk=event.pk).update(data=event.data)

    def finish(self) -> None:
        session = self.target
        usage = self.usage
        if self.created and usage == Usage():
            # No usage on the messages: sessions.json's totals are the best there is.
            usage = usage_of(self.source.entry) or usage
        # A new session's own last_activity_at is now; an older one's may be a later chat.
        known = self.default_time if self.created else session.last_activity_at
        last = max(time for time in (self.last_time, known) if time is not None)
        fields: dict[str, Any] = {
            "last_activity_at": last,
            "updated_at": timezone.now(),
            **Session.adding(usage),
        }
        if self.created:
            fields["created_at"] = self.started_at or last
        if not session.title and self.title:
            fields["title"] = self.title
        Session.objects.filter(pk=session.pk).update(**fields)


def imported_sessions(owner: Owner, agent_name: str) -> dict[str, str]:
    """The OpenClaw sessions imported before: their mark → the Neotask session's id."""
    return dict(
        Event.objects.filter(
            owner=owner,
            agent=agent_name,
            event_type=EventType.SESSION_START,
            legacy_message_id__isnull=False,
        )
        .order_by()
        .values_list("legacy_message_id", "session_id")
    )


def import_session(
    owner: Owner,
    agent_name: str,
    source: Source,
    imported: dict[str, str],
    dry_run: bool,
    progress: Progress,
) -> ImportReport:
    """One session in one transaction (rolled back in a dry run); the report of what it did."""
    report = ImportReport(dry_run=dry_run)
    with transaction.atomic():
        agent, _ = Agent.objects.get_or_create(owner=owner, name=agent_name)
        work = SessionImport(owner, agent, source, imported, report)
        work.run(progress)
        if work.new_entries or work.created:
            report.saw(SESSIONS)
            report.added(SESSIONS)
        else:
            report.saw(SESSIONS)
            report.skip(SESSIONS, "already imported")
        if dry_run:
            transaction.set_rollback(True)
    return report
