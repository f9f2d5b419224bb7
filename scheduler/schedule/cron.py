"""Cron expressions: when they run, in a time zone, and the errors of a schedule.

`next_run` and `next_runs` compute run times with croniter, following cron's
daylight-saving rules. A `Schedule` is what a user's text becomes: a cron
expression, and whether it runs once (a one-shot is the cron expression of its
minute, day and month; the runner deletes it after its run).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter
from django.utils import timezone

CRON_EXAMPLES = '"*/15 * * * *" or "0 9 * * 1-5"'


class ScheduleError(ValueError):
    """A schedule that cannot run; the message tells the user how to fix it."""


class NotASchedule(ScheduleError):
    """Text that is not schedule syntax at all, as opposed to a schedule with a
    bad value; `split_schedule` keeps looking for a shorter phrase only then."""


@dataclass(frozen=True)
class Schedule:
    cron_expr: str
    is_oneshot: bool


def next_run(cron_expr: str, after: datetime, tz: tzinfo | str | None = None) -> datetime:
    """The first run of `cron_expr` (read in `tz`) strictly after `after`.

    Follows cron's daylight-saving rules: a fixed-time run in the hour the
    clocks skip happens when they jump, one in the hour that repeats happens
    only the first time; runs with a wildcard minute or hour keep their pace.
    """
    zone = time_zone(tz)
    fields = cron_expr.split()
    if len(fields) != 5:
        raise NotASchedule(
            f'"{cron_expr}" has {len(fields)} fields, but a cron expression needs exactly 5 '
            f"(minute hour day month weekday), e.g. {CRON_EXAMPLES}."
        )
    try:
        runs = croniter(cron_expr, aware(after).astimezone(zone))
    except CroniterBadCronError:
        raise ScheduleError(
            f'"{cron_expr}" is not a valid cron expression (minute 0-59, hour 0-23, '
            f"day 1-31, month 1-12, weekday 0-6), e.g. {CRON_EXAMPLES}."
        ) from None
    runs_once_per_wall_time = not (fields[0].startswith("*") or fields[1].startswith("*"))
    try:
        while True:
            run = runs.get_next(datetime).astimezone(zone)
            if not (run.fold and runs_once_per_wall_time):
                return run
    except CroniterBadDateError:
        raise ScheduleError(
            f'"{cron_expr}" never runs: no date matches its day and month, e.g. '
            f'February 30th. Try e.g. "0 9 28 2 *" or "0 9 1 * *".'
        ) from None


def next_runs(
    cron_expr: str, count: int = 3, now: datetime | None = None, tz: tzinfo | str | None = None
) -> list[datetime]:
    """The next `count` runs of `cron_expr` after `now`, aware, in `tz`."""
    zone = time_zone(tz)
    runs: list[datetime] = []
    after = aware(now)
    for _ in range(count):
        after = next_run(cron_expr, after, zone)
        runs.append(after)
    return runs


def time_zone(tz: tzinfo | str | None) -> tzinfo:
    if tz is None:
        return timezone.get_current_timezone()
    if not isinstance(tz, str):
        return tz
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f'Unknown time zone "{tz}". Use a name like "Europe/Berlin" or "UTC".'
        ) from None


def aware(moment: datetime | None) -> datetime:
    if moment is None:
        return timezone.now()
    if timezone.is_naive(moment):
        raise ValueError(f"{moment} needs a time zone.")
    return moment
