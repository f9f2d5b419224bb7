"""What a scheduled task's schedule, prompt and name must be, checked the same
way by every entry point (the agent's tools, config.toml, the tasks page, the
aidaemon importer); the task's own behaviour is on the model
(scheduler.models.ScheduledTask)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from scheduler.schedule import next_runs, parse_schedule

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
