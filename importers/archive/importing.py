"""Importing an export archive for a user: checked whole first (the archive, then
every record), then written in one transaction with new ids; memory files are
written only after it commits. No trust is carried over: tasks arrive untrusted,
terminal rules switched off."""

from __future__ import annotations

import uuid
import zoneinfo
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from agent.llm import Usage
from agent.models import TerminalAllowedPrefix
from core.history import Actor
from core.ownership import Owner
from core.progress import Progress
from importers.archive import layout
from importers.archive.reading import Archive, member_count, refused
from importers.importer import Importer
from importers.models import ImportedArchive, ImportJob
from importers.openclaw.memory_files import place_for
from importers.report import ImportRefused, ImportReport
from importers.text import cut, storable
from memory.files.history import record_file_change
from memory.files.indexing import index_workspace
from memory.files.paths import memory_path, skip_reason_for, write_memory_file
from memory.files.workspace_fs import MemoryPathError
from memory.models import Event, EventType, Fact, Macro
from memory.recording import draft, record_imported
from memory.workspace import check_agent_name, is_agent_name, workspace_dir
from scheduler.models import ScheduledTask
from scheduler.planning import MAX_NAME_CHARS, TaskError, check_name, check_prompt
from scheduler.schedule import ScheduleError, next_run
from sessions_app.keys import SessionKey, SessionKeyError, is_part
from sessions_app.models import Agent, Session

BATCH = 500  # events per insert
MAX_CONDENSED = 100_000  # sources of one summary
# A summary's or compaction's data naming events and sessions by their archive ids.
EVENT_ID_KEYS = ("first_event_id", "last_event_id")
PROMOTED = ("tool_calls", "tool_call_id", "is_error", "usage")  # transcripts' own fields


class BadRecord(ValueError):
    pass


# Checking one record: each returns what is written, or raises BadRecord.


def text(record: dict[str, Any], name: str, limit: int, *, empty: bool = False) -> str:
    value = record.get(name)
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise BadRecord(f"{name!r} must be a{'' if empty else ' non-empty'} string")
    if len(value) > limit:
        raise BadRecord(f"{name!r} is longer than {limit} characters")
    return storable(value)


def optional_text(record: dict[str, Any], name: str, limit: int) -> str | None:
    return None if record.get(name) is None else text(record, name, limit, empty=True)


def flag(record: dict[str, Any], name: str) -> bool:
    value = record.get(name, False)
    if not isinstance(value, bool):
        raise BadRecord(f"{name!r} must be true or false")
    return value


def number(record: dict[str, Any], name: str, low: float, high: float | None = None) -> float:
    value = record.get(name)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise BadRecord(f"{name!r} must be a number")
    if value < low or (high is not None and value > high):
        raise BadRecord(f"{name!r} is out of range")
    return value


def count(record: dict[str, Any], name: str) -> int:
    value = number(record, name, 0)
    if not isinstance(value, int):
        raise BadRecord(f"{name!r} must be a whole number")
    return value


def event_ids(record: dict[str, Any], name: str) -> list[int] | None:
    """A list of archive event ids (a summary's sources); None when absent."""
    value = record.get(name)
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) > MAX_CONDENSED
        or not all(isinstance(item, int) and not isinstance(item, bool) for item in value)
    ):
        raise BadRecord(f"{name!r} must be a list of at most {MAX_CONDENSED} event ids")
    return value


def moment(record: dict[str, Any], name: str, *, required: bool = False) -> datetime | None:
    value = record.get(name)
    if value is None and not required:
        return None
    try:
        parsed = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise BadRecord(f"{name!r} must be a timestamp with its time zone")
    return parsed


@dataclass
class SessionHead:
    old_id: str
    key: SessionKey
    title: str
    status: str
    usage: Usage
    compaction_count: int
    continues_from: str | None
    created_at: datetime
    last_activity_at: datetime


def session_head(record: dict[str, Any]) -> SessionHead:
    if record.get("type") != "session":
        raise BadRecord("the first line must be the session (type 'session')")
    try:
        key = SessionKey.parse(text(record, "key", 255))
    except SessionKeyError as exc:
        raise BadRecord(str(exc)) from None
    if not key.is_scheduled and record.get("agent") != key.agent:
        raise BadRecord("'agent' is not the agent of its key")
    if key.is_scheduled:
        key = SessionKey.for_task(key.chat, agent=text(record, "agent", 64))
        if not is_agent_name(key.agent):
            raise BadRecord("'agent' is not an agent name")
    status = record.get("status")
    if status not in Session.Status.values:
        raise BadRecord(f"'status' must be one of {', '.join(Session.Status.values)}")
    tokens = record.get("tokens")
    if not isinstance(tokens, dict):
        raise BadRecord("'tokens' must be an object")
    usage = Usage(*(count(tokens, name) for name in Usage().as_dict()))
    previous = optional_text(record, "continues_from", 64)
    return SessionHead(
        old_id=text(record, "id", 64),
        key=key,
        title=text(record, "title", 200, empty=True),
        status=status,
        usage=usage,
        compaction_count=count(record, "compaction_count"),
        continues_from=previous,
        created_at=moment(record, "created_at", required=True),  # type: ignore[arg-type]
        last_activity_at=moment(record, "last_activity_at", required=True),  # type: ignore[arg-type]
    )


def event_fields(record: dict[str, Any]) -> dict[str, Any]:
    """An event's type, data and fields from its transcript line (event_record reversed)."""
    kind = record.get("type")
    if kind not in EventType.values:
        raise BadRecord(f"'type' must be an event type, not {kind!r}")
    data = record.get("data", {})
    if not isinstance(data, dict):
        raise BadRecord("'data' must be an object")
    data = dict(data)
    content = record.get("content", "")
    if content != "":  # not always a string: kept as the event stored it
        data["content"] = content
    tool_call = record.get("tool_call", {})
    if not isinstance(tool_call, dict):
        raise BadRecord("'tool_call' must be an object")
    data.update(tool_call)
    data.update({name: record[name] for name in PROMOTED if name in record})
    data = storable(data)
    if (smaller := cut(data)) is not None:
        data = smaller
    old_id = record.get("id")
    return {
        "old_id": old_id if isinstance(old_id, int) else None,
        "event_type": kind,
        "data": data,
        "text": data["content"] if isinstance(data.get("content"), str) else "",
        "created_at": moment(record, "timestamp", required=True),
        "importance": number(record, "importance", 0.0, 1.0),
        "tool_name": optional_text(record, "tool_name", 128),
        "consolidated_at": moment(record, "consolidated_at"),
        "condensed": event_ids(record, "condensed"),
    }


def fact_fields(record: dict[str, Any]) -> dict[str, Any]:
    source = record.get("source")
    if source not in Fact.Source.values:
        raise BadRecord(f"'source' must be one of {', '.join(Fact.Source.values)}")
    return {
        "category": Fact.normalise(text(record, "category", 100)),
        "key": Fact.normalise(text(record, "key", 255)),
        "value": text(record, "value", Fact.MAX_VALUE).strip(),
        "source": source,
        "origin": origin if (origin := record.get("origin")) in Fact.Origin.values else "",
        "origin_event_id": event_id
        if isinstance(event_id := record.get("origin_event_id"), int)
        else None,
        "created_at": moment(record, "created_at"),
        "updated_at": moment(record, "updated_at"),
    }


def macro_fields(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "trigger_tool": text(record, "trigger_tool", 128).strip(),
        "trigger_args_pattern": optional_text(record, "trigger_args_pattern", 10_000) or None,
        "next_tool": text(record, "next_tool", 128).strip(),
        "next_args": storable(record.get("next_args") or {}),
        "confidence": number(record, "confidence", 0.0, 1.0),
        "used_count": count(record, "used_count"),
        "is_disabled": flag(record, "is_disabled"),
    }


def task_fields(record: dict[str, Any]) -> dict[str, Any]:
    zone = text(record, "time_zone", 64)
    try:
        zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise BadRecord(f"'time_zone' {zone!r} is not a time zone") from None
    cron = " ".join(text(record, "cron_expr", 100).split())
    try:
        name = check_name(text(record, "name", MAX_NAME_CHARS))
        prompt = check_prompt(text(record, "prompt", 100_000))
        next_run(cron, timezone.now(), zone)
    except (TaskError, ScheduleError) as exc:
        raise BadRecord(str(exc)) from None
    agent = optional_text(record, "agent", 64)
    if agent is not None and not is_agent_name(agent):
        raise BadRecord("'agent' is not an agent name")
    return {
        "old_id": text(record, "id", 64),
        "name": name,
        "agent": agent,
        "cron_expr": cron,
        "original_schedule": text(record, "original_schedule", 500, empty=True) or cron,
        "prompt": prompt,
        "source": record.get("source"),
        "time_zone": zone,
        "is_oneshot": flag(record, "is_oneshot"),
        "is_paused": flag(record, "is_paused"),
        "is_trusted": flag(record, "is_trusted"),
        "next_run_at": moment(record, "next_run_at", required=True),
        "last_run_at": moment(record, "last_run_at"),
    }


def rule_fields(record: dict[str, Any]) -> dict[str, Any]:
    return {"prefix": text(record, "prefix", 500).strip(), "was_active": flag(record, "active")}


def agent_fields(record: Any) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise BadRecord("an agent must be an object")
    name = record.get("name")
    if not is_agent_name(name):
        raise BadRecord(f"{name!r} is not an agent name")
    return {"name": name, "system_prompt": text(record, "system_prompt", 100_000, empty=True)}


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


# The import


@dataclass
class ArchiveImport:
    archive: Archive
    owner: Owner
    report: ImportReport
    progress: Progress
    agents: dict[str, Agent] = field(default_factory=dict)
    task_ids: dict[str, str] = field(default_factory=dict)  # archive's id → new id
    imported_events: dict[int, Event] = field(default_factory=dict)  # archive id → event
    sessions: dict[str, Session] = field(default_factory=dict)  # archive id → session
    # Summaries and compactions, with their sources' archive ids (None: not carried,
    # an archive written before they were), linked once every session is written.
    condensing: list[tuple[Event, list[int] | None]] = field(default_factory=list)
    raised: int = 0  # events whose importance the archive set above their type's
    label: str = "Neotask export"  # the import, as the history and provenance name it

    @property
    def actor(self) -> Actor:
        return Actor.importing(self.label)

    def records(
        self, name: str, check: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> Iterator[dict[str, Any]]:
        if name not in self.archive.members:
            return
        for number, record in self.archive.lines(name):
            try:
                yield check(record)
            except BadRecord as exc:
                raise refused(f"{name} line {number}: {exc}.") from None
        self.progress(1)

    def agent_list(self) -> list[dict[str, Any]]:
        if layout.AGENTS not in self.archive.members:
            return []
        listed = self.archive.json(layout.AGENTS)
        self.progress(1)
        if not isinstance(listed, list):
            raise refused(f"{layout.AGENTS} is not a list of agents.")
        try:
            return [agent_fields(record) for record in listed]
        except BadRecord as exc:
            raise refused(f"{layout.AGENTS}: {exc}.") from None

    def session_members(self) -> list[str]:
        return [
            name
            for name in self.archive.members
            if name.startswith(layout.SESSIONS_DIR) and name.endswith(".jsonl")
        ]

    def memory_files(self) -> list[MemoryFileEntry]:
        entries = []
        for name in self.archive.members:
            if not name.startswith(layout.MEMORY_DIR):
                continue
            try:
                entries.append(memory_entry(name))
            except BadRecord as exc:
                raise refused(f"{name} is not a memory file: {exc}.") from None
        return entries

    def session(self, name: str) -> tuple[SessionHead, Iterator[dict[str, Any]]]:
        """The session's head, and its events' fields to read next."""
        lines = self.archive.lines(name)
        first = next(lines, None)
        if first is None:
            raise refused(f"{name} is empty: its first line must be the session.")
        try:
            head = session_head(first[1])
        except BadRecord as exc:
            raise refused(f"{name} line 1: {exc}.") from None
        return head, self.events(name, lines)

    def events(
        self, name: str, lines: Iterator[tuple[int, dict[str, Any]]]
    ) -> Iterator[dict[str, Any]]:
        for number, record in lines:
            try:
                yield event_fields(record)
            except BadRecord as exc:
                raise refused(f"{name} line {number}: {exc}.") from None
        self.progress(1)

    # Checking: every record read and checked, nothing written

    def validate(self) -> None:
        agents = {agent["name"] for agent in self.agent_list()}
        for entry in self.memory_files():
            if entry.agent not in agents:
                raise refused(f"{entry.member}: its agent is not in {layout.AGENTS}.")
            data = self.archive.read(entry.member, layout.MAX_MEMBER_BYTES)
            if reason := skip_reason_for(data):
                raise refused(f"{entry.member} cannot be a memory file: {reason}.")
            self.progress(1)
        active: set[str] = set()
        for name in self.session_members():
            head, events = self.session(name)
            if head.key.agent not in agents:
                raise refused(f"{name}: its agent {head.key.agent!r} is not in {layout.AGENTS}.")
            if head.status == Session.Status.ACTIVE:
                if str(head.key) in active:
                    raise refused(f"{name}: a second active session of {head.key}.")
                active.add(str(head.key))
            for _ in events:
                pass
        for name, check in self.record_files():
            for _ in self.records(name, check):
                pass

    def record_files(self) -> list[tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]]:
        return [
            (layout.FACTS, fact_fields),
            (layout.MACROS, macro_fields),
            (layout.TASKS, task_fields),
            (layout.RULES, rule_fields),
        ]

    # Writing, in the caller's transaction

    def write(self) -> None:
        for fields in self.agent_list():
            self.report.saw("agents")
            agent, created = Agent.objects.get_or_create(
                owner=self.owner,
                name=fields["name"],
                defaults={"system_prompt": fields["system_prompt"]},
            )
            self.agents[agent.name] = agent
            if created:
                self.report.added("agents")
            else:
                self.report.skip("agents", "you have an agent of that name: kept yours")
        self.write_tasks()
        self.write_sessions()
        self.write_facts()
        self.write_macros()
        self.write_rules()

    def agent(self, name: str) -> Agent:
        if name not in self.agents:
            self.agents[name], _ = Agent.objects.get_or_create(owner=self.owner, name=name)
        return self.agents[name]

    def write_tasks(self) -> None:
        now = timezone.now()
        names = set(ScheduledTask.objects.owned_by(self.owner).values_list("name", flat=True))
        for fields in self.records(layout.TASKS, task_fields):
            self.report.saw("tasks")
            name = fields["name"]
            if name in names:
                name = f"{name[: MAX_NAME_CHARS - 11]} (imported)"
            names.add(name)
            paused, following = fields["is_paused"], fields["next_run_at"]
            if following <= now:
                if fields["is_oneshot"]:
                    paused = True  # its one time has passed
                else:
                    following = next_run(fields["cron_expr"], now, fields["time_zone"])
            if fields["source"] == ScheduledTask.Source.CONFIG:
                self.report.note(
                    f"Task {name!r} came from config.toml: imported as a task you manage here."
                )
            if fields["is_trusted"]:
                # Trust is granted by a person with the permission, never by a file.
                self.report.note(f"Task {name!r} was trusted: imported untrusted.")
            task = ScheduledTask(
                owner=self.owner,
                name=name,
                agent=self.agent(fields["agent"]) if fields["agent"] else None,
                cron_expr=fields["cron_expr"],
                original_schedule=fields["original_schedule"],
                prompt=fields["prompt"],
                source=ScheduledTask.Source.TOOL,
                time_zone=fields["time_zone"],
                is_oneshot=fields["is_oneshot"],
                is_paused=paused,
                is_trusted=False,
                next_run_at=following,
                last_run_at=fields["last_run_at"],
            )
            task.save_by(self.actor)
            self.task_ids[fields["old_id"]] = str(task.pk)
            self.report.added("tasks")

    def new_key(self, key: SessionKey, taken: set[str]) -> SessionKey:
        """The key the session gets here: a task's chat follows its task's new id;
        a chat whose key the user has already gets a chat name of its own."""
        if key.is_scheduled:
            return SessionKey.for_task(self.task_ids.get(key.chat, key.chat), agent=key.agent)
        if str(key) not in taken:
            return key
        chat = f"{key.chat[:50]}-imported-{uuid.uuid4().hex[:4]}"
        return SessionKey(key.agent, key.channel, chat if is_part(chat) else uuid.uuid4().hex)

    def write_sessions(self) -> None:
        taken = set(Session.objects.owned_by(self.owner).values_list("key", flat=True))
        renamed: dict[str, SessionKey] = {}
        new_ids: dict[str, Session] = {}
        links: list[tuple[Session, str]] = []
        for name in self.session_members():
            head, events = self.session(name)
            self.report.saw("sessions")
            if str(head.key) not in renamed:
                renamed[str(head.key)] = self.new_key(head.key, taken)
            key = renamed[str(head.key)]
            agent = self.agent(head.key.agent)
            session = Session.objects.create(
                owner=self.owner,
                agent=agent,
                key=str(key),
                channel=key.channel,
                chat=key.chat,
                title=head.title,
                status=head.status,
                compaction_count=head.compaction_count,
                input_tokens=head.usage.input,
                output_tokens=head.usage.output,
                cache_read_tokens=head.usage.cache_read,
                cache_write_tokens=head.usage.cache_write,
            )
            new_ids[head.old_id] = session
            if head.continues_from:
                links.append((session, head.continues_from))
            batch: list[Event] = []
            for fields in events:
                old_id, condensed = fields.pop("old_id"), fields.pop("condensed")
                event = draft(self.owner, str(session.pk), agent=agent.name, **fields)
                if old_id is not None:
                    self.imported_events[old_id] = event  # for facts and summaries from it
                if event.event_type in (EventType.SUMMARY, EventType.COMPACTION):
                    self.condensing.append((event, condensed))
                batch.append(event)
                if len(batch) >= BATCH:
                    self.write_events(batch)
                    batch = []
            self.write_events(batch)
            Session.objects.filter(pk=session.pk).update(
                created_at=head.created_at, last_activity_at=head.last_activity_at
            )
            self.report.added("sessions")
        for session, previous in links:
            if previous in new_ids:
                Session.objects.filter(pk=session.pk).update(continues_from=new_ids[previous])
        self.sessions = new_ids
        self.link_summaries()
        if self.raised:
            self.report.note(
                f"{self.raised} event(s) came pinned or above their kind's importance: "
                "imported at the usual importance (pin again the ones you want)."
            )

    def link_summaries(self) -> None:
        """Each imported summary (and compaction) linked to the imported events it
        condensed, its data's ids made this instance's, and the events a summary
        condensed marked consolidated: consolidation does not summarise them again,
        and deleting one deletes the summary (memory.forgetting), as for native ones."""
        links = []
        now = timezone.now()
        for summary, carried in self.condensing:
            sources = carried if carried is not None else self.sources_by_range(summary)
            new = [self.imported_events[old] for old in sources if old in self.imported_events]
            links += [
                Event.condensed.through(from_event_id=summary.pk, to_event_id=event.pk)
                for event in new
            ]
            Event.objects.filter(pk=summary.pk).update(data=self.remapped(summary.data))
            if carried is None and summary.event_type == EventType.SUMMARY:
                # An older archive: what its summary condensed was consolidated.
                Event.objects.filter(
                    pk__in=[event.pk for event in new], consolidated_at__isnull=True
                ).update(consolidated_at=now)
        Event.condensed.through.objects.bulk_create(links, batch_size=BATCH)

    def sources_by_range(self, summary: Event) -> list[int]:
        """A summary of an archive that carries no sources: its session's turns between
        its first and last event (consolidation's own range, memory.forgetting)."""
        data = summary.data if isinstance(summary.data, dict) else {}
        first, last = data.get("first_event_id"), data.get("last_event_id")
        if summary.event_type != EventType.SUMMARY:
            return []
        if not isinstance(first, int) or not isinstance(last, int):
            return []
        return [
            old
            for old, event in self.imported_events.items()
            if first <= old <= last
            and event.session_id == summary.session_id
            and event.event_type in EventType.TURNS
        ]

    def remapped(self, data: Any) -> Any:
        """A summary's data with the archive's event and session ids made the imported
        ones' (or left out when they are not in the archive): never another row's id."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for key in EVENT_ID_KEYS:
            if key in data:
                event = self.imported_events.get(data[key]) if isinstance(data[key], int) else None
                if event is None:
                    del data[key]
                else:
                    data[key] = event.pk
        if isinstance(data.get("carried_over"), list):
            data["carried_over"] = [
                self.imported_events[old].pk
                for old in data["carried_over"]
                if isinstance(old, int) and old in self.imported_events
            ]
        if "continues_from" in data:
            session = self.sessions.get(str(data["continues_from"]))
            if session is None:
                del data["continues_from"]
            else:
                data["continues_from"] = str(session.pk)
        return data

    def write_events(self, batch: list[Event]) -> None:
        self.raised += record_imported(batch, ImportJob.Kind.NEOTASK)
        self.report.saw("events", len(batch))
        self.report.added("events", len(batch))

    def write_facts(self) -> None:
        for fields in self.records(layout.FACTS, fact_fields):
            self.report.saw("facts")
            stamps = {name: fields.pop(name) for name in ("created_at", "updated_at")}
            origin = self.fact_origin(fields.pop("origin"), fields.pop("origin_event_id"))
            existing = Fact.objects.owned_by(self.owner).filter(
                category=fields["category"], key=fields["key"]
            )
            if existing.filter(value=fields["value"]).exists():
                self.report.skip("facts", "already there")
                continue
            if existing.exists():
                self.report.skip("facts", "you have another value for it: kept yours")
                continue
            fact, _ = Fact.objects.remember(
                self.owner,
                fields["category"],
                fields["key"],
                fields["value"],
                actor=self.actor,
                source=fields["source"],
                **origin,
            )
            Fact.objects.filter(pk=fact.pk).update(
                **{name: value for name, value in stamps.items() if value is not None}
            )
            self.report.added("facts")

    def fact_origin(self, origin: str, event_id: int | None) -> dict[str, Any]:
        """A fact keeps where its value came from when that event came with it;
        otherwise it came from this import."""
        event = self.imported_events.get(event_id) if event_id is not None else None
        if origin and event is not None and event.pk is not None:
            return {
                "origin": origin,
                "origin_event_id": event.pk,
                "origin_session_id": event.session_id,
            }
        return {"origin": Fact.Origin.IMPORT, "origin_label": self.label}

    def write_macros(self) -> None:
        for fields in self.records(layout.MACROS, macro_fields):
            self.report.saw("macros")
            pattern = fields["trigger_args_pattern"]
            same_pattern = (
                Q(trigger_args_pattern=pattern)
                if pattern
                else Q(trigger_args_pattern__isnull=True) | Q(trigger_args_pattern="")
            )
            exists = (
                Macro.objects.owned_by(self.owner)
                .filter(same_pattern, trigger_tool=fields["trigger_tool"])
                .filter(next_tool=fields["next_tool"])
                .exists()
            )
            if exists:
                self.report.skip("macros", "already there")
                continue
            Macro.objects.create(owner=self.owner, **fields)
            self.report.added("macros")

    def write_rules(self) -> None:
        switched_off = 0
        for fields in self.records(layout.RULES, rule_fields):
            self.report.saw("rules")
            prefix = fields["prefix"]
            if TerminalAllowedPrefix.objects.filter(owner=self.owner, prefix=prefix).exists():
                self.report.skip("rules", "already there")
                continue
            # Off until their owner, holding the terminal permission, switches them on.
            TerminalAllowedPrefix(owner=self.owner, prefix=prefix, active=False).save_by(self.actor)
            self.report.added("rules")
            switched_off += 1
        if switched_off:
            self.report.note(
                f"{switched_off} terminal rule(s) imported switched off: review them on the "
                "terminal approvals page and switch on the ones you want."
            )

    def remember_archive(self) -> None:
        """First in the transaction: a second import of the same archive waits for
        this one's commit on the unique (owner, digest), then fails."""
        ImportedArchive.objects.create(
            owner=self.owner,
            digest=self.archive.digest,
            label=self.label[:255],
            exported_at=str(self.archive.manifest.get("exported_at", ""))[:64],
        )

    def skip_rows(self, before: ImportedArchive) -> None:
        """An archive imported before: its rows are there already (its memory files
        may not be, if that import stopped after its commit)."""
        when = timezone.localtime(before.imported_at)
        self.report.note(
            f"This archive was already imported on {when:%Y-%m-%d %H:%M %Z}: its rows "
            "were not added again; only its memory files that were missing were written."
        )

    # After the commit

    def count_memory_files(self) -> None:
        """What a dry run says of the memory files: all would be written."""
        entries = self.memory_files()
        self.report.saw("memory files", len(entries))
        self.report.added("memory files", len(entries))

    def write_memory_files(self) -> None:
        agents = set()
        for entry in self.memory_files():
            self.report.saw("memory files")
            data = self.archive.read(entry.member, layout.MAX_MEMBER_BYTES)
            self.progress(1)
            workspace = workspace_dir(self.owner.pk, entry.agent)
            target = place_for(workspace, entry.path, data)
            if not target:
                reason = "already there" if target is None else "other versions are there"
                self.report.skip("memory files", reason)
                continue
            if target != entry.path:
                self.report.note(
                    f"{entry.path}: the workspace has another one; copied to {target}."
                )
            text = data.decode("utf-8")
            try:
                write_memory_file(workspace, target, text)
            except MemoryPathError as exc:
                self.report.skip("memory files", "could not be written")
                self.report.note(f"{entry.agent}/{entry.path} not written: {exc}")
                continue
            # A new file: place_for never picks one that is there.
            record_file_change(self.owner, entry.agent, target, self.actor, None, text)
            agents.add(entry.agent)
            self.report.added("memory files")
        for agent in sorted(agents):
            index_workspace(self.owner, agent)


def run(
    path: str | Path, owner: Owner, agent_name: str, report: ImportReport, progress: Progress
) -> None:
    """The archive's own agents are used: `agent_name` is not (an archive holds several).
    An archive whose rows were imported for `owner` before adds none (ImportedArchive);
    its memory files not there yet are written."""
    check_agent_name(agent_name)
    with Archive(Path(path)) as archive:
        archive.check()
        label = f"Neotask export {Path(path).name}"  # an upload is stored under its job's id
        work = ArchiveImport(archive, owner, report, progress, label=label)
        before = imported_before(owner, archive.digest)
        if before is None:
            work.validate()
            try:
                with transaction.atomic():
                    work.remember_archive()
                    work.write()
                    if report.dry_run:
                        transaction.set_rollback(True)
            except IntegrityError:  # the same archive, imported meanwhile by another job
                before = imported_before(owner, archive.digest)
                if before is None:
                    raise
        if before is not None and report.dry_run:
            raise ImportRefused(already_imported(before))
        if before is not None:
            work.skip_rows(before)
        if report.dry_run:
            work.count_memory_files()
        else:
            work.write_memory_files()
        if before is not None and not sum(report.imported.values()):
            raise ImportRefused(already_imported(before))


def imported_before(owner: Owner, digest: str) -> ImportedArchive | None:
    return ImportedArchive.objects.owned_by(owner).filter(digest=digest).first()


def already_imported(before: ImportedArchive) -> str:
    when = timezone.localtime(before.imported_at)
    return f"This archive was already imported on {when:%Y-%m-%d %H:%M %Z}: nothing added."


def total(path: str | Path) -> int:
    """Each data member is read twice: checked, then written."""
    return 2 * member_count(Path(path))


import_archive = Importer(run=run, total=total, unit="member", label="Neotask export")
