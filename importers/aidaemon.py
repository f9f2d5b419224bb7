"""Moving in from aidaemon: its SQLite database, read-only, into Neotask.

What comes over:

- conversation: legacy `messages` rows and `events` rows, both if present.
  A row becomes an event of the user and agent chosen, in a session keyed
  `agent:<agent>:import:<aidaemon session id>`; an aidaemon id that is not a
  valid key part (letters, digits, '.', '_', '-', at most 64) becomes a slug
  plus a short hash, and the report lists each such mapping. Each session is
  imported in one transaction: a bad row is skipped with its reason, an
  error rolls the whole session back.
- de-duplication, as the messages→events migration does: an event remembers
  its source row in `legacy_message_id` (a message's id; an event's
  `data.message_id` when it has one, so the same message written to both
  tables is imported once, else `event:<id>`), and a row whose (session, event
  type, legacy id) exists is not imported again.
- embeddings: a JSON list of 384 floats is stored as the vector; anything
  else is left empty and the events are queued for embedding.
- event types Neotask's chat shows are imported; aidaemon's telemetry
  (task_start, llm_call, thinking_start, ...) is skipped with its type as reason.
- facts (by category/key: a fact you set yourself in Neotask wins over the
  imported value, one from the agent is replaced), macros, scheduled tasks
  (cron, original schedule, paused/one-time kept, next run recomputed; a
  one-time task whose time has passed comes paused; every task arrives
  untrusted), terminal prefixes (switched off). Trust comes from a person
  with the permission, never from a file: the report says what was not kept.

Everything is idempotent: a second import of the same file adds nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sqlite3
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agent.models import TerminalAllowedPrefix
from importers.report import ImportRefused, ImportReport, Progress, no_progress
from memory.legacy import event_for, parse_timestamp
from memory.models import Event, EventType, Fact, Macro, default_importance
from memory.tasks import needs_embedding, queue_embeddings
from memory.workspace import DEFAULT_AGENT, AgentNameError, check_agent_name
from scheduler.models import ScheduledTask
from scheduler.planning import (
    MAX_NAME_CHARS,
    TaskError,
    check_name,
    check_prompt,
    server_time_zone,
)
from scheduler.schedule import ScheduleError, next_run
from sessions_app.keys import SessionKey, is_part
from sessions_app.models import Agent, Session

log = logging.getLogger(__name__)

CHANNEL = "import"
# Rows per insert, and their text at most: a batch of huge rows stays small.
BATCH = 500
BATCH_BYTES = 512 * 1024
LEGACY_ID_LENGTH = 64  # Event.legacy_message_id

# Per table: the columns an import needs, and those it uses when present.
# Other columns are ignored.
TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "messages": (
        ("id", "session_id", "role", "content", "created_at"),
        (
            "tool_call_id",
            "tool_name",
            "tool_calls_json",
            "importance",
            "embedding",
            "embedding_error",
            "consolidated_at",
        ),
    ),
    "events": (
        ("id", "session_id", "event_type", "data", "created_at"),
        ("consolidated_at", "task_id", "tool_name"),
    ),
    "facts": (("category", "key", "value"), ("source", "created_at", "updated_at")),
    "macros": (
        ("trigger_tool", "next_tool"),
        ("trigger_args_pattern", "next_args", "confidence", "used_count"),
    ),
    "scheduled_tasks": (
        ("id", "name", "cron_expr", "prompt"),
        ("original_schedule", "source", "is_oneshot", "is_paused", "is_trusted", "next_run_at"),
    ),
    "terminal_allowed_prefixes": (("prefix",), ()),
}
# How the report names each table's rows.
KIND = {
    "messages": "messages",
    "events": "events",
    "facts": "facts",
    "macros": "macros",
    "scheduled_tasks": "scheduled tasks",
    "terminal_allowed_prefixes": "terminal prefixes",
}
SESSIONS = "sessions"

# aidaemon event types the chat shows; its telemetry types have no equivalent.
IMPORTED_TYPES = {
    EventType.USER_MESSAGE,
    EventType.ASSISTANT_RESPONSE,
    EventType.TOOL_CALL,
    EventType.TOOL_RESULT,
    EventType.SYSTEM,
    EventType.SESSION_START,
    EventType.SESSION_END,
    EventType.COMPACTION,
    EventType.SUMMARY,
    EventType.ERROR,
}
# Where an aidaemon payload keeps the words of a non-conversation event.
TEXT_KEYS = ("content", "message", "summary", "error", "reason")

ALREADY = "already imported"
SAME_MESSAGE = "same message as a messages row"
NOT_A_KEY_CHAR = re.compile(r"[^A-Za-z0-9_.-]+")
# Imported tasks' ids derive from their owner and aidaemon's id (see task_id).
TASK_NAMESPACE = uuid.UUID("5c6e0f3a-5a43-4f55-9d1b-6f0b1b4d7a10")


class BadRow(Exception):
    """A row that cannot be imported; the message is the report's reason."""


def import_aidaemon(
    path: str | Path,
    owner: Any,
    agent_name: str = DEFAULT_AGENT,
    dry_run: bool = False,
    progress: Progress = no_progress,
) -> ImportReport:
    """Import the aidaemon database at `path` for `owner`; ImportRefused if it
    cannot start (nothing written then)."""
    try:
        check_agent_name(agent_name)
    except AgentNameError as exc:
        raise ImportRefused(str(exc)) from None
    report = ImportReport(dry_run=dry_run)
    with open_database(path) as source:
        tables = usable_tables(source, report)
        importer = Importer(source, tables, owner, agent_name, report, progress)
        importer.conversations()
        importer.facts()
        importer.macros()
        importer.scheduled_tasks()
        importer.prefixes()
    return report


def count_rows(path: str | Path) -> int:
    """How many rows an import reads: the total of its progress."""
    with open_database(path) as source:
        return sum(
            source.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
            for table in usable_tables(source, ImportReport())
        )


@contextmanager
def open_database(path: str | Path) -> Iterator[sqlite3.Connection]:
    file = Path(path)
    if not file.is_file():
        raise ImportRefused(f"{file}: no such file.")
    source = sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True)
    source.row_factory = sqlite3.Row
    # A badly encoded text must cost one character, not the session.
    source.text_factory = lambda raw: raw.decode("utf-8", "replace")
    try:
        try:
            names = {row[0] for row in source.execute("SELECT name FROM sqlite_master")}
        except sqlite3.DatabaseError as exc:
            raise ImportRefused(f"{file.name} is not a SQLite database ({exc}).") from None
        if not names & set(TABLES):
            raise ImportRefused(
                f"{file.name} has none of aidaemon's tables ({', '.join(TABLES)}): "
                "is it an aidaemon database?"
            )
        yield source
    finally:
        source.close()


def usable_tables(source: sqlite3.Connection, report: ImportReport) -> dict[str, list[str]]:
    """Each importable table with the columns to read; notes on what is missing."""
    names = {row[0] for row in source.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    usable: dict[str, list[str]] = {}
    for table, (required, optional) in TABLES.items():
        if table not in names:
            report.note(f"No {table} table: nothing of it to import.")
            continue
        columns = {row["name"] for row in source.execute(f'PRAGMA table_info("{table}")')}
        missing = [column for column in required if column not in columns]
        if missing:
            rows = source.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
            reason = f"the {table} table has no column {', '.join(missing)}"
            report.saw(KIND[table], rows)
            report.skip(KIND[table], reason, rows)
            report.note(f"Not imported: {reason}.")
            continue
        usable[table] = [*required, *(column for column in optional if column in columns)]
    return usable


def chat_for(session_id: str) -> str:
    """The key's chat part: the aidaemon session id itself when it fits."""
    if is_part(session_id):
        return session_id
    slug = NOT_A_KEY_CHAR.sub("-", session_id).strip("-._")[:48] or "session"
    return f"{slug}-{hashlib.sha256(session_id.encode()).hexdigest()[:8]}"


def storable(value: Any) -> Any:
    """What a database can store of `value`: PostgreSQL takes no NUL character
    and no lone surrogate (JSON's "\\ud800"), in text or JSON."""
    if isinstance(value, str):
        return value.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, list):
        return [storable(item) for item in value]
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    return value


def timestamp(raw: Any, what: str = "created_at") -> datetime:
    try:
        value = parse_timestamp(raw) if isinstance(raw, str) else None
    except ValueError:
        value = None
    if value is None:
        raise BadRow(f"{what} is not a timestamp")
    return value


def optional_timestamp(raw: Any) -> datetime | None:
    try:
        return parse_timestamp(raw) if isinstance(raw, str) else None
    except ValueError:
        return None


def openai_tool_call(call: Any) -> Any:
    """aidaemon's {id, name, arguments} as the OpenAI form the agent sends back."""
    if not isinstance(call, dict) or "function" in call or "name" not in call:
        return call
    arguments = call.get("arguments", "")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {
        "id": call.get("id"),
        "type": "function",
        "function": {"name": call["name"], "arguments": arguments},
    }


def message_event(row: dict[str, Any], owner: Any) -> Event:
    """A `messages` row as an event, converted as the migration does, with its
    payload in the shape the chat and the agent read."""
    timestamp(row["created_at"])
    row["id"] = str(row["id"])  # SQLite may hold a number: compared as text later
    if len(row["id"]) > LEGACY_ID_LENGTH:
        raise BadRow(f"id is longer than {LEGACY_ID_LENGTH} characters")
    if isinstance(row.get("embedding"), str):
        row["embedding"] = row["embedding"].encode()
    event = event_for(SimpleNamespace(**row), owner, Event)
    data = event.data
    if isinstance(data.get("tool_calls"), list):
        data["tool_calls"] = [openai_tool_call(call) for call in data["tool_calls"]]
    if event.event_type == EventType.TOOL_RESULT:
        data.setdefault("name", row.get("tool_name") or "")
    event.data = storable(data)
    event.text = storable(event.text)
    return event


def payload_event(row: dict[str, Any], owner: Any) -> Event:
    """An `events` row as an event; its payload reshaped for the chat."""
    event_type = row["event_type"]
    if event_type not in IMPORTED_TYPES:
        raise BadRow(f"event type {event_type!r} has no Neotask equivalent")
    try:
        payload = json.loads(row["data"]) if row["data"] else {}
    except (TypeError, ValueError):
        raise BadRow("data is not JSON") from None
    if not isinstance(payload, dict):
        raise BadRow("data is not a JSON object")
    created_at = timestamp(row["created_at"])
    data, tool_name = chat_payload(event_type, payload)
    message_id = payload.get("message_id")
    if isinstance(message_id, str) and 0 < len(message_id) <= LEGACY_ID_LENGTH:
        legacy_id = message_id
    else:
        legacy_id = f"event:{row['id']}"
    task_id = row.get("task_id")
    return Event(
        owner=owner,
        event_type=event_type,
        data=storable(data),
        text=storable(data.get("content") or ""),
        created_at=created_at,
        consolidated_at=optional_timestamp(row.get("consolidated_at")),
        task_id=str(task_id)[:64] if task_id else None,
        tool_name=(row.get("tool_name") or tool_name or None),
        importance=default_importance(event_type),
        legacy_message_id=legacy_id,
    )


def chat_payload(event_type: str, payload: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Neotask's `data` for an aidaemon payload (as agent/runtime.py records
    it), and the tool's name if any."""
    if event_type == EventType.USER_MESSAGE:
        if not payload.get("content"):
            raise BadRow("a user message without content")
        return {"content": str(payload["content"])}, None
    if event_type == EventType.ASSISTANT_RESPONSE:
        data: dict[str, Any] = {
            "content": str(payload.get("content") or ""),
            "tool_calls": [openai_tool_call(call) for call in payload.get("tool_calls") or []],
        }
        if payload.get("input_tokens") or payload.get("output_tokens"):
            data["usage"] = {
                "input": int(payload.get("input_tokens") or 0),
                "output": int(payload.get("output_tokens") or 0),
                "cache_read": 0,
                "cache_write": 0,
            }
        if payload.get("model"):
            data["model"] = payload["model"]
        return data, None
    if event_type == EventType.TOOL_CALL:
        name = str(payload.get("name") or "")
        arguments = payload.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        return {"id": payload.get("tool_call_id"), "name": name, "arguments": arguments}, name
    if event_type == EventType.TOOL_RESULT:
        name = str(payload.get("name") or "")
        failed = payload.get("success") is False or bool(payload.get("error"))
        content = payload.get("result") or payload.get("content") or payload.get("error") or ""
        data = {
            "tool_call_id": payload.get("tool_call_id"),
            "name": name,
            "content": str(content),
            "is_error": failed,
        }
        return data, name
    words = next((payload[key] for key in TEXT_KEYS if isinstance(payload.get(key), str)), "")
    return {**payload, "content": words}, None


@contextmanager
def unit(dry_run: bool) -> Iterator[None]:
    """One transaction; a dry run rolls it back, so its counts are exact."""
    with transaction.atomic():
        yield
        if dry_run:
            transaction.set_rollback(True)


class Importer:
    def __init__(
        self,
        source: sqlite3.Connection,
        tables: dict[str, list[str]],
        owner: Any,
        agent_name: str,
        report: ImportReport,
        progress: Progress,
    ) -> None:
        self.source = source
        self.tables = tables
        self.owner = owner
        self.agent_name = agent_name
        self.report = report
        self.progress = progress
        self.dry_run = report.dry_run

    def rows(self, table: str, where: str = "", params: tuple = ()) -> Iterator[dict[str, Any]]:
        """The table's rows one at a time (constant memory), as dicts with
        every known column (None when the table lacks it)."""
        if table not in self.tables:
            return
        required, optional = TABLES[table]
        columns = self.tables[table]
        select = ", ".join(f'"{column}"' for column in columns)
        # Conversation in time order (both timestamp formats); the rest as stored.
        order = "ORDER BY replace(created_at, 'T', ' '), id" if "session_id" in columns else ""
        cursor = self.source.execute(f'SELECT {select} FROM "{table}" {where} {order}', params)
        blank = dict.fromkeys([*required, *optional])
        for row in cursor:
            yield {**blank, **dict(zip(columns, row, strict=True))}

    def agent(self) -> Agent:
        agent, _ = Agent.objects.get_or_create(owner=self.owner, name=self.agent_name)
        return agent

    # Conversations ---------------------------------------------------------------

    def conversations(self) -> None:
        parts = [
            f'SELECT session_id, created_at FROM "{table}"'
            for table in ("messages", "events")
            if table in self.tables
        ]
        if not parts:
            return
        # Least recently active first: the newest ends up on top of the chat list.
        sessions = self.source.execute(
            f"SELECT session_id FROM ({' UNION ALL '.join(parts)}) "
            "GROUP BY session_id ORDER BY max(replace(created_at, 'T', ' ')), session_id"
        )
        for (session_id,) in sessions.fetchall():
            self.conversation(session_id)

    def conversation(self, stored_id: Any) -> None:
        where, params = "WHERE session_id IS ?", (stored_id,)
        session_id = "" if stored_id is None else str(stored_id)
        if not session_id:
            for table in ("messages", "events"):
                for _ in self.rows(table, where, params):
                    self.report.saw(KIND[table])
                    self.report.skip(KIND[table], "no session id")
                    self.progress(1)
            return
        self.report.saw(SESSIONS)
        chat = chat_for(session_id)
        key = str(SessionKey(agent=self.agent_name, channel=CHANNEL, chat=chat))
        if chat != session_id:
            self.report.note(f"aidaemon session {session_id!r} → chat {key}")
        read: Counter[str] = Counter()
        added: Counter[str] = Counter()
        skipped: Counter[tuple[str, str]] = Counter()  # (kind, reason)
        try:
            with unit(self.dry_run):
                self.fill_session(stored_id, key, chat, read, added, skipped)
        except Exception as exc:
            for kind, count in read.items():
                self.report.saw(kind, count)
                self.report.skip(kind, f"session {session_id} rolled back", count)
            self.report.skip(SESSIONS, "failed, rolled back")
            self.report.note(
                f"aidaemon session {session_id!r} was not imported, nothing of it was "
                f"written: {type(exc).__name__}: {exc}"
            )
            return
        for kind, count in read.items():
            self.report.saw(kind, count)
        for kind, count in added.items():
            self.report.added(kind, count)
        for (kind, reason), count in skipped.items():
            self.report.skip(kind, reason, count)
        if sum(added.values()):
            self.report.added(SESSIONS)
        elif any(reason == ALREADY for _, reason in skipped):
            self.report.skip(SESSIONS, ALREADY)
        else:
            self.report.skip(SESSIONS, "no importable rows")

    def fill_session(
        self,
        stored_id: Any,
        key: str,
        chat: str,
        read: Counter[str],
        added: Counter[str],
        skipped: Counter[tuple[str, str]],
    ) -> None:
        """Import one aidaemon session's rows; runs inside its transaction."""
        agent = self.agent()
        session = Session.objects.filter(owner=self.owner, key=key).order_by("created_at").first()
        created = session is None
        if session is None:
            session = Session.start(self.owner, agent, CHANNEL, chat)
        neotask_id = str(session.pk)
        done = set(
            Event.objects.filter(
                owner=self.owner, session_id=neotask_id, legacy_message_id__isnull=False
            ).values_list("event_type", "legacy_message_id")
        )
        where, params = "WHERE session_id IS ?", (stored_id,)
        message_ids: set[str] = set()
        if "messages" in self.tables:
            message_ids = {
                str(row[0])
                for row in self.source.execute("SELECT id FROM messages " + where, params)
            }
        batch: list[Event] = []
        batch_bytes = 0
        first: Event | None = None
        title = ""
        now = timezone.now()
        for table, build in (("messages", message_event), ("events", payload_event)):
            kind = KIND[table]
            for row in self.rows(table, where, params):
                read[kind] += 1
                self.progress(1)
                try:
                    event = build(row, self.owner)
                except BadRow as exc:
                    skipped[kind, str(exc)] += 1
                    continue
                identity = (event.event_type, event.legacy_message_id)
                if table == "events" and event.legacy_message_id in message_ids:
                    skipped[kind, SAME_MESSAGE] += 1
                    continue
                if identity in done:
                    skipped[kind, ALREADY] += 1
                    continue
                done.add(identity)
                event.session_id = neotask_id
                event.agent = self.agent_name
                if event.embedding is not None:
                    event.embedded_at = now
                if first is None or event.created_at < first.created_at:
                    first = event
                if not title and event.event_type == EventType.USER_MESSAGE and event.text:
                    title = Session.title_from(event.text)
                batch.append(event)
                batch_bytes += len(event.text)
                added[kind] += 1
                if len(batch) >= BATCH or batch_bytes >= BATCH_BYTES:
                    Event.set_keys_in_order(batch)
                    Event.objects.bulk_create(batch)
                    batch, batch_bytes = [], 0
        Event.set_keys_in_order(batch)
        Event.objects.bulk_create(batch)
        if first is None:
            if created:
                transaction.set_rollback(True)  # no empty session left behind
            return
        changes: dict[str, Any] = {"last_activity_at": now}
        if created:
            changes["created_at"] = first.created_at
        if not session.title:
            changes["title"] = title or f"Imported from aidaemon: {stored_id}"[:200]
        Session.objects.filter(pk=session.pk).update(**changes)
        # After commit: the events that came without a vector.
        queue_embeddings(
            list(
                needs_embedding()
                .filter(owner=self.owner, session_id=neotask_id)
                .order_by("id")
                .values_list("id", flat=True)
            )
        )

    # Facts, macros, tasks, prefixes ----------------------------------------------

    @contextmanager
    def row_unit(self, kind: str) -> Iterator[None]:
        """One row's transaction: a failing row is reported, and the import goes on."""
        try:
            with unit(self.dry_run):
                yield
        except Exception as exc:
            log.warning("aidaemon import: a %s row failed", kind, exc_info=True)
            self.report.skip(kind, f"failed: {type(exc).__name__}: {exc}")

    def each(self, table: str) -> Iterator[dict[str, Any]]:
        """The table's rows, each counted as read."""
        kind = KIND[table]
        for row in self.rows(table):
            self.report.saw(kind)
            self.progress(1)
            yield row

    def facts(self) -> None:
        kind = KIND["facts"]
        for row in self.each("facts"):
            try:
                category = Fact.normalise(str(row["category"] or ""))
                key = Fact.normalise(str(row["key"] or ""))
                value = storable(str(row["value"] or "").strip())
                if not category or not key or not value:
                    raise BadRow("category, key or value is empty")
                if len(category) > 100 or len(key) > 255:
                    raise BadRow("category or key is too long")
                if len(value) > Fact.MAX_VALUE:
                    raise BadRow(f"value longer than {Fact.MAX_VALUE} characters")
            except BadRow as exc:
                self.report.skip(kind, str(exc))
                continue
            source = row["source"] if row["source"] in Fact.Source.values else Fact.Source.AGENT
            with self.row_unit(kind):
                fact = Fact.objects.filter(owner=self.owner, category=category, key=key).first()
                if fact is None:
                    fact = Fact.objects.create(
                        owner=self.owner, category=category, key=key, value=value, source=source
                    )
                    stamps = {
                        name: stamp
                        for name in ("created_at", "updated_at")
                        if (stamp := optional_timestamp(row[name]))
                    }
                    Fact.objects.filter(pk=fact.pk).update(**stamps)
                elif fact.value == value:
                    self.report.skip(kind, ALREADY)
                    continue
                elif fact.source == Fact.Source.USER:
                    self.report.skip(kind, "you set another value in Neotask: kept yours")
                    continue
                else:
                    fact.value, fact.source = value, source
                    fact.save(update_fields=["value", "source", "updated_at"])
                    self.report.note(f"Fact {category}/{key}: the agent's value replaced.")
                self.report.added(kind)

    def macros(self) -> None:
        kind = KIND["macros"]
        for row in self.each("macros"):
            try:
                trigger = str(row["trigger_tool"] or "").strip()
                following = str(row["next_tool"] or "").strip()
                if not trigger or not following or len(trigger) > 128 or len(following) > 128:
                    raise BadRow("trigger_tool or next_tool is empty or too long")
                try:
                    arguments = json.loads(row["next_args"]) if row["next_args"] else {}
                except (TypeError, ValueError):
                    raise BadRow("next_args is not JSON") from None
                confidence = float(row["confidence"] or 0.0)
                if not 0.0 <= confidence <= 1.0:
                    raise BadRow("confidence is not between 0 and 1")
                used = max(int(row["used_count"] or 0), 0)
            except (BadRow, TypeError, ValueError) as exc:
                reason = (
                    str(exc)
                    if isinstance(exc, BadRow)
                    else "confidence or used_count is not a number"
                )
                self.report.skip(kind, reason)
                continue
            pattern = row["trigger_args_pattern"] or None
            same_pattern = (
                Q(trigger_args_pattern=pattern)
                if pattern
                else Q(trigger_args_pattern__isnull=True) | Q(trigger_args_pattern="")
            )
            with self.row_unit(kind):
                exists = Macro.objects.filter(
                    same_pattern, owner=self.owner, trigger_tool=trigger, next_tool=following
                ).exists()
                if exists:
                    self.report.skip(kind, ALREADY)
                    continue
                Macro.objects.create(
                    owner=self.owner,
                    trigger_tool=trigger,
                    trigger_args_pattern=pattern,
                    next_tool=following,
                    next_args=storable(arguments),
                    confidence=confidence,
                    used_count=used,
                )
                self.report.added(kind)

    def scheduled_tasks(self) -> None:
        kind = KIND["scheduled_tasks"]
        zone = server_time_zone()
        now = timezone.now()
        for row in self.each("scheduled_tasks"):
            try:
                name = check_name(str(row["name"] or ""))
                prompt = check_prompt(storable(str(row["prompt"] or "")))
                cron = " ".join(str(row["cron_expr"] or "").split())
                following = next_run(cron, now, zone)
            except (TaskError, ScheduleError) as exc:
                self.report.skip(kind, f"task {row['name']!r}: {exc}")
                continue
            oneshot, paused = bool(row["is_oneshot"]), bool(row["is_paused"])
            if oneshot:
                # Its one time, as aidaemon planned it: the cron would pick next year's.
                following = optional_timestamp(row["next_run_at"]) or following
            pk = task_id(row["id"], self.owner)
            with self.row_unit(kind):
                if ScheduledTask.objects.filter(pk=pk).exists():
                    self.report.skip(kind, ALREADY)
                    continue
                if ScheduledTask.objects.owned_by(self.owner).filter(name=name).exists():
                    name = f"{name[: MAX_NAME_CHARS - 11]} (aidaemon)"
                if oneshot and following <= now and not paused:
                    paused = True
                    self.report.note(
                        f"One-time task {name!r}: its time has passed, imported paused."
                    )
                if row["is_trusted"]:
                    # Trust is granted by a person with the permission, never by a file.
                    self.report.note(
                        f"Task {name!r} was trusted in aidaemon: imported untrusted, so its "
                        "terminal commands ask first; mark it trusted in Neotask if you want."
                    )
                if row["source"] == ScheduledTask.Source.CONFIG:
                    self.report.note(
                        f"Task {name!r} came from aidaemon's config: imported as a task you "
                        "manage in Neotask (config.toml tasks are synced from the file)."
                    )
                ScheduledTask.objects.create(
                    pk=pk,
                    owner=self.owner,
                    name=name,
                    cron_expr=cron,
                    original_schedule=str(row["original_schedule"] or cron)[:500],
                    prompt=prompt,
                    source=ScheduledTask.Source.TOOL,
                    agent=self.agent(),
                    time_zone=zone,
                    is_oneshot=oneshot,
                    is_paused=paused,
                    is_trusted=False,
                    next_run_at=following,
                )
                self.report.added(kind)

    def prefixes(self) -> None:
        kind = KIND["terminal_allowed_prefixes"]
        switched_off = 0
        for row in self.each("terminal_allowed_prefixes"):
            prefix = storable(str(row["prefix"] or "").strip())
            if not prefix or len(prefix) > 500:
                self.report.skip(kind, "empty or longer than 500 characters")
                continue
            with self.row_unit(kind):
                # Off until their owner, holding the terminal permission, switches them on.
                _, created = TerminalAllowedPrefix.objects.get_or_create(
                    owner=self.owner, prefix=prefix, defaults={"active": False}
                )
                if created:
                    self.report.added(kind)
                    switched_off += 1
                else:
                    self.report.skip(kind, ALREADY)
        if switched_off:
            self.report.note(
                f"{switched_off} terminal prefix(es) imported switched off: "
                "review them on the terminal approvals page and switch on the ones you want."
            )


def task_id(raw: Any, owner: Any) -> uuid.UUID:
    """The aidaemon task's id, made the owner's own: stable across imports, and
    two users importing the same database do not collide."""
    return uuid.uuid5(TASK_NAMESPACE, f"{owner.pk}:{raw}")
