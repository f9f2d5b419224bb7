"""Importing an export archive for a user: checked whole first (the archive, then
every record), then written in one transaction with new ids; memory files are
written only after it commits. No trust is carried over: tasks arrive untrusted,
terminal rules switched off."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from agent.models import TerminalAllowedPrefix
from core.history import Actor
from core.ownership import Owner
from core.progress import Progress
from importers.archive import files, layout
from importers.archive.reading import Archive, member_count, refused
from importers.archive.records import (
    AgentRecord,
    BadRecord,
    EventRecord,
    FactRecord,
    MacroRecord,
    Record,
    RuleRecord,
    SessionRecord,
    TaskRecord,
)
from importers.archive.summaries import BATCH, link_summaries
from importers.importer import Importer
from importers.models import ImportedArchive, ImportJob
from importers.report import ImportRefused, ImportReport
from memory.models import Event, EventType, Fact, Macro
from memory.recording import draft, record_imported
from memory.workspace import check_agent_name
from scheduler.models import ScheduledTask
from scheduler.planning import MAX_NAME_CHARS
from scheduler.schedule import next_run
from sessions_app.keys import SessionKey, is_part
from sessions_app.models import Agent, Session

R = TypeVar("R", bound=Record)


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

    def records(self, name: str, kind: type[R]) -> Iterator[R]:
        if name not in self.archive.members:
            return
        for number, record in self.archive.lines(name):
            try:
                yield kind.check(record)
            except BadRecord as exc:
                raise refused(f"{name} line {number}: {exc}.") from None
        self.progress(1)

    def agent_list(self) -> list[AgentRecord]:
        if layout.AGENTS not in self.archive.members:
            return []
        listed = self.archive.json(layout.AGENTS)
        self.progress(1)
        if not isinstance(listed, list):
            raise refused(f"{layout.AGENTS} is not a list of agents.")
        try:
            return [AgentRecord.check(record) for record in listed]
        except BadRecord as exc:
            raise refused(f"{layout.AGENTS}: {exc}.") from None

    def session_members(self) -> list[str]:
        return [
            name
            for name in self.archive.members
            if name.startswith(layout.SESSIONS_DIR) and name.endswith(".jsonl")
        ]

    def session(self, name: str) -> tuple[SessionRecord, Iterator[dict[str, Any]]]:
        """The session's head, and its events' fields to read next."""
        lines = self.archive.lines(name)
        first = next(lines, None)
        if first is None:
            raise refused(f"{name} is empty: its first line must be the session.")
        try:
            head = SessionRecord.check(first[1])
        except BadRecord as exc:
            raise refused(f"{name} line 1: {exc}.") from None
        return head, self.events(name, lines)

    def events(
        self, name: str, lines: Iterator[tuple[int, dict[str, Any]]]
    ) -> Iterator[dict[str, Any]]:
        for number, record in lines:
            try:
                yield EventRecord.check(record).fields(record)
            except BadRecord as exc:
                raise refused(f"{name} line {number}: {exc}.") from None
        self.progress(1)

    # Checking: every record read and checked, nothing written

    def validate(self) -> None:
        agents = {agent.name for agent in self.agent_list()}
        files.check_memory_files(self.archive, agents, self.progress)
        active: set[str] = set()
        for name in self.session_members():
            head, events = self.session(name)
            key = head.session_key
            if key.agent not in agents:
                raise refused(f"{name}: its agent {key.agent!r} is not in {layout.AGENTS}.")
            if head.status == Session.Status.ACTIVE:
                if str(key) in active:
                    raise refused(f"{name}: a second active session of {key}.")
                active.add(str(key))
            for _ in events:
                pass
        for name, kind in self.record_files():
            for _ in self.records(name, kind):
                pass

    def record_files(self) -> list[tuple[str, type[Record]]]:
        return [
            (layout.FACTS, FactRecord),
            (layout.MACROS, MacroRecord),
            (layout.TASKS, TaskRecord),
            (layout.RULES, RuleRecord),
        ]

    # Writing, in the caller's transaction

    def write(self) -> None:
        for record in self.agent_list():
            self.report.saw("agents")
            agent, created = Agent.objects.get_or_create(
                owner=self.owner,
                name=record.name,
                defaults={"system_prompt": record.system_prompt},
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
        for line in self.records(layout.TASKS, TaskRecord):
            self.report.saw("tasks")
            name = line.name
            if name in names:
                name = f"{name[: MAX_NAME_CHARS - 11]} (imported)"
            names.add(name)
            paused, following = line.is_paused, line.next_run_at
            if following <= now:
                if line.is_oneshot:
                    paused = True  # its one time has passed
                else:
                    following = next_run(line.cron_expr, now, line.time_zone)
            if line.source == ScheduledTask.Source.CONFIG:
                self.report.note(
                    f"Task {name!r} came from config.toml: imported as a task you manage here."
                )
            if line.is_trusted:
                # Trust is granted by a person with the permission, never by a file.
                self.report.note(f"Task {name!r} was trusted: imported untrusted.")
            task = ScheduledTask(
                owner=self.owner,
                name=name,
                agent=self.agent(line.agent) if line.agent else None,
                cron_expr=line.cron_expr,
                original_schedule=line.original_schedule,
                prompt=line.prompt,
                source=ScheduledTask.Source.TOOL,
                time_zone=line.time_zone,
                is_oneshot=line.is_oneshot,
                is_paused=paused,
                is_trusted=False,
                next_run_at=following,
                last_run_at=line.last_run_at,
            )
            task.save_by(self.actor)
            self.task_ids[line.id] = str(task.pk)
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
            if str(head.session_key) not in renamed:
                renamed[str(head.session_key)] = self.new_key(head.session_key, taken)
            key = renamed[str(head.session_key)]
            agent = self.agent(head.session_key.agent)
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
            new_ids[head.id] = session
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
        link_summaries(self.condensing, self.imported_events, self.sessions)
        if self.raised:
            self.report.note(
                f"{self.raised} event(s) came pinned or above their kind's importance: "
                "imported at the usual importance (pin again the ones you want)."
            )

    def write_events(self, batch: list[Event]) -> None:
        self.raised += record_imported(batch, ImportJob.Kind.NEOTASK)
        self.report.saw("events", len(batch))
        self.report.added("events", len(batch))

    def write_facts(self) -> None:
        for line in self.records(layout.FACTS, FactRecord):
            self.report.saw("facts")
            stamps = {"created_at": line.created_at, "updated_at": line.updated_at}
            origin = self.fact_origin(line.origin, line.origin_event_id)
            existing = Fact.objects.owned_by(self.owner).filter(
                category=line.category, key=line.key
            )
            if existing.filter(value=line.value).exists():
                self.report.skip("facts", "already there")
                continue
            if existing.exists():
                self.report.skip("facts", "you have another value for it: kept yours")
                continue
            fact, _ = Fact.objects.remember(
                self.owner,
                line.category,
                line.key,
                line.value,
                actor=self.actor,
                source=line.source,
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
        for macro in self.records(layout.MACROS, MacroRecord):
            fields = macro.fields()
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
        for rule in self.records(layout.RULES, RuleRecord):
            self.report.saw("rules")
            prefix = rule.prefix
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
            files.count_memory_files(archive, report)
        else:
            files.write_memory_files(archive, owner, report, progress, work.actor)
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
