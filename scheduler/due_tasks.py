"""Running due scheduled tasks: claim, run as an agent turn in `cron:<task id>`, record.

A django-q2 schedule calls `run_due_tasks` every minute (see `install_schedule`),
possibly in several clusters at once. Each task is claimed before it runs by
moving its `next_run_at` to the next slot after now with a conditional UPDATE,
so only one cluster wins, and after downtime a task runs once, not once per
missed slot.

A task whose agent was deleted runs with its owner's default agent from then
on (the task is re-pointed), and its cron chat says so: the owner asked for
the run, and a notice is more useful than a silently paused task.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from agent.models import ApprovalRequest
from core.history import Actor, record_change, snapshot
from core.models import Change
from memory import recording
from memory.models import EventType
from memory.workspace import DEFAULT_AGENT
from scheduler.models import ScheduledTask
from scheduler.schedule import ScheduleError, next_run
from sessions_app import quotas, runner
from sessions_app.keys import SCHEDULED_CHANNEL, SessionKey
from sessions_app.models import Agent, Session

log = logging.getLogger(__name__)

SCHEDULE_NAME = "scheduler: run due tasks"
SCHEDULER = Actor.system("scheduler")  # what pauses a broken task, ends a one-time one
# Nobody watches a scheduled run: a command that needs approval is recorded and
# skipped at once instead of holding a worker for the usual approval timeout.
APPROVAL_TIMEOUT_SECONDS = 0.0


@dataclass(frozen=True)
class TaskRun:
    task_id: str
    name: str
    owner: str
    status: str  # completed | error | stopped | max_iterations (from the turn) | failed
    detail: str = ""


@dataclass
class RunReport:
    now: datetime
    runs: list[TaskRun] = field(default_factory=list)

    def __str__(self) -> str:
        if not self.runs:
            return f"{self.now:%Y-%m-%d %H:%M %Z}: no tasks were due."
        lines = [f"{self.now:%Y-%m-%d %H:%M %Z}: ran {len(self.runs)} task(s)."]
        for run in self.runs:
            detail = f": {' '.join(run.detail.split())[:120]}" if run.detail else ""
            lines.append(f'- "{run.name}" ({run.owner}, {run.task_id}) {run.status}{detail}')
        return "\n".join(lines)


def run_due_tasks(now: datetime | None = None) -> RunReport:
    """Run every task due at `now` that this process manages to claim."""
    now = now or timezone.now()
    report = RunReport(now)
    for task_id in due_task_ids(now):
        task = claim(task_id, now)
        if task is not None:  # else another cluster took it, or it was paused or deleted
            report.runs.append(run_task(task, now))
    return report


def due_task_ids(now: datetime) -> list[uuid.UUID]:
    # Every owner's tasks: the runner is the cluster's own job, not a request.
    due = ScheduledTask.objects.filter(is_paused=False, next_run_at__lte=now, owner__in=active())
    return list(due.order_by("next_run_at").values_list("pk", flat=True))


def active() -> QuerySet[Any]:
    """Owners whose tasks run. A deactivated owner's wait, unclaimed: reactivated,
    each runs once, as after downtime. (A subquery, not a join: the claim's row
    lock stays on the task.)"""
    return get_user_model().objects.filter(is_active=True).values("pk")


def claim(task_id: uuid.UUID, now: datetime) -> ScheduledTask | None:
    """The task, with `next_run_at` moved past `now`, if this call won it."""
    with transaction.atomic():
        due = ScheduledTask.objects.filter(
            pk=task_id, is_paused=False, next_run_at__lte=now, owner__in=active()
        )
        if connection.features.has_select_for_update_skip_locked:
            # Another cluster holding the row is running it: skip, don't wait.
            due = due.select_for_update(skip_locked=True)
        task = due.first()
        if task is None:
            return None
        try:
            following = next_run(task.cron_expr, now, task.time_zone)
        except ScheduleError as exc:
            pause_broken(task, str(exc))
            return None
        # Conditional: on databases without row locks, only the first of two
        # clusters that read the same next_run_at moves it.
        won = ScheduledTask.objects.filter(
            pk=task.pk, is_paused=False, next_run_at=task.next_run_at
        ).update(next_run_at=following)
    if not won:
        return None
    task.next_run_at = following
    return task


def pause_broken(task: ScheduledTask, reason: str) -> None:
    """A schedule that cannot run again (edited to nonsense, a zone that vanished)."""
    with transaction.atomic():
        ScheduledTask.objects.filter(pk=task.pk).update(is_paused=True)
        record_change(
            task.owner_id,
            SCHEDULER,
            Change.Subject.TASK,
            task.pk,
            task.name,
            Change.Action.CHANGED,
            {"is_paused": task.is_paused},
            {"is_paused": True},
        )
    log.warning("scheduled task %s paused: %s", task.pk, reason)
    session = cron_session(task)
    note = f'"{task.name}" was paused because its schedule cannot run: {reason}'
    record(task, str(session.pk), session.agent.name, EventType.ERROR, note, "task_paused")


def run_task(task: ScheduledTask, now: datetime) -> TaskRun:
    """Run one claimed task; never raises, so one task cannot stop the others."""
    owner = task.owner
    agent_name = DEFAULT_AGENT
    session_id = str(task.pk)
    try:
        session = cron_session(task)
        agent_name, session_id = session.agent.name, str(session.pk)
        # The prompt is a message, never a command; in line with anything the
        # owner typed into this chat meanwhile.
        result = async_to_sync(runner.submit)(
            owner,
            session.key,
            task.prompt,
            commands=False,
            wait=True,
            trusted=task.is_trusted,
            approval_timeout=APPROVAL_TIMEOUT_SECONDS,
            scheduled=True,
        )
        assert result is not None  # wait=True: the turn's outcome
        for request in result.approvals:
            ask_owner(task, result.session_id, agent_name, request)
        outcome = TaskRun(
            str(task.pk), task.name, owner.username, result.status, result.error or result.answer
        )
    except quotas.QuotaExceeded as exc:  # the owner's day is used up: not run, said why
        note = f'The scheduled task "{task.name}" did not run: {exc}'
        record(task, session_id, agent_name, EventType.ERROR, note, "task_refused")
        outcome = TaskRun(str(task.pk), task.name, owner.username, "failed", note)
    except Exception as exc:
        log.exception("scheduled task %s failed", task.pk)
        note = f'The scheduled task "{task.name}" failed: {type(exc).__name__}: {exc}'
        record(task, session_id, agent_name, EventType.ERROR, note, "task_failed")
        outcome = TaskRun(str(task.pk), task.name, owner.username, "failed", note)
    finish(task, now)
    return outcome


def run_now(task_id: str, now: datetime | None = None) -> TaskRun | None:
    """Run a task at once, outside its schedule (the tasks page's "run now"): its
    next scheduled run stays where it is, and a one-shot is done after it. None if
    the task was deleted, or its owner deactivated, before a worker got to it."""
    tasks = ScheduledTask.objects.select_related("owner", "agent")
    task = tasks.filter(pk=task_id, owner__in=active()).first()
    if task is None:
        return None
    return run_task(task, now or timezone.now())


def queue_run_now(task: ScheduledTask) -> None:
    """Hand "run now" to a worker: an agent turn takes far longer than a request should."""
    from django_q.tasks import async_task

    async_task("scheduler.due_tasks.run_now", str(task.pk), group="scheduled-tasks")


def cron_session(task: ScheduledTask) -> Session:
    """The active `cron:<task id>` session, created (or restarted with the task's
    current agent) when needed."""
    agent = task.agent
    if agent is None:
        agent = Agent.objects.default_for(task.owner)
        ScheduledTask.objects.filter(pk=task.pk).update(agent=agent)
        task.agent = agent
        replaced_agent = True
    else:
        replaced_agent = False
    key = str(SessionKey.for_task(str(task.pk), agent.name))
    session = Session.objects.active(task.owner, key)
    if session is not None and session.agent_id != agent.pk:
        session.archive()
        session = None
    if session is None:
        session = Session.start(task.owner, agent, SCHEDULED_CHANNEL, str(task.pk), title=task.name)
    if replaced_agent:
        note = (
            f'The agent of "{task.name}" was deleted, so it now runs with your default agent '
            f'"{agent.name}". Change the task if it should use another one.'
        )
        record(task, str(session.pk), agent.name, EventType.SYSTEM, note, "agent_replaced")
    return session


def ask_owner(
    task: ScheduledTask, session_id: str, agent_name: str, request: dict[str, Any]
) -> None:
    """Tell the owner a command waits for them. The turn expired the request when
    nobody answered at once; it is reopened so that the owner can still answer it
    in this chat ("Allow always" lets the next runs run it). An MCP tool call, and a
    change to memory or the schedule after outside text, is approved each time, so
    a task's run never makes one: the chat says so."""
    if request.get("kind") in (ApprovalRequest.Kind.MCP, ApprovalRequest.Kind.LASTING):
        what = (
            "a tool of an MCP server"
            if request["kind"] == ApprovalRequest.Kind.MCP
            else "a change to memory or tasks after the run read outside text"
        )
        note = (
            f'"{task.name}" wanted to call `{request["command"]}`, {what}; '
            "each such call needs your approval at the time, so this run went on without it."
        )
        record(task, session_id, agent_name, EventType.SYSTEM, note, "approval_needed")
        return
    ApprovalRequest.objects.filter(
        pk=request["request_id"], status=ApprovalRequest.Status.EXPIRED
    ).update(status=ApprovalRequest.Status.PENDING, decided_at=None)
    if request["prefix"]:
        always = f"“Allow always” lets later runs run `{request['prefix']}` commands"
    else:
        always = request["always_refused"].rstrip(".")
    note = (
        f'"{task.name}" wanted to run `{request["command"]}`, which needs your approval, so this '
        f"run went on without it. Answer the request here: {always}. Or mark the task trusted."
    )
    record(task, session_id, agent_name, EventType.SYSTEM, note, "approval_needed")


def record(
    task: ScheduledTask, session_id: str, agent_name: str, event_type: str, text: str, kind: str
) -> None:
    try:
        recording.record(
            task.owner,
            session_id,
            event_type,
            {"content": text, "kind": kind},
            agent=agent_name,
            task_id=str(task.pk),
        )
    except Exception:  # the database itself is failing: the log is all that is left
        log.exception("could not record %s for scheduled task %s", kind, task.pk)


def finish(task: ScheduledTask, now: datetime) -> None:
    try:
        if task.is_oneshot:
            with transaction.atomic():
                deleted, _ = ScheduledTask.objects.filter(pk=task.pk).delete()
                # A one-time task is done once it ran (unless its owner removed it meanwhile).
                if deleted:
                    record_change(
                        task.owner_id,
                        SCHEDULER,
                        Change.Subject.TASK,
                        task.pk,
                        task.name,
                        Change.Action.DELETED,
                        snapshot(task, task.history_fields),
                    )
        else:
            ScheduledTask.objects.filter(pk=task.pk).update(last_run_at=now)
    except Exception:
        log.exception("could not finish scheduled task %s", task.pk)


def install_schedule(sender: object, **kwargs: object) -> None:
    """Every minute, kept in sync at each `migrate`."""
    from django_q.models import Schedule

    Schedule.objects.update_or_create(
        name=SCHEDULE_NAME,
        defaults={
            "func": "scheduler.due_tasks.run_due_tasks",
            "schedule_type": Schedule.MINUTES,
            "minutes": 1,
            "repeats": -1,
        },
    )
