"""Forgetting on demand: every deletion of memory goes through this module —
events (by id, by session), facts and memory files — whoever asks (the chat
page, the API, the admin, session cleanup), so that a deletion is complete
wherever it starts and the audit trail has one place to hook in.

Deleting events removes:
- the rows, and with them their full-text entries (the database keeps those:
  FTS5 triggers on SQLite, a stored column's index on PostgreSQL);
- their vectors: in PostgreSQL (pgvector) with the rows, at once; on SQLite in
  every process: each is logged in `ForgottenEvent`, which every in-process
  index reads at its next sync (memory.vector_index);
- the session's working memory here (other processes see a smaller count in
  their version check and rebuild);
- what was derived from them (`mark_derived`), and the search context of the
  turn that followed a deleted one (`rekey_followers`).

Forgetting a fact erases its values from the history, and redacts the tool
call that set it and that call's result (`redact_origin`): the events stay, so
the conversation keeps its shape, but their text, full-text entry and vector go.

Memory files are deleted on disk without following links (workspace_fs) and
then re-indexed, which deletes their chunks; the chunk indexes drop vectors
whose rows are gone at their next sync (LanceDB's table is synced, compacted
and its old versions removed at once, memory.storage_purge).

Other apps keep copies of what was said; the `forgotten` signal, sent in the
deleting transaction, lets each drop its own: sessions_app retitles a chat whose
first message went and clears a crashed turn's saved partial answer; importers
deletes the owner's export archives made before (they would still hold it).

After the commit, the storage's leftover copies of the deleted text are purged
(memory.storage_purge.after_commit: SQLite's full-text index and WAL, LanceDB's
old versions).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q, QuerySet
from django.dispatch import Signal
from django.utils import timezone

from core.history import Actor, record_change
from core.models import Change
from core.ownership import Owner
from memory.files import indexing, paths
from memory.files.history import record_file_change
from memory.models import Event, EventType, Fact, ForgottenEvent, MemoryFile
from memory.storage_purge import after_commit
from memory.vector_index import in_database
from memory.working import working_memory
from memory.workspace import workspace_dir

BATCH = 500  # ids per `IN (...)`: far below SQLite's limit on parameters
# How long the deletion log is kept. An index that has not synced for longer
# keeps such a vector in memory, but never returns it: its hits are checked
# against the table (NumpyIndex.deleted).
FORGOTTEN_KEPT = timedelta(days=7)


# Sent in the deleting transaction with `owner` and `events` (those deleted,
# their `data` loaded; none when only facts or files went).
forgotten = Signal()
REDACTED = "[forgotten]"


class Busy(Exception):
    """What would be deleted is in use right now (a chat that is answering): what
    the turn writes next would outlive the deletion. Nothing was deleted."""


# (owner, events) → None, or Busy: registered by the apps that know what is in use
# (sessions_app: a chat answering), asked before events go from the forget dialog.
BusyCheck = Callable[[Owner, list[Event]], None]
busy_checks: list[BusyCheck] = []


def check_not_busy(owner: Owner, events: list[Event]) -> None:
    for check in busy_checks:
        check(owner, events)


class NothingToForget(LookupError):
    """The ids named nothing of the owner's (unknown, someone else's, or deleted already)."""


@dataclass
class Forgotten:
    """What one deletion removed, for the page, the API and the admin to report."""

    events: int = 0
    # Derived from deleted events (mark_derived):
    summaries: int = 0  # consolidation summaries deleted; their other events summarised again
    compactions: int = 0  # compaction summaries deleted (not rebuilt)
    facts: int = 0  # facts deleted: asked for, or proposed by a deleted summary
    recalls: int = 0  # recall events whose recalled items were removed
    files: int = 0
    lines: int = 0  # lines removed from memory files

    def as_dict(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "summaries": self.summaries,
            "compactions": self.compactions,
            "facts": self.facts,
            "recalls": self.recalls,
            "files": self.files,
        }

    def describe(self) -> str:
        parts = [
            f"{count} {one if count == 1 else many}"
            for count, one, many in (
                (self.events, "message or event", "messages and events"),
                (self.summaries, "summary", "summaries"),
                (self.compactions, "compaction summary", "compaction summaries"),
                (self.facts, "fact", "facts"),
                (self.files, "memory file", "memory files"),
                (self.lines, "memory file line", "memory file lines"),
            )
            if count
        ]
        return "Deleted " + (", ".join(parts) if parts else "nothing") + "."


def forget_events(owner: Owner, event_ids: Iterable[int], actor: Actor) -> Forgotten:
    """Delete these events of `owner` and what was derived from them. Ids of
    other owners' events are ignored; NothingToForget if none is the owner's."""
    ids = sorted(set(event_ids))
    with transaction.atomic():
        events = owned_events(owner, Event.objects.filter(pk__in=ids)) if ids else []
        if not events:
            raise NothingToForget("No such message: it may have been deleted already.")
        report = erase(owner, events, actor)
        rekey_followers(owner, events)
    return report


def forget_sessions(owner: Owner, session_ids: Iterable[str], actor: Actor) -> Forgotten:
    """Delete every event of these sessions of `owner` (a chat's, a cleaned-up
    session's), their summaries and compactions included."""
    sessions = sorted(set(session_ids))
    with transaction.atomic():
        events = owned_events(owner, Event.objects.filter(session_id__in=sessions))
        return erase(owner, events, actor)


def owned_events(owner: Owner, events: QuerySet[Event]) -> list[Event]:
    return list(events.filter(owner=owner).only("id", "agent", "session_id", "event_type", "data"))


def erase(owner: Owner, events: list[Event], actor: Actor) -> Forgotten:
    """Delete `events` (all `owner`'s) and what was derived from them; in the
    caller's transaction."""
    report = Forgotten()
    if not events:  # e.g. a session whose events a chat's deletion took first
        return report
    derived = mark_derived(owner, events, report, actor)
    doomed = {event.pk: event for event in [*events, *derived]}
    if not in_database():  # in PostgreSQL a vector goes with its row
        ForgottenEvent.objects.bulk_create(
            [ForgottenEvent(owner=owner, agent=e.agent, event_id=e.pk) for e in doomed.values()],
            batch_size=BATCH,
        )
    ids = sorted(doomed)
    for start in range(0, len(ids), BATCH):
        Event.objects.filter(owner=owner, pk__in=ids[start : start + BATCH]).delete()
    report.events = len(events)
    sessions = {event.session_id for event in doomed.values()}
    transaction.on_commit(lambda: working_memory.forget(owner.pk, sessions))
    announce(owner, list(doomed.values()))
    return report


def announce(owner: Owner, events: list[Event], agents: Iterable[str] = ()) -> None:
    """Let other apps drop their copies (`forgotten`), and clean up after the commit."""
    forgotten.send(sender=Forgotten, owner=owner, events=events)
    indexed = any(event.event_type in EventType.RECALLABLE for event in events)
    after_commit(owner, agents, fulltext=indexed)


def rekey_followers(owner: Owner, deleted: list[Event]) -> None:
    """A turn is also found by the words of the turn before it (its search
    context, memory.search_keys): the turn that followed a deleted one is keyed again,
    from the turn before it now. Its vector is of its own words, and stays."""
    followers: dict[int, Event] = {}
    for event in deleted:
        if event.event_type not in EventType.TURNS:
            continue
        follower = (
            Event.objects.filter(
                owner=owner,
                session_id=event.session_id,
                pk__gt=event.pk,
                event_type__in=EventType.RECALLABLE,
            )
            .order_by("pk")
            .first()
        )
        if follower is not None:
            followers[follower.pk] = follower
    for follower in followers.values():
        follower.set_keys(follower.previous_turn_text())
        follower.save(update_fields=["speaker", "search_key", "search_context", "key_version"])


def mark_derived(owner: Owner, events: list[Event], report: Forgotten, actor: Actor) -> list[Event]:
    """Deal with what was made from `events` before they are deleted; returns the
    derived events that must go too:

    - a consolidation summary that condensed a deleted event (Event.condensed,
      or its id range for summaries older than that link) is deleted, and the
      events it condensed that stay are released (consolidated_at cleared): the
      next consolidation rebuilds a summary without the deleted ones;
    - a compaction summary of a deleted event (what it condensed, or the
      messages it carried over) is deleted, not rebuilt (that needs the model);
      its session keeps the messages it carried over;
    - facts whose value came from a deleted event or from a deleted summary
      (Fact.origin_event) are forgotten too;
    - auto-recall's record of a session no longer lists a deleted event.
    """
    ids = {event.pk for event in events}
    sessions = {event.session_id for event in events}
    owned = Event.objects.filter(owner=owner)
    derived: list[Event] = []

    summaries = owned.filter(event_type=EventType.SUMMARY).filter(
        Q(condensed__in=ids) | Q(session_id__in=sessions)
    )
    for summary in owned_events(owner, summaries.distinct()):
        if summary.pk in ids or not condensed(summary, ids):
            continue
        derived.append(summary)
        owned.filter(summaries=summary).exclude(pk__in=ids).update(consolidated_at=None)
        if isinstance(summary.data, dict) and isinstance(summary.data.get("first_event_id"), int):
            first, last = summary.data["first_event_id"], summary.data.get("last_event_id")
            owned.filter(session_id=summary.session_id, pk__gte=first, pk__lte=last).exclude(
                pk__in=ids
            ).update(consolidated_at=None)
    report.summaries = len(derived)
    ids.update(event.pk for event in derived)

    compactions = owned.filter(event_type=EventType.COMPACTION).filter(
        Q(condensed__in=ids) | Q(data__continues_from__in=sessions)
    )
    for compaction in owned_events(owner, compactions.distinct()):
        carried = compaction.data.get("carried_over") or []
        if compaction.pk not in ids and (condensed(compaction, ids) or ids & set(carried)):
            derived.append(compaction)
            report.compactions += 1
    ids.update(event.pk for event in derived)

    from_them = Fact.objects.filter(owner=owner, origin_event__in=ids)
    report.facts += forget_facts(owner, from_them, actor).facts
    report.recalls = scrub_recalls(owner, lambda item: item.get("event_id") in ids)
    return derived


def condensed(summary: Event, ids: set[int]) -> bool:
    """Whether a summary condensed one of `ids`: linked (Event.condensed), or in
    its id range (first_event_id..last_event_id, summaries older than the link)."""
    if summary.condensed.filter(pk__in=ids).exists():
        return True
    data = summary.data
    if not isinstance(data, dict):
        return False
    first, last = data.get("first_event_id"), data.get("last_event_id")
    if not isinstance(first, int) or not isinstance(last, int):
        return False
    return any(first <= event_id <= last for event_id in ids)


def scrub_recalls(owner: Owner, quotes: Callable[[dict[str, Any]], bool]) -> int:
    """Remove the recalled items that `quotes` picks from the owner's recall
    events (they copy what they recalled): how many events changed."""
    recalls = Event.objects.filter(owner=owner, event_type=EventType.RECALL)
    changed = 0
    for recall in recalls.only("id", "data"):
        items = recall.data.get("items", []) if isinstance(recall.data, dict) else []
        kept = [item for item in items if not (isinstance(item, dict) and quotes(item))]
        if len(kept) != len(items):
            recalls.filter(pk=recall.pk).update(data={**recall.data, "items": kept})
            changed += 1
    return changed


def forget_facts(owner: Owner, facts: QuerySet[Fact], actor: Actor) -> Forgotten:
    """Delete these facts of `owner`, their values erased from the history too,
    and the tool call that set each redacted (`redact_origin`)."""
    with transaction.atomic():
        doomed = list(facts.filter(owner=owner).select_related("origin_event"))
        for fact in doomed:
            fact.forget(actor)
            if fact.origin_event is not None:
                redact_origin(owner, fact.origin_event)
        if doomed:
            announce(owner, [])
    return Forgotten(facts=len(doomed))


def redact_origin(owner: Owner, call: Event) -> None:
    """Redact the agent's tool call that set a fact, and its result: both say the
    value. They stay, marked redacted, so that the turn keeps its shape (a call
    is answered by its result), without text, full-text entry or vector."""
    if call.event_type != EventType.TOOL_CALL or not isinstance(call.data, dict):
        return
    owned = Event.objects.filter(owner=owner, session_id=call.session_id)
    results = owned.filter(event_type=EventType.TOOL_RESULT, data__tool_call_id=call.data.get("id"))
    if not isinstance(call.data.get("id"), str):
        results = results.none()
    redacted = [(call.pk, {k: call.data[k] for k in ("id", "name") if k in call.data})]
    for result in results.filter(pk__gt=call.pk).only("id", "data"):
        kept = {k: result.data[k] for k in ("tool_call_id", "name") if k in result.data}
        redacted.append((result.pk, {**kept, "content": REDACTED}))
    # The answer that said what the call did ("Saved: …", agent.tools.confirmation).
    answers = owned.filter(event_type=EventType.ASSISTANT_RESPONSE, data__confirmation=True)
    for said in answers.filter(pk__gt=call.pk).only("id", "data"):
        if call.pk in said.data.get("confirms", []):
            redacted.append((said.pk, {**said.data, "content": REDACTED}))
    for pk, data in redacted:
        if "arguments" not in data and pk == call.pk:
            data["arguments"] = {}
        owned.filter(pk=pk).update(
            data={**data, "redacted": True},
            text="",
            search_key="",
            search_context="",
            embedding=None,
            embedded_at=None,
            embedding_error=None,
        )
    if not in_database():  # in-process indexes drop the vector at their next sync
        ForgottenEvent.objects.bulk_create(
            [ForgottenEvent(owner=owner, agent=call.agent, event_id=pk) for pk, _ in redacted]
        )
    # This process's recent history of the session is read again. Another
    # process's cache sees the same count and newest id, and keeps the old text
    # until the session changes or leaves its cache.
    session = call.session_id
    transaction.on_commit(lambda: working_memory.forget(owner.pk, {session}))


def forget_memory_file(owner: Owner, agent: str, path: str, actor: Actor) -> Forgotten:
    """Delete a memory file of `owner`'s `agent` on disk (never through a link)
    and its chunks; auto-recall's records no longer quote it. Raises
    paths.MemoryPathError (NotFound included) with a message a user can act on."""
    shown = paths.memory_path(path)
    workspace = workspace_dir(owner.pk, agent, create=False)
    indexed = MemoryFile.objects.filter(owner=owner, agent=agent, path=shown).exists()
    try:
        paths.delete_memory_file(workspace, shown)
    except paths.NotFound:
        if not indexed:
            raise
        # Gone from the disk already (deleted by other means): its index entry,
        # chunks and history still go.
    finally:
        # Whatever happened on disk, the index follows it (a file deleted by
        # other means meanwhile loses its chunks too).
        indexing.index_path(owner, agent, shown)
    quoted, subject = f"{shown}:", f"{agent}:{shown}"
    with transaction.atomic():
        announce(owner, [], agents=[agent])
        Change.objects.forget_values(owner.pk, Change.Subject.MEMORY_FILE, subject)
        record_change(
            owner, actor, Change.Subject.MEMORY_FILE, subject, subject, Change.Action.DELETED
        )
        recalls = scrub_recalls(
            owner,
            lambda item: "event_id" not in item and str(item.get("source", "")).startswith(quoted),
        )
    return Forgotten(files=1, recalls=recalls)


def line_digest(line: str) -> str:
    """Names a line's text, so that a line changed since it was offered is not removed."""
    return hashlib.sha256(line.encode()).hexdigest()[:12]


def forget_memory_lines(
    owner: Owner, agent: str, path: str, lines: dict[int, str], actor: Actor
) -> int:
    """Remove lines of a memory file of `owner`'s `agent`: `lines` maps 1-based
    line numbers to the `line_digest` of the text they had when offered. The file
    is written only if every such line still has that text (paths.FileConflict
    otherwise), then re-indexed (its chunks, and the LanceDB table, as a file
    edit does). Its history's values are erased (they hold the lines), and the
    change is recorded with the text left. Returns how many lines went."""
    shown = paths.memory_path(path)
    workspace = workspace_dir(owner.pk, agent, create=False)
    before, sha = paths.read_memory_file(workspace, shown)
    kept, removed = [], 0
    for number, line in enumerate(before.splitlines(keepends=True), start=1):
        if number in lines:
            if line_digest((line.splitlines() or [""])[0]) != lines[number]:
                raise paths.FileConflict(before, sha)
            removed += 1
        else:
            kept.append(line)
    if removed != len(lines):  # a line past the end: the file is shorter now
        raise paths.FileConflict(before, sha)
    after = "".join(kept)
    paths.save_if_unchanged(workspace, shown, after, sha)
    indexing.index_path(owner, agent, shown)
    subject = f"{agent}:{shown}"
    with transaction.atomic():
        announce(owner, [], agents=[agent])
        Change.objects.forget_values(owner.pk, Change.Subject.MEMORY_FILE, subject)
        record_file_change(owner, agent, shown, actor, before, after, forgotten=True)
        quoted = f"{shown}:"
        scrub_recalls(
            owner,
            lambda item: "event_id" not in item and str(item.get("source", "")).startswith(quoted),
        )
    return removed


def prune_forgotten() -> int:
    """The daily job: drop the deletion log's entries older than FORGOTTEN_KEPT."""
    cutoff = timezone.now() - FORGOTTEN_KEPT
    deleted, _ = ForgottenEvent.objects.filter(forgotten_at__lt=cutoff).delete()
    return deleted
