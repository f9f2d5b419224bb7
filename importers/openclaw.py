"""Moving in from OpenClaw: one agent folder's sessions, transcripts and memory files.

    <dir>/sessions/sessions.json    session key → {"sessionId", "updatedAt", "displayName", ...}
    <dir>/sessions/<sessionId>.jsonl a header line {"type": "session", ...}, then one entry a line
    <dir>/workspace/MEMORY.md, <dir>/workspace/memory/**/*.md   (or both directly in <dir>)

How it maps:

- Each transcript becomes one Neotask session of the target agent. An OpenClaw key that is a
  Neotask key, agent:<a>:<channel>:<chat>, is kept with its agent part replaced by the target
  agent; any other key becomes agent:<agent>:import:<slug of the key>, and a transcript that
  sessions.json does not name (a session OpenClaw reset) becomes
  agent:<agent>:import:<sessionId>. The report lists each mapping. When the key's chat already
  has an active session, that one is archived and the imported session continues it, as
  after a reset.
- Message entries become the events a chat turn stores (user_message, assistant_response with
  its tool calls and usage, tool_call, tool_result), compaction and branch summaries become
  summary events; entries are taken in file order. Thinking is not kept.
- Each session opens with a session_start event whose legacy_message_id names the OpenClaw
  session, and every event carries its entry's id (or line number) there too: a second run finds
  both and imports only what is new, so a transcript that grew adds its new entries only.
- A session is imported in one transaction: a failure leaves none of it. The file is streamed a
  line at a time and written in bounded batches, so memory stays flat on any size; a line
  longer than MAX_LINE_BYTES is skipped. New events are queued for embedding
  when the session commits (the sweep catches whatever a lost job missed).
- Memory files are copied into the agent's workspace and indexed. A workspace file with other
  content is never overwritten: the imported one goes to memory/imported/ beside it, or is
  skipped when that copy exists with other content too. Symlinks are not followed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agent.llm import Usage
from importers.report import ImportRefused, ImportReport, Progress, no_progress
from memory import files
from memory.models import Event, EventType, default_importance
from memory.tasks import queue_embeddings
from memory.workspace import DEFAULT_AGENT, AgentNameError, check_agent_name, workspace_dir
from sessions_app.keys import SessionKey, SessionKeyError, is_part
from sessions_app.models import Agent, Session

INDEX_NAME = "sessions.json"
MAX_INDEX_BYTES = 64 * 1024 * 1024
MAX_LINE_BYTES = 1024 * 1024
SKIP_CHUNK = 64 * 1024  # how much of an over-long line is read at a time to pass over it
# A batch is written when it holds this many events or this many bytes of lines.
BATCH_EVENTS = 500
BATCH_BYTES = 1024 * 1024
MAX_LINE_REASONS = 20  # per transcript: further bad lines share one reason
IMPORT_CHANNEL = "import"
SESSION_MARK = "openclaw:"
LEGACY_ID_LENGTH = 64  # Event.legacy_message_id

SUMMARY_TYPES = {"compaction", "branch_summary"}
# OpenClaw's bookkeeping (settings, labels, extensions' own entries): not conversation.
BOOKKEEPING_TYPES = {
    "model_change",
    "thinking_level_change",
    "custom",
    "custom_message",
    "label",
    "leaf",
    "session_info",
}
# OpenClaw's own name for a tool's result; its other roles are the chat's.
ROLE_ALIASES = {"toolResult": "tool"}
TOOL_CALL_BLOCKS = {"toolCall", "tool_use", "toolUse"}
UNSAFE_ESCAPE = re.compile(rb"\\u(0000|[dD][89a-fA-F])")

LINES = "transcript lines"
SESSIONS = "sessions"
EVENTS = "events"
PARTS = "message parts"
MEMORY_FILES = "memory files"


# The folder


@dataclass
class Folder:
    """What an OpenClaw agent folder holds; `locate` refuses a folder with nothing to import."""

    root: Path
    sessions_dir: Path | None
    transcripts: list[Path]
    memory_source: Path | None
    transcript_bytes: int  # the total of the import's progress
    notes: list[str] = field(default_factory=list)

    @classmethod
    def locate(cls, path: str | Path) -> Folder:
        root = Path(path).expanduser()
        if not root.is_dir():
            raise ImportRefused(f"{path} is not a directory.")
        root = root.resolve()
        sessions_dir = next(
            (
                candidate
                for candidate in (root / "sessions", root)
                if candidate.is_dir()
                and ((candidate / INDEX_NAME).is_file() or any(candidate.glob("*.jsonl")))
            ),
            None,
        )
        transcripts = sorted(sessions_dir.glob("*.jsonl")) if sessions_dir else []
        notes = []
        if (root / "workspace").is_symlink():
            notes.append("workspace/ is a symlink: not followed, its memory files not imported.")
        memory_source = next(
            (
                candidate
                for candidate in (root / "workspace", root)
                if candidate.is_dir()
                and not candidate.is_symlink()
                and any(
                    (candidate / name).exists() or (candidate / name).is_symlink()
                    for name in (files.MEMORY_FILE, files.MEMORY_DIR)
                )
            ),
            None,
        )
        if sessions_dir is None and memory_source is None:
            raise ImportRefused(
                f"{path} is not an OpenClaw agent folder: it has no sessions/{INDEX_NAME}, "
                "no transcripts (*.jsonl) and no MEMORY.md or memory/."
            )
        size = sum(p.stat().st_size for p in transcripts if p.is_file() and not p.is_symlink())
        return cls(root, sessions_dir, transcripts, memory_source, size, notes)


@dataclass
class Source:
    """One OpenClaw session to import."""

    session_id: str
    key: str | None  # None: a transcript sessions.json does not name
    entry: dict[str, Any]
    transcript: Path


def read_index(folder: Folder, report: ImportReport) -> dict[str, Any]:
    index_path = folder.sessions_dir / INDEX_NAME if folder.sessions_dir else None
    if index_path is None or not index_path.is_file():
        if folder.transcripts:
            report.note(f"No {INDEX_NAME}: every transcript is imported under an import key.")
        return {}
    if index_path.stat().st_size > MAX_INDEX_BYTES:
        report.note(f"{INDEX_NAME} is larger than {MAX_INDEX_BYTES} bytes and was not read.")
        return {}
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        report.note(f"{INDEX_NAME} is not valid JSON ({exc}); transcripts imported without keys.")
        return {}
    if not isinstance(index, dict):
        report.note(f"{INDEX_NAME} is not a JSON object; transcripts imported without keys.")
        return {}
    return index


def find_sources(folder: Folder, report: ImportReport) -> list[Source]:
    """Sessions named by sessions.json first (oldest first), then the other transcripts."""
    index = read_index(folder, report)
    by_file = {path.name: path for path in folder.transcripts}
    sources: list[Source] = []
    claimed: set[str] = set()
    entries = [(key, entry) for key, entry in index.items() if isinstance(entry, dict)]
    if malformed := len(index) - len(entries):
        report.saw(SESSIONS, malformed)
        report.skip(SESSIONS, "sessions.json entry is not an object", malformed)
    entries.sort(key=lambda item: (number(item[1].get("updatedAt")) or 0, item[0]))
    for key, entry in entries:
        session_id = entry.get("sessionId")
        if not isinstance(session_id, str) or not session_id:
            report.saw(SESSIONS)
            report.skip(SESSIONS, "sessions.json entry without a sessionId")
            continue
        if session_id in claimed:
            report.note(f"{key} names session {session_id} again; imported once.")
            continue
        claimed.add(session_id)
        names = [f"{session_id}.jsonl"]
        if isinstance(entry.get("sessionFile"), str):
            # Absolute paths point into the machine the folder came from: the name is enough.
            names.append(Path(entry["sessionFile"]).name)
        transcript = next((by_file[name] for name in names if name in by_file), None)
        if transcript is None:
            report.saw(SESSIONS)
            report.skip(SESSIONS, "transcript missing")
            report.note(f"{key}: no transcript {session_id}.jsonl.")
            continue
        claimed.add(transcript.name)
        sources.append(Source(session_id, key, entry, transcript))
    for path in folder.transcripts:
        if path.name not in claimed and path.stem not in claimed:
            sources.append(Source(path.stem, None, {}, path))
    return sources


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


# Entries


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 string, or an epoch in milliseconds (OpenClaw) or seconds."""
    try:
        if isinstance(value, str) and value:
            parsed = datetime.fromisoformat(value)
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        if (seconds := number(value)) is not None:
            return datetime.fromtimestamp(seconds / 1000 if seconds > 1e11 else seconds, UTC)
    except (ValueError, OverflowError, OSError):
        return None
    return None


def clean(value: Any) -> Any:
    """Strings as the databases store them: no NUL (PostgreSQL refuses it), no lone surrogates."""
    if isinstance(value, str):
        return value.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, list):
        return [clean(item) for item in value]
    if isinstance(value, dict):
        return {clean(key): clean(item) for key, item in value.items()}
    return value


def usage_of(raw: Any) -> Usage | None:
    """OpenClaw's usage ({input, output, cacheRead, cacheWrite}) or a provider's own."""
    if not isinstance(raw, dict):
        return None

    def count(*names: str) -> int:
        for name in names:
            value = raw.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
        return 0

    usage = Usage(
        input=count("input", "inputTokens", "input_tokens", "prompt_tokens"),
        output=count("output", "outputTokens", "output_tokens", "completion_tokens"),
        cache_read=count("cacheRead", "cache_read", "cache_read_input_tokens"),
        cache_write=count("cacheWrite", "cache_write", "cache_creation_input_tokens"),
    )
    return usage if usage != Usage() else None


@dataclass
class Parsed:
    """What one transcript entry becomes: events (type, data, tool name), in order."""

    events: list[tuple[str, dict[str, Any], str | None]]
    usage: Usage | None = None
    parts: int = 0  # content blocks kept
    dropped: list[str] = field(default_factory=list)  # why the others were not


def text_of(content: Any, parsed: Parsed, calls: list[dict[str, Any]] | None = None) -> str:
    """The text of a message's content (a string or a list of blocks); tool-call blocks go
    to `calls` when given, anything that is not text is counted in `parsed`."""
    if isinstance(content, str):
        parsed.parts += 1
        return content
    if not isinstance(content, list):
        return ""
    texts = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else type(block).__name__
        if isinstance(block, str):
            texts.append(block)
        elif not isinstance(block, dict):
            parsed.dropped.append(f"unknown content block {kind}")
            continue
        elif kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "image":
            texts.append("[image]")
        elif kind in TOOL_CALL_BLOCKS and calls is not None:
            calls.append(block)
        elif kind in ("thinking", "redacted_thinking"):
            parsed.dropped.append("thinking (not kept)")
            continue
        else:
            parsed.dropped.append(f"unknown content block {str(kind)[:40]}")
            continue
        parsed.parts += 1
    return "\n".join(texts)


def tool_call_event(call: dict[str, Any], position: int) -> dict[str, Any]:
    function = call.get("function") if isinstance(call.get("function"), dict) else {}
    name = call.get("name") or function.get("name") or "unknown"
    arguments = call.get("arguments", call.get("input", function.get("arguments", {})))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {
        "id": str(call.get("id") or f"call_{position}"),
        "name": str(name),
        "arguments": arguments,
    }


def parse_message(message: dict[str, Any]) -> Parsed | str:
    role = message.get("role")
    event_type = EventType.of_role(ROLE_ALIASES.get(role, role)) if isinstance(role, str) else None
    if event_type is None:
        return f"unknown message role {str(role)[:40]}"
    parsed = Parsed([])
    content = message.get("content")
    if event_type == EventType.ASSISTANT_RESPONSE:
        blocks: list[dict[str, Any]] = []
        text = text_of(content, parsed, blocks)
        openai_calls = message.get("tool_calls")
        if isinstance(openai_calls, list):
            blocks += [call for call in openai_calls if isinstance(call, dict)]
        calls = [tool_call_event(call, n) for n, call in enumerate(blocks, start=1)]
        parsed.usage = usage_of(message.get("usage"))
        data: dict[str, Any] = {
            "content": text,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for call in calls
            ],
            "usage": (parsed.usage or Usage()).as_dict(),
        }
        stop = message.get("stopReason") or message.get("finish_reason")
        if isinstance(stop, str):
            data["finish_reason"] = stop
        if stop in ("error", "aborted"):
            data.update(interrupted=True, reason=stop)
        if isinstance(message.get("model"), str):
            data["model"] = message["model"]
        parsed.events.append((event_type, data, None))
        parsed.events += [(EventType.TOOL_CALL, call, call["name"]) for call in calls]
        if not text and not calls and not data.get("interrupted"):
            return "empty message" if not parsed.dropped else "nothing but thinking"
        return parsed
    text = text_of(content, parsed)
    if event_type == EventType.TOOL_RESULT:
        name = str(message.get("toolName") or message.get("name") or "unknown")
        data = {
            "tool_call_id": str(message.get("toolCallId") or message.get("tool_call_id") or ""),
            "name": name,
            "content": text,
            "is_error": bool(message.get("isError") or message.get("is_error")),
        }
        parsed.events.append((event_type, data, name))
        return parsed
    if not text.strip():
        return "empty message"
    parsed.events.append((event_type, {"content": text}, None))
    return parsed


def parse_entry(entry: dict[str, Any]) -> Parsed | str:
    """The events of one transcript entry, or why it gives none."""
    kind = entry.get("type")
    if kind == "message" and isinstance(entry.get("message"), dict):
        return parse_message(entry["message"])
    if kind in (None, "message") and "role" in entry:  # the older, flat form
        return parse_message(entry)
    if kind in SUMMARY_TYPES:
        summary = entry.get("summary")
        if not isinstance(summary, str) or not summary.strip():
            return f"{kind} without a summary"
        data = {"content": summary, "source": f"openclaw {kind}"}
        if number(entry.get("tokensBefore")) is not None:
            data["tokens_before"] = entry["tokensBefore"]
        return Parsed([(EventType.SUMMARY, data, None)], parts=1)
    if kind in BOOKKEEPING_TYPES:
        return f"{kind} (not conversation)"
    return f"unknown entry type {str(kind)[:40]}"


def entry_time(entry: dict[str, Any]) -> datetime | None:
    message = entry.get("message") if isinstance(entry.get("message"), dict) else {}
    return parse_time(entry.get("timestamp")) or parse_time(message.get("timestamp"))


def read_lines(handle: IO[bytes]) -> Iterator[tuple[int, bytes | None, int]]:
    """(line number, line, bytes read) for each line; the line is None when it is longer
    than MAX_LINE_BYTES, which is passed over without being held in memory."""
    line_number = 0
    while line := handle.readline(MAX_LINE_BYTES + 1):
        line_number += 1
        size = len(line)
        if size > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while rest := handle.readline(SKIP_CHUNK):
                size += len(rest)
                if rest.endswith(b"\n"):
                    break
            yield line_number, None, size
        else:
            yield line_number, line, size


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
        owner: Any,
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
        self.session: Session | None = None
        self.created = False
        self.default_time = parse_time(source.entry.get("updatedAt")) or datetime.fromtimestamp(
            source.transcript.stat().st_mtime, UTC
        )
        self.start_event: Event | None = None
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
        self.embed_ids: list[int] = []

    # The session

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
        self.start_event = self.new_event(EventType.SESSION_START, clean(data), mark, started)
        self.last_time = started
        if header:
            self.report.saw(LINES)
            self.report.added(LINES)

    def index_title(self) -> str:
        for name in ("displayName", "label", "subject"):
            value = self.source.entry.get(name)
            if isinstance(value, str) and value.strip():
                return Session.title_from(clean(value))
        return ""

    def new_event(
        self,
        event_type: str,
        data: dict[str, Any],
        legacy: str,
        created_at: datetime | None,
        tool_name: str | None = None,
    ) -> Event:
        return Event(
            owner=self.owner,
            session_id=str(self.session.pk),
            agent=self.agent.name,
            event_type=event_type,
            data=data,
            text=data.get("content") or "",
            importance=default_importance(event_type),
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
            entry = clean(entry)
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
            self.started_at = self.start_event.created_at or first_time or self.default_time
            self.start_event.created_at = self.started_at
        # Searched through the unique (session, type, legacy id) index: without the owner
        # (the session id is this owner's own UUID) and without the default ordering, which
        # would lead the planner to scan all of the owner's events.
        stored = set(
            Event.objects.filter(
                session_id=str(self.session.pk),
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
        Event.set_keys_in_order(events)
        Event.objects.bulk_create(events)
        self.embed_ids += [
            event.pk for event in events if event.event_type in EventType.CONTENT and event.text
        ]

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
        session = self.session
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
            "input_tokens": F("input_tokens") + usage.input,
            "output_tokens": F("output_tokens") + usage.output,
            "cache_read_tokens": F("cache_read_tokens") + usage.cache_read,
            "cache_write_tokens": F("cache_write_tokens") + usage.cache_write,
        }
        if self.created:
            fields["created_at"] = self.started_at or last
        if not session.title and self.title:
            fields["title"] = self.title
        Session.objects.filter(pk=session.pk).update(**fields)
        queue_embeddings(self.embed_ids)


def imported_sessions(owner: Any, agent_name: str) -> dict[str, str]:
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
    owner: Any,
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


def merge(into: ImportReport, report: ImportReport) -> None:
    into.read.update(report.read)
    into.imported.update(report.imported)
    into.skipped.update(report.skipped)
    for kind, reasons in report.reasons.items():
        into.reasons.setdefault(kind, Counter()).update(reasons)
    into.notes.extend(report.notes)


# Memory files


def memory_sources(source: Path, report: ImportReport) -> Iterator[tuple[str, Path]]:
    """(relative path, file) of MEMORY.md and memory/**/*.md; symlinks are reported, not read."""
    top = source / files.MEMORY_FILE
    if top.is_symlink():
        report.saw(MEMORY_FILES)
        report.skip(MEMORY_FILES, "symlink (not followed)")
    elif top.is_file():
        yield files.MEMORY_FILE, top
    directory = source / files.MEMORY_DIR
    if directory.is_symlink():
        report.saw(MEMORY_FILES)
        report.skip(MEMORY_FILES, "memory/ is a symlink (not followed)")
        return
    for relative, entry in files.walk_markdown(directory, files.MEMORY_DIR):
        path = Path(entry.path)
        if entry.is_symlink() or not path.resolve().is_relative_to(source):
            report.saw(MEMORY_FILES)
            report.skip(MEMORY_FILES, "symlink (not followed)")
        else:
            yield relative, path


def imported_path(relative: str) -> str:
    """Where an imported file goes when the workspace has another file at its place."""
    inner = relative.removeprefix(f"{files.MEMORY_DIR}/")
    return f"{files.MEMORY_DIR}/imported/{inner}"


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
        except (OSError, files.MemoryPathError) as exc:
            report.skip(MEMORY_FILES, "could not be copied")
            report.note(f"{relative} not copied: {exc}")
            continue
        if copied:
            report.added(MEMORY_FILES)
    if not dry_run:
        Agent.objects.get_or_create(owner=owner, name=agent_name)
        files.index_workspace(owner, agent_name)


def copy_memory_file(
    workspace: Path, relative: str, path: Path, report: ImportReport, dry_run: bool
) -> bool:
    if path.stat().st_size > files.max_file_bytes():
        report.skip(MEMORY_FILES, f"larger than {files.max_file_bytes()} bytes")
        return False
    data = path.read_bytes()
    if reason := files.skip_reason_for(data):
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
        files.write_memory_file(workspace, target, data.decode("utf-8"))
    return True


def place_for(workspace: Path, relative: str, data: bytes) -> str | None:
    """The workspace path to write `data` to; None if it is there already, "" if both
    places hold something else."""
    for candidate in (relative, imported_path(relative)):
        _, full = files.resolve_memory_path(workspace, candidate)
        if not full.exists():
            return candidate
        if full.is_file() and full.read_bytes() == data:
            return None
    return ""


# The import


def import_openclaw(
    path: str | Path,
    owner: Any,
    agent_name: str = DEFAULT_AGENT,
    dry_run: bool = False,
    progress: Progress = no_progress,
) -> ImportReport:
    """Import an OpenClaw agent folder into `owner`'s agent `agent_name`; see the module's
    docstring. Raises ImportRefused, having written nothing, when it cannot start."""
    try:
        check_agent_name(agent_name)
    except AgentNameError as exc:
        raise ImportRefused(str(exc)) from None
    folder = Folder.locate(path)
    report = ImportReport(dry_run=dry_run)
    for line in folder.notes:
        report.note(line)
    imported = imported_sessions(owner, agent_name)  # one query, not one per session
    for source in find_sources(folder, report):
        if source.transcript.is_symlink():
            report.saw(SESSIONS)
            report.skip(SESSIONS, "transcript is a symlink (not followed)")
            continue
        try:
            merge(report, import_session(owner, agent_name, source, imported, dry_run, progress))
        except Exception as exc:
            report.saw(SESSIONS)
            report.skip(SESSIONS, f"failed ({type(exc).__name__}), nothing of it kept")
            report.note(f"Session {source.session_id} ({source.transcript.name}) failed: {exc}")
    copy_memory_files(folder, owner, agent_name, report, dry_run)
    return report
