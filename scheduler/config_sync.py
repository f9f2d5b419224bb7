"""`[[scheduled_tasks]]` of config.toml, mirrored into tasks with source "config".

Matched by owner and name: a new entry creates its task, a changed one updates
it, an entry gone from the file deletes its task. Every entry is checked before
anything is written, and all changes happen in one transaction, so a bad entry
leaves the tasks exactly as they were.

Config tasks must repeat: a one-time schedule would be re-created, or found in
the past, at every start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.history import Actor
from core.ownership import Owner
from core.users import UnknownUser, find_user
from memory.workspace import DEFAULT_AGENT, AgentNameError, check_agent_name
from scheduler.models import ScheduledTask
from scheduler.planning import Plan, TaskError, check_name, check_prompt, plan
from scheduler.schedule import ScheduleError
from sessions_app.models import Agent


class SyncError(Exception):
    """A [[scheduled_tasks]] entry that cannot be applied, named in the message."""


@dataclass(frozen=True)
class Wanted:
    owner: Owner
    name: str
    prompt: str
    agent_name: str
    trusted: bool
    plan: Plan


@dataclass
class SyncReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        parts = [
            f"{label} {len(names)} ({', '.join(names)})" if names else f"{label} 0"
            for label, names in [
                ("created", self.created),
                ("updated", self.updated),
                ("deleted", self.deleted),
            ]
        ]
        return "Scheduled tasks from config.toml: " + ", ".join(parts) + "."


def sync_config_tasks(
    entries: list[dict[str, Any]] | None = None, now: datetime | None = None
) -> SyncReport:
    """Apply `entries` (default: the loaded config) or raise SyncError, changing nothing."""
    entries = settings.NEOTASK["scheduled_tasks"] if entries is None else entries
    now = now or timezone.now()
    wanted = [check_entry(number, entry, now) for number, entry in enumerate(entries, start=1)]
    seen: set[tuple[int, str]] = set()
    for item in wanted:
        if (item.owner.pk, item.name) in seen:
            raise SyncError(
                f'[[scheduled_tasks]] "{item.name}" appears twice for {item.owner.username}; '
                "task names must differ per owner."
            )
        seen.add((item.owner.pk, item.name))
    with transaction.atomic():
        return apply(wanted, now)


def check_entry(number: int, entry: dict[str, Any], now: datetime) -> Wanted:
    where = f'[[scheduled_tasks]] #{number} "{entry.get("name", "")}"'
    username = entry["owner"].strip()
    try:
        owner = find_user(username)
    except UnknownUser:
        raise SyncError(
            f'{where}: there is no user "{username}" (owner must be a username).'
        ) from None
    try:
        agent_name = check_agent_name(entry.get("agent", DEFAULT_AGENT).strip())
        name = check_name(entry["name"])
        prompt = check_prompt(entry["prompt"])
        planned = plan(entry["schedule"], now=now)
    except (AgentNameError, TaskError, ScheduleError) as exc:
        raise SyncError(f"{where}: {exc}") from None
    if planned.is_oneshot:
        raise SyncError(
            f'{where}: "{planned.original}" runs only once; tasks in config.toml must repeat '
            '(e.g. "daily at 9am"). Ask the agent for one-time tasks.'
        )
    return Wanted(owner, name, prompt, agent_name, bool(entry.get("trusted", False)), planned)


# Who changes the tasks of config.toml, as the history says.
CONFIG = Actor.system("config.toml")


def apply(wanted: list[Wanted], now: datetime) -> SyncReport:
    report = SyncReport()
    existing = {
        (task.owner_id, task.name): task
        for task in ScheduledTask.objects.filter(source=ScheduledTask.Source.CONFIG)
    }
    for item in wanted:
        task = existing.pop((item.owner.pk, item.name), None)
        agent, _ = Agent.objects.get_or_create(owner=item.owner, name=item.agent_name)
        if task is None:
            ScheduledTask(
                owner=item.owner,
                name=item.name,
                source=ScheduledTask.Source.CONFIG,
                **fields_for(item, agent),
                next_run_at=item.plan.runs[0],
            ).save_by(CONFIG)
            report.created.append(item.name)
        elif update(task, item, agent):
            report.updated.append(item.name)
    for task in existing.values():
        task.delete_by(CONFIG)
        report.deleted.append(task.name)
    return report


def fields_for(item: Wanted, agent: Agent) -> dict[str, Any]:
    return {
        "cron_expr": item.plan.cron_expr,
        "original_schedule": item.plan.original,
        "time_zone": item.plan.time_zone,
        "is_oneshot": False,
        "prompt": item.prompt,
        "is_trusted": item.trusted,
        "agent": agent,
    }


def update(task: ScheduledTask, item: Wanted, agent: Agent) -> bool:
    """Apply the entry's values to `task`; whether anything changed."""
    new = fields_for(item, agent)
    changed = [name for name, value in new.items() if getattr(task, name) != value]
    if not changed:
        return False
    for name in changed:
        setattr(task, name, new[name])
    # Only a new schedule moves the next run: a prompt edit must not skip a due run.
    if {"cron_expr", "time_zone"} & set(changed):
        task.next_run_at = item.plan.runs[0]
        changed.append("next_run_at")
    task.save_by(CONFIG, update_fields=[*changed, "updated_at"])
    return True
