"""Schedules as users type them, turned into cron expressions.

`parse_schedule` accepts a five-field cron expression or a short English phrase
("every weekday at 9am", "every 15 minutes", "tomorrow at 9am") and returns a
`Schedule`: a cron expression in the task's own time zone. `split_schedule`
finds where a schedule phrase ends and a prompt begins. Their helpers:

- `phrases`: the English phrases, recurring and one-shot, and what each means;
- `cron`: run times of a cron expression (`next_run`, `next_runs`, following
  cron's daylight-saving rules), `Schedule` and `ScheduleError`.
"""

from __future__ import annotations

import re
from datetime import datetime, tzinfo

from scheduler.schedule.cron import (
    CRON_EXAMPLES,
    NotASchedule,
    Schedule,
    ScheduleError,
    aware,
    next_run,
    next_runs,
    time_zone,
)
from scheduler.schedule.phrases import parse_phrase, time_last

__all__ = [
    "EXAMPLES",
    "MAX_LENGTH",
    "Schedule",
    "ScheduleError",
    "next_run",
    "next_runs",
    "parse_schedule",
    "split_schedule",
]

MAX_LENGTH = 200
EXAMPLES = '"every weekday at 9am", "every 15 minutes", "tomorrow at 9am"'
_TRAILING_PUNCTUATION = ",;:.-\u2013\u2014"  # "daily at 9am: do X", "daily at 9am - do X"


def parse_schedule(
    text: str, now: datetime | None = None, tz: tzinfo | str | None = None
) -> Schedule:
    """The cron expression (in `tz`) for what a user typed; see the module doc."""
    zone = time_zone(tz)
    normalized = _normalize(text)
    if not normalized:
        raise ScheduleError(f"Enter a schedule, e.g. {EXAMPLES} or a cron expression.")
    if len(normalized) > MAX_LENGTH:
        raise ScheduleError(
            f"A schedule can be at most {MAX_LENGTH} characters, e.g. {EXAMPLES}; "
            "what the task should do belongs in its prompt."
        )
    schedule = _parse(normalized, aware(now).astimezone(zone), zone)
    if schedule is None:
        raise NotASchedule(
            f'Could not understand "{" ".join(text.split())}" as a schedule. '
            f"Try e.g. {EXAMPLES} or a cron expression like {CRON_EXAMPLES}."
        )
    return schedule


def split_schedule(text: str) -> tuple[str, str]:
    """The longest leading schedule phrase of `text` and the rest, e.g.
    "every weekday at 9am summarise my todos" → ("every weekday at 9am",
    "summarise my todos"). A phrase with a bad value ("daily at 25:00 …") still
    counts as the schedule, so that `parse_schedule` then explains the problem."""
    ends = [word.end() for word in re.finditer(r"\S+", text)]
    for end in reversed(ends):
        candidate = text[:end].strip().rstrip(_TRAILING_PUNCTUATION).strip()
        if not candidate or len(candidate) > MAX_LENGTH:
            continue
        try:
            parse_schedule(candidate)
        except NotASchedule:
            continue
        except ScheduleError:
            pass
        return candidate, text[end:].strip()
    raise ScheduleError(
        f'Could not find a schedule at the start of "{" ".join(text.split()[:8])}". '
        f"Start with e.g. {EXAMPLES}."
    )


def _normalize(text: str) -> str:
    text = re.sub(r"\b([ap])\.m\b\.?", r"\1m", " ".join(text.lower().split()))
    return text.rstrip(".!").strip()


def _parse(text: str, now: datetime, zone: tzinfo) -> Schedule | None:
    text = time_last(text)
    if _looks_like_cron(text):
        next_run(text, now, zone)  # validates, and rejects one that never runs
        return Schedule(text, is_oneshot=False)
    return parse_phrase(text, now, zone)


def _looks_like_cron(text: str) -> bool:
    fields = text.split()
    return len(fields) >= 3 and all(re.fullmatch(r"[\d*/,\-]+", field) for field in fields[:2])
