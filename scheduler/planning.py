"""Creating, finding and changing scheduled tasks, with the checks every entry
point shares (agent tools, config.toml, the management pages)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from scheduler.models import ScheduledTask
from scheduler.schedule import ScheduleError, next_run, next_runs, parse_schedule
from sessions_app.models import Agent

MAX_PROMPT_CHARS = 8000
MAX_NAME_CHARS = 200  # ScheduledTask.name
PREVIEW_RUNS = 3


class TaskError(ValueError):
    """A task that cannot be created or changed; the message says why."""


@dataclass(frozen=True)
class Plan:
    """A parsed schedule and its first runs, before anything is saved."""

    original: str
    cron_expr: str
    is_oneshot: bool
    time_zone: str
    runs: list[datetime]


def server_time_zone() -> str:
    return settings.NEOTASK["server"]["time_zone"]


def plan(schedule: str, now: datetime | None = None, tz: str | None = None) -> Plan:
    """Parse `schedule` in `tz` (default: the server's zone); ScheduleError if it cannot run."""
    now = now or timezone.now()
    tz = tz or server_time_zone()
    parsed = parse_schedule(schedule, now=now, tz=tz)
    count = 1 if parsed.is_oneshot else PREVIEW_RUNS
    runs = next_runs(parsed.cron_expr, count, now=now, tz=tz)
    return Plan(" ".join(schedule.split()), parsed.cron_expr, parsed.is_oneshot, tz, runs)


def check_prompt(prompt: str) -> str:
    prompt = prompt.strip()
    if not prompt:
        raise TaskError("The prompt is empty: say what the agent should do at each run.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise TaskError(
            f"The prompt is {len(prompt):,} characters; a task's prompt can be at most "
            f"{MAX_PROMPT_CHARS:,}. Shorten it, or keep the details in a memory file."
        )
    return prompt


def check_name(name: str) -> str:
    name = " ".join(name.split())
    if not name:
        raise TaskError("The task needs a name.")
    if len(name) > MAX_NAME_CHARS:
        raise TaskError(f"A task name can be at most {MAX_NAME_CHARS} characters.")
    return name


def default_name(prompt: str) -> str:
    words = " ".join(prompt.split())
    return words[:60] + ("…" if len(words) > 60 else "")


def create_task(
    owner: Any,
    schedule: str,
    prompt: str,
    name: str = "",
    *,
    agent: Agent | None = None,
    now: datetime | None = None,
) -> tuple[ScheduledTask, Plan]:
    """A task created in Neotask (source "tool"); nothing is saved if any part is bad."""
    prompt = check_prompt(prompt)
    name = check_name(name or default_name(prompt))
    try:
        planned = plan(schedule, now=now)
    except ScheduleError as exc:
        raise TaskError(str(exc)) from None
    if ScheduledTask.objects.owned_by(owner).filter(name=name).exists():
        raise TaskError(
            f'You already have a task named "{name}". Pick another name, or cancel that task first.'
        )
    task = ScheduledTask.objects.create(
        owner=owner,
        name=name,
        cron_expr=planned.cron_expr,
        original_schedule=planned.original,
        prompt=prompt,
        source=ScheduledTask.Source.TOOL,
        agent=agent or Agent.objects.default_for(owner),
        time_zone=planned.time_zone,
        is_oneshot=planned.is_oneshot,
        next_run_at=planned.runs[0],
    )
    return task, planned


def edit_task(task: ScheduledTask, schedule: str, prompt: str, now: datetime | None = None) -> Plan:
    """A new schedule and prompt, checked as create_task checks them; the next
    run follows the new schedule."""
    check_editable(task)
    prompt = check_prompt(prompt)
    try:
        planned = plan(schedule, now=now)
    except ScheduleError as exc:
        raise TaskError(str(exc)) from None
    task.cron_expr, task.original_schedule = planned.cron_expr, planned.original
    task.time_zone, task.is_oneshot = planned.time_zone, planned.is_oneshot
    task.prompt, task.next_run_at = prompt, planned.runs[0]
    task.save()
    return planned


def find_task(owner: Any, reference: str) -> ScheduledTask:
    """The owner's task with this id or exact name; TaskError if none or several."""
    reference = reference.strip()
    tasks = ScheduledTask.objects.owned_by(owner)
    try:
        by_id = tasks.filter(pk=uuid.UUID(reference)).first()
    except ValueError:
        by_id = None
    if by_id is not None:
        return by_id
    named = list(tasks.filter(name=reference)[:2])
    if not named:
        raise TaskError(f'You have no scheduled task "{reference}". List them with list_tasks.')
    if len(named) > 1:
        raise TaskError(f'Several of your tasks are named "{reference}"; use the task id.')
    return named[0]


def check_editable(task: ScheduledTask) -> None:
    if task.source == ScheduledTask.Source.CONFIG:
        raise TaskError(
            f'"{task.name}" comes from config.toml ([[scheduled_tasks]]); change or remove it '
            "there, then restart Neotask."
        )


def set_paused(task: ScheduledTask, paused: bool, now: datetime | None = None) -> None:
    check_editable(task)
    fields = ["is_paused", "updated_at"]
    if not paused and task.is_paused and not task.is_oneshot:
        # From now on: resuming must not fire at once for the runs missed while
        # paused. A one-shot whose time passed runs once, as it would after downtime.
        try:
            task.next_run_at = next_run(task.cron_expr, now or timezone.now(), task.time_zone)
        except ScheduleError as exc:
            raise TaskError(f'"{task.name}" cannot run again: {exc}') from None
        fields.append("next_run_at")
    task.is_paused = paused
    task.save(update_fields=fields)


def cancel(task: ScheduledTask) -> None:
    check_editable(task)
    task.delete()
