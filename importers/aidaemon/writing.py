"""Writing an aidaemon database into Neotask: each session in its own transaction,
then facts, macros, scheduled tasks and terminal prefixes, a row at a time."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agent.models import TerminalAllowedPrefix
from core.history import Actor
from core.ownership import Owner
from core.progress import Progress
from importers.aidaemon.database import Database
from importers.aidaemon.reading import (
    CUT,
    KIND,
    LEGACY_ID_LENGTH,
    TABLES,
    BadRow,
    bounded_select,
    message_event,
    optional_timestamp,
    payload_event,
    too_long,
)
from importers.models import ImportJob
from importers.report import ImportReport, ImportStopped
from importers.text import cut, storable
from memory.models import Event, EventType, Fact, Macro
from memory.recording import record_imported
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
SESSIONS = "sessions"  # the report's kind
ALREADY = "already imported"
SAME_MESSAGE = "same message as a messages row"
NOT_A_KEY_CHAR = re.compile(r"[^A-Za-z0-9_.-]+")
# Imported tasks' ids derive from their owner and aidaemon's id (see task_id).
TASK_NAMESPACE = uuid.UUID("5c6e0f3a-5a43-4f55-9d1b-6f0b1b4d7a10")


def chat_for(session_id: str) -> str:
    """The key's chat part: the aidaemon session id itself when it fits."""
    if is_part(session_id):
        return session_id
    slug = NOT_A_KEY_CHAR.sub("-", session_id).strip("-._")[:48] or "session"
    return f"{slug}-{hashlib.sha256(session_id.encode()).hexdigest()[:8]}"


@contextmanager
def unit(dry_run: bool) -> Iterator[None]:
    """One transaction; a dry run rolls it back, so its counts are exact."""
    with transaction.atomic():
        yield
        if dry_run:
            transaction.set_rollback(True)


@dataclass
class DatabaseImport:
    """One database's rows written into Neotask, table by table."""

    source: Database
    tables: dict[str, list[str]]  # the importable ones, with the columns to read
    owner: Owner
    agent_name: str
    report: ImportReport
    progress: Progress
    label: str  # the import, as the history names it
    raised: int = 0  # events imported at their type's importance, not aidaemon's higher one

    @property
    def actor(self) -> Actor:
        return Actor.importing(self.label)

    @property
    def dry_run(self) -> bool:
        return self.report.dry_run

    def rows(self, table: str, where: str = "", params: tuple = ()) -> Iterator[dict[str, Any]]:
        """The table's rows one at a time (constant memory), as dicts with
        every known column (None when the table lacks it) and CUT, the names of
        the values too long to be read whole."""
        if table not in self.tables:
            return
        required, optional = TABLES[table]
        columns = self.tables[table]
        select = bounded_select(columns)
        # Conversation in time order (both timestamp formats); the rest as stored.
        order = "ORDER BY replace(created_at, 'T', ' '), id" if "session_id" in columns else ""
        cursor = self.source.rows(f'SELECT {select} FROM "{table}" {where} {order}', params)
        blank = dict.fromkeys([*required, *optional])
        for row in cursor:
            *values, cut_names = row
            yield {**blank, **dict(zip(columns, values, strict=True)), CUT: cut_names.split()}

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
        sessions = self.source.rows(
            f"SELECT session_id FROM ({' UNION ALL '.join(parts)}) "
            "GROUP BY session_id ORDER BY max(replace(created_at, 'T', ' ')), session_id"
        )
        for (session_id,) in sessions:
            self.conversation(session_id)
        if self.raised:
            self.report.note(
                f"{self.raised} message(s) came with an importance above their kind's: "
                "imported at the usual importance (pin again the ones you want)."
            )

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
        shortened: Counter[str] = Counter()
        try:
            with unit(self.dry_run):
                raised = self.fill_session(stored_id, key, chat, read, added, skipped, shortened)
        except ImportStopped:
            raise  # the whole import stops: this session rolled back, the ones before kept
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
        self.raised += raised
        for kind, count in read.items():
            self.report.saw(kind, count)
        for kind, count in added.items():
            self.report.added(kind, count)
        for (kind, reason), count in skipped.items():
            self.report.skip(kind, reason, count)
        for kind, count in shortened.items():
            self.report.cut_short(kind, count)
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
        shortened: Counter[str],
    ) -> int:
        """Import one aidaemon session's rows; runs inside its transaction. Returns
        how many came above their type's importance (imported at it)."""
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
            # Only ids an event's message_id can match: none longer is held.
            message_ids = {
                str(row[0])
                for row in self.source.rows(
                    f"SELECT id FROM messages {where} "
                    f"AND length(CAST(id AS BLOB)) <= {4 * LEGACY_ID_LENGTH}",
                    params,
                )
            }
        batch: list[Event] = []
        batch_bytes = 0
        first: Event | None = None
        raised = 0
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
                if (smaller := cut(event.data)) is not None:
                    event.data, event.text = smaller, str(smaller.get("content") or "")
                    shortened[kind] += 1
                event.session_id = neotask_id
                event.agent = self.agent_name
                if first is None or event.created_at < first.created_at:
                    first = event
                if not title and event.event_type == EventType.USER_MESSAGE and event.text:
                    title = Session.title_from(event.text)
                batch.append(event)
                batch_bytes += len(event.text)
                added[kind] += 1
                if len(batch) >= BATCH or batch_bytes >= BATCH_BYTES:
                    raised += record_imported(batch, ImportJob.Kind.AIDAEMON)
                    batch, batch_bytes = [], 0
        raised += record_imported(batch, ImportJob.Kind.AIDAEMON)
        if first is None:
            if created:
                transaction.set_rollback(True)  # no empty session left behind
            return raised
        changes: dict[str, Any] = {"last_activity_at": now}
        if created:
            changes["created_at"] = first.created_at
        if not session.title:
            changes["title"] = title or f"Imported from aidaemon: {stored_id}"[:200]
        Session.objects.filter(pk=session.pk).update(**changes)
        return raised

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
            if row[CUT]:
                self.report.skip(kind, str(too_long(row[CUT])))
                continue
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
                if fact is not None and fact.value == value:
                    self.report.skip(kind, ALREADY)
                    continue
                if fact is not None and fact.source == Fact.Source.USER:
                    self.report.skip(kind, "you set another value in Neotask: kept yours")
                    continue
                fact, created = Fact.objects.remember(
                    self.owner,
                    category,
                    key,
                    value,
                    actor=self.actor,
                    source=source,
                    origin=Fact.Origin.IMPORT,
                    origin_label=self.label,
                )
                if created:
                    stamps = {
                        name: stamp
                        for name in ("created_at", "updated_at")
                        if (stamp := optional_timestamp(row[name]))
                    }
                    Fact.objects.filter(pk=fact.pk).update(**stamps)
                else:
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
                ScheduledTask(
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
                ).save_by(self.actor, force_insert=True)
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
                if TerminalAllowedPrefix.objects.filter(owner=self.owner, prefix=prefix).exists():
                    self.report.skip(kind, ALREADY)
                    continue
                rule = TerminalAllowedPrefix(owner=self.owner, prefix=prefix, active=False)
                rule.save_by(self.actor)
                self.report.added(kind)
                switched_off += 1
        if switched_off:
            self.report.note(
                f"{switched_off} terminal prefix(es) imported switched off: "
                "review them on the terminal approvals page and switch on the ones you want."
            )


def task_id(raw: Any, owner: Owner) -> uuid.UUID:
    """The aidaemon task's id, made the owner's own: stable across imports, and
    two users importing the same database do not collide."""
    return uuid.uuid5(TASK_NAMESPACE, f"{owner.pk}:{raw}")
