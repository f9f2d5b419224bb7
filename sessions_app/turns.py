"""One input's run in a chat, and every decision about the chat's sessions it
takes: the one place that decides when a session ends and the next begins.

- A session goes stale at the daily reset hour (local time, default 04:00) or
  after `idle_minutes` without activity, whichever comes first; this is checked
  when the next message arrives, which then runs in a fresh session.
- `/new` and `/reset` start a fresh session at once; the rest of the line, if
  any, is the new session's first message.
- `/compact` summarises the older messages into a fresh session
  (sessions_app.compaction), and so does a turn that leaves the context
  nearly full.
- A retry runs the chat's latest turn again from the same user message (a
  failed or stopped one: Retry; a finished one: Regenerate), and an edit any
  message of the current branch with new text, once it is checked that the
  chat has not moved on.

A rollover keeps all history: the old session is archived (still readable), the
new one continues from it and opens with a notice saying why — never a silent
reset. A message's turn (agent.runtime) is followed by its accounting: the usage
added to the session, the meter read.

The runner (sessions_app.runner) finds the chat's session, calls `run` and
sends what it emits; `run` returns how the input `Ended`.
A message's whole path, end to end: docs/chat-runtime.md#the-turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agent.client_tools import ClientTurn
from agent.frames import Done, Emit, Error, Meter, Notice, SessionChanged
from agent.llm import Endpoint, Usage
from agent.prompt import prompt_tokens
from agent.providers import chat_endpoint
from agent.runtime import Before, TurnRequest, TurnResult, run_turn
from core.ownership import Owner
from memory import recording
from memory.models import Event, EventType
from sessions_app import quotas
from sessions_app.chat import ChatError, find_chat
from sessions_app.compaction import CompactionError, compact
from sessions_app.meter import TokenMeter, meter, next_messages, read_meter, reading
from sessions_app.models import ChatInput, Session


@dataclass
class Ended:
    """How an input's run ended: what the API and the scheduler report, and the
    `done` frame the runner sends once the input is finished."""

    status: str  # completed | error | stopped | max_iterations
    usage: Usage = field(default_factory=Usage)
    answer: str = ""
    error: str = ""
    meter: TokenMeter | None = None

    def done(self) -> Done:
        meter = self.meter.as_dict() if self.meter is not None else None
        return Done(self.usage.as_dict(), self.status, meter)


@dataclass
class Opened:
    """An input's chat, made ready in one trip to the database (`open_input`):
    the session it runs in, and the sessions it moved to on the way."""

    session: Session
    changes: list[SessionChanged] = field(default_factory=list)
    retry_of: int | None = None  # a retry's message, checked
    edited: bool = False  # the retry is an edit: new text for that message
    endpoint: Endpoint | None = None  # the model that answers it (agent.providers)
    before: Before | None = None  # what the session held, read with it


def open_input(owner: Owner, key: str, item: ChatInput) -> Opened:
    """Find the chat and decide where `item` runs: a fresh session for /new and
    /reset, or for a message to a stale one; a retry checked again (has the chat
    moved on?). Raises ChatError or RetryError, having changed nothing."""
    session = find_chat(owner, key, said=True)
    if item.kind == ChatInput.Kind.COMPACT:
        return Opened(session)
    if item.kind == ChatInput.Kind.TOOL_RESULTS:
        # The turn that handed out the calls goes on: no new message, no rollover.
        return Opened(session, endpoint=chat_endpoint(session))
    retry_of, edited = None, False
    if item.kind == ChatInput.Kind.RETRY:
        message, edited = find_retry(session, item.retry_of)
        retry_of = message.pk
    changes = []
    if item.kind == ChatInput.Kind.RESET:
        reason = f"/{item.command}"
        session = rollover(session, reason)
        changes.append(SessionChanged(str(session.pk), reason))
    if not item.text:
        return Opened(session, changes)
    opened = take_message(session, item.text)
    opened.changes[:0] = changes
    opened.retry_of, opened.edited = retry_of, edited
    return opened


def take_message(session: Session, text: str) -> Opened:
    """A message arrives in `session`: in a fresh one if it went stale."""
    fresh, reason = ensure_fresh(session)
    fresh.note_message(text)
    changes = [SessionChanged(str(fresh.pk), reason)] if reason else []
    before = said_before(session) if fresh is session else None
    return Opened(fresh, changes, endpoint=chat_endpoint(fresh), before=before)


def said_before(session: Session) -> Before | None:
    """What `session` held, if it was read with it (`find_chat(said=True)`)."""
    if not hasattr(session, "messaged"):
        return None
    said = {name: getattr(session, name) for name in SAID}
    return Before(
        text=said["said_last"],
        messaged=said["messaged"],
        marker=(said["content_count"], said["content_newest"]),
        facts=(said["facts_count"] or 0, said["facts_changed"]),
    )


# Session.objects.active's annotations
SAID = ("said_last", "messaged", "content_count", "content_newest", "facts_count", "facts_changed")


async def run(opened: Opened, item: ChatInput, emit: Emit) -> Ended:
    """Run `item` in its chat, `opened` by `open_input`."""
    for change in opened.changes:
        await emit(change)
    if item.kind == ChatInput.Kind.COMPACT:
        return await compact_now(opened.session, emit)
    client = ClientTurn.from_json(item.client) if item.client else None
    if not item.text and item.kind != ChatInput.Kind.TOOL_RESULTS:
        return Ended("completed")
    return await respond(
        opened.session,
        item.text,
        emit,
        trusted=item.trusted,
        approval_timeout=item.approval_timeout,
        retry_of=opened.retry_of,
        edited=opened.edited,
        endpoint=opened.endpoint,
        client=client,
        before=opened.before,
    )


async def respond(
    session: Session,
    text: str,
    emit: Emit,
    *,
    trusted: bool = False,
    approval_timeout: float | None = None,
    retry_of: int | None = None,
    edited: bool = False,
    endpoint: Endpoint | None = None,
    client: ClientTurn | None = None,
    before: Before | None = None,
) -> Ended:
    """The agent answers the message `text` in `session`; then the usage is added,
    the meter read, and the session compacted if the context is nearly full.
    Scheduled runs pass `trusted` and a short `approval_timeout`: nobody is
    watching them; an OpenAI-compatible client passes what it sent (`client`);
    `before`, what the session held, if it was read with it."""
    if endpoint is None:
        endpoint = await database_sync_to_async(chat_endpoint)(session)
    request = TurnRequest(
        owner=session.owner,
        session_id=str(session.pk),
        agent_name=session.agent.name,
        agent_prompt=session.agent.system_prompt,
        trusted=trusted,
        approval_timeout=approval_timeout,
        retry_of=retry_of,
        edited=edited,
        endpoint=endpoint,
        client=client,
        before=before,
        # A task's runs are titled with its name (scheduler.due_tasks.cron_session).
        task=(session.title or session.key) if session.is_scheduled else "",
    )
    result = await run_turn(request, text, emit)
    prompt = result.next_prompt or await database_sync_to_async(next_prompt)(session, result)
    counted = await prompt_tokens(prompt, endpoint)
    readings, full = await database_sync_to_async(account)(
        session, result.usage, prompt, counted, endpoint
    )
    if full:
        try:
            done = await compact(session, f"context {readings.share:.0%} full")
        except CompactionError as exc:
            await emit(Error(f"Automatic compaction failed: {exc}."))
        else:
            await emit(SessionChanged(str(done.session.pk), "compacted"))
            readings = await read_meter(done.session)
    return Ended(result.status, result.usage, result.answer, result.error, readings)


def next_prompt(session: Session, result: TurnResult) -> list[dict[str, Any]]:
    """The prompt the meter counts after a turn that did not complete (failed,
    stopped, out of rounds, its calls handed to the client): the turn's own, with
    what it stored since re-read (agent.prompt.TurnPrompt.messages), memory not
    gathered again; built afresh only for a turn stopped before it had one."""
    if result.prompt is not None:
        return result.prompt.messages()
    return next_messages(session)


def account(
    session: Session,
    usage: Usage,
    prompt: list[dict[str, Any]],
    counted: int,
    endpoint: Endpoint,
) -> tuple[TokenMeter, bool]:
    """After a turn, in one trip to the database: its usage added to the session's
    and to its owner's day (quotas), the meter read (the next prompt, `counted`
    tokens), and whether it is full enough to compact."""
    session.add_usage(usage)  # one turn at a time per chat: nobody else adds to it
    quotas.add_tokens(session.owner_id, usage.input + usage.output)
    readings = reading(session, prompt, counted, endpoint)
    return readings, should_compact(readings, session)


async def compact_now(session: Session, emit: Emit) -> Ended:
    """/compact; a failure is reported and changes nothing."""
    await emit(Notice("Compacting: saving facts, then summarising older messages…"))
    try:
        done = await compact(session, "/compact")
    except CompactionError as exc:
        await emit(Error(f"Compaction failed: {exc}. Nothing was changed."))
        return Ended("completed")
    await emit(SessionChanged(str(done.session.pk), "compacted"))
    await emit(Meter((await database_sync_to_async(meter)(done.session)).as_dict()))
    await emit(
        Notice(
            f"Compacted: {done.summarised} messages summarised, {done.carried_over} kept. "
            "The full transcript stays readable under Sessions."
        )
    )
    return Ended("completed")


def should_compact(readings: TokenMeter, session: Session) -> bool:
    options = settings.NEOTASK["sessions"]
    if not options["compaction_enabled"]:
        return False
    if readings.share < options["compaction_threshold"]:
        return False
    count = session.events().filter(event_type__in=EventType.CONTENT).count()
    return count >= options["compaction_min_messages"]


# Rollover: when a session ends and the next begins.


def rollover(session: Session, reason: str) -> Session:
    """Archive `session` and start a fresh one under the same key; the new
    session opens with a visible notice saying why."""
    with transaction.atomic():
        fresh = session.continue_as()
        if fresh is None:
            # Someone else rolled it over a moment ago: use theirs.
            return Session.objects.get(
                owner=session.owner, key=session.key, status=Session.Status.ACTIVE
            )
        recording.record(
            session.owner,
            str(fresh.pk),
            EventType.SESSION_START,
            {
                "content": f"New session started: {reason}.",
                "reason": reason,
                "continues_from": str(session.pk),
            },
        )
    return fresh


def last_daily_reset(now: datetime, hour: int, zone: ZoneInfo) -> datetime:
    """The most recent moment the clock in `zone` showed `hour`:00, at or before `now`.

    On the night the clocks skip that hour (DST), the wall time is read with
    the offset in force before the jump, so the reset happens once, at the jump."""
    local = now.astimezone(zone)
    boundary = datetime.combine(local.date(), time(hour), tzinfo=zone)
    if boundary > now:
        boundary = datetime.combine(local.date() - timedelta(days=1), time(hour), tzinfo=zone)
    return boundary


def stale_reason(session: Session, now: datetime) -> str | None:
    """Why `session` must roll over before taking a message at `now`, or None."""
    options = settings.NEOTASK["sessions"]
    zone = ZoneInfo(settings.NEOTASK["server"]["time_zone"])
    hour = options["daily_reset_hour"]
    due: list[tuple[datetime, str]] = []
    boundary = last_daily_reset(now, hour, zone)
    if session.last_activity_at < boundary:
        due.append((boundary, f"daily reset at {hour:02d}:00"))
    idle = options["idle_minutes"]
    if idle and now - session.last_activity_at >= timedelta(minutes=idle):
        plural = "" if idle == 1 else "s"
        due.append(
            (session.last_activity_at + timedelta(minutes=idle), f"idle for {idle} minute{plural}")
        )
    return min(due)[1] if due else None


def ensure_fresh(session: Session, now: datetime | None = None) -> tuple[Session, str | None]:
    """The session to use for a message arriving now, and the reason if it is new."""
    now = now or timezone.now()
    reason = stale_reason(session, now)
    if reason is None:
        return session, None
    if not session.events().exclude(event_type=EventType.SESSION_START).exists():
        # Nothing said yet: a new session would only add noise.
        Session.objects.filter(pk=session.pk).update(last_activity_at=now)
        session.last_activity_at = now
        return session, None
    return rollover(session, reason), reason


# Retry: the latest turn of a chat runs again from the same user message — a
# failed or stopped one (Retry), or a finished answer (Regenerate). Edit: any
# message of the chat's current branch runs again with new text. Both store the
# user's message again, marked `retry_of` the message it repeats (and `edited`
# for an edit), and the new answer follows it. The old branch stays in the log
# as it was; the model's history leaves out what it holds
# (agent.prompt.without_retried), so it answers as if it had not been said.

NO_SUCH = "There is no such answer to retry in this chat."
NOT_FAILED = "Only an answer, or a turn that failed or was stopped, can be run again."
NOT_LATEST = "Only the chat's latest answer can be retried."
NO_SUCH_MESSAGE = "There is no such message of yours to edit in this chat."
NOT_CURRENT = "That message was replaced already: edit its latest version."


class RetryError(Exception):
    """A retry refused; the message says why."""


def is_retryable(event: Event) -> bool:
    """What ends a turn: its answer, its error, or a note (stopped, too many rounds)."""
    return event.event_type in (EventType.ERROR, EventType.SYSTEM, EventType.ASSISTANT_RESPONSE)


def check_retry(owner: Owner, key: str, event_id: Any, *, edit: bool = False) -> Event:
    """`find_retry` in the chat `key`, as a Retry, Regenerate or (`edit`) an
    Edit button asks for it."""
    try:
        session = find_chat(owner, key)
    except ChatError as exc:
        raise RetryError(str(exc)) from None
    message, edited = find_retry(session, event_id)
    if edited != edit:
        raise RetryError(NO_SUCH_MESSAGE if edit else NOT_FAILED)
    return message


def find_retry(session: Session, event_id: Any) -> tuple[Event, bool]:
    """The user message to run again from event `event_id`, and whether it is an
    edit (`event_id` is the message itself); RetryError unless that message is of
    the session's current branch — for a retry, the turn it names is the latest."""
    events = session.events()
    # type(), not isinstance: JSON's true is a bool, which Python counts as the int 1.
    event = events.filter(pk=event_id).first() if type(event_id) is int else None
    if event is None:
        raise RetryError(NO_SUCH)
    if event.event_type == EventType.USER_MESSAGE:
        if not is_current(session, event):
            raise RetryError(NOT_CURRENT)
        return event, True
    if not is_retryable(event):
        raise RetryError(NOT_FAILED)
    messages = events.filter(event_type=EventType.USER_MESSAGE)
    if messages.filter(pk__gt=event.pk).exists():
        raise RetryError(NOT_LATEST)
    message = messages.filter(pk__lt=event.pk).order_by("-pk").first()
    if message is None:
        raise RetryError(NO_SUCH)
    return message, False


def is_current(session: Session, message: Event) -> bool:
    """Whether `message` is in the branch the model is shown: not replaced by a
    later retry or edit of it, or of a message before it."""
    later = session.events().filter(event_type=EventType.USER_MESSAGE, pk__gt=message.pk)
    replaced = later.filter(data__retry_of__isnull=False).values_list("data__retry_of", flat=True)
    return not any(int(pk) <= message.pk for pk in replaced)
