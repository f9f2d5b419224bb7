"""English schedule phrases turned into cron expressions in the task's time zone:
recurring ("every weekday at 9am", "every 15 minutes") and one-shot ("tomorrow
at 9am", "in 2 hours", "on March 5th at 3pm").

Intervals must divide evenly into the unit cron counts them in: `*/45` runs at
:00 and :45 (15 minutes apart, then 45), so "every 45 minutes" is rejected with
a suggestion instead of silently running at uneven intervals.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo

from scheduler.schedule.cron import Schedule, ScheduleError, next_run


@dataclass(frozen=True)
class _Context:
    now: datetime  # aware, in `zone`
    zone: tzinfo


# Vocabulary --------------------------------------------------------------------

_WEEKDAY_NAMES = ["sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"]
_WEEKDAYS: dict[str, int] = {
    **{name: number for number, name in enumerate(_WEEKDAY_NAMES)},
    **{f"{name}s": number for number, name in enumerate(_WEEKDAY_NAMES)},
    **{"sun": 0, "mon": 1, "tue": 2, "tues": 2, "wed": 3, "weds": 3},
    **{"thu": 4, "thur": 4, "thurs": 4, "fri": 5, "sat": 6},
}
_MONTHS: dict[str, int] = {
    **{name.lower(): number for number, name in enumerate(calendar.month_name) if name},
    **{name.lower(): number for number, name in enumerate(calendar.month_abbr) if name},
    "sept": 9,
}
_UNITS: dict[str, str] = {
    **dict.fromkeys(["s", "sec", "secs", "second", "seconds"], "second"),
    **dict.fromkeys(["m", "min", "mins", "minute", "minutes"], "minute"),
    **dict.fromkeys(["h", "hr", "hrs", "hour", "hours"], "hour"),
    **dict.fromkeys(["d", "day", "days"], "day"),
    **dict.fromkeys(["w", "wk", "wks", "week", "weeks"], "week"),
}
_KEYWORDS = {"hourly": "0 * * * *", "weekly": "0 0 * * 0", "monthly": "0 0 1 * *"}


def _one_of(words: Mapping[str, object]) -> str:
    # Longest first, so "tues" is not read as "tue" followed by junk.
    return "(?:" + "|".join(sorted(words, key=len, reverse=True)) + ")"


_SEP = r"(?:\s*,\s*(?:and\s+)?|\s+and\s+|\s*&\s*)"
_TIME = r"(?:noon|midnight|\d{1,2}(?::\d{2})?(?:\s?[ap]m)?)"
_TIMES = rf"{_TIME}(?:{_SEP}{_TIME})*"
_DAY = _one_of(_WEEKDAYS)
_DAY_RANGE = rf"{_DAY}(?:\s*-\s*|\s+(?:to|through|thru)\s+){_DAY}"
_DAY_TERM = rf"(?:{_DAY_RANGE}|{_DAY}|weekdays?|weekends?)"
_UNIT = _one_of(_UNITS)
# "1h30m" is fine, but the "and" of "1 hour and 30 minutes" is not "a" "n(d)".
_AMOUNT = rf"(?:\d+\s*|(?:an?|one)\s+){_UNIT}(?![a-z])"
_AMOUNT_PARTS = re.compile(rf"(?:(?P<number>\d+)\s*|(?:an?|one)\s+)(?P<unit>{_UNIT})(?![a-z])")
_ORDINAL = r"\d{1,2}(?:st|nd|rd|th)?"
_MONTH = _one_of(_MONTHS)
_AT = rf"(?:\s+at\s+(?P<times>{_TIMES}))?"


def parse_phrase(text: str, now: datetime, zone: tzinfo) -> Schedule | None:
    """The schedule of a normalized English phrase (`now` aware, in `zone`), or
    None if `text` is not one."""
    if text in _KEYWORDS:
        return Schedule(_KEYWORDS[text], is_oneshot=False)
    context = _Context(now, zone)
    for pattern, handler in _RULES:
        match = pattern.fullmatch(text)
        if match:
            return handler(match, context)
    return None


def time_last(text: str) -> str:
    """Reads "at 9am every weekday" as "every weekday at 9am", which means the same."""
    leading_time = re.fullmatch(rf"at\s+({_TIMES})\s+(.+)", text)
    return f"{leading_time[2]} at {leading_time[1]}" if leading_time else text


# Recurring phrases


def _every_day(match: re.Match[str], context: _Context) -> Schedule:
    return _recurring(match["times"] or "midnight", "*")


def _on_days(match: re.Match[str], context: _Context) -> Schedule:
    if not match["times"]:
        raise ScheduleError(f'Say at what time, e.g. "{match[0]} at 9am" or "{match[0]} at 14:30".')
    days: set[int] = set()
    for term in re.split(_SEP, match["days"]):
        days |= _days_of(term)
    cron_days = "*" if len(days) == 7 else _cron_list(days)
    return _recurring(match["times"], cron_days)


def _days_of(term: str) -> set[int]:
    if term.startswith("weekday"):
        return {1, 2, 3, 4, 5}
    if term.startswith("weekend"):
        return {0, 6}
    ends = re.fullmatch(rf"({_DAY})(?:\s*-\s*|\s+(?:to|through|thru)\s+)({_DAY})", term)
    if not ends:
        return {_WEEKDAYS[term]}
    first, last = _WEEKDAYS[ends[1]], _WEEKDAYS[ends[2]]
    # A range may wrap around the week end ("fri-mon").
    return {(first + offset) % 7 for offset in range((last - first) % 7 + 1)}


def _recurring(times_text: str, cron_days: str) -> Schedule:
    times = {_parse_time(each) for each in re.split(_SEP, times_text)}
    hours = {hour for hour, _ in times}
    minutes = {minute for _, minute in times}
    # One cron expression runs at every combination of its minutes and hours.
    if len(hours) * len(minutes) != len(times):
        raise ScheduleError(
            f'"{times_text}" cannot share one schedule: the times must all have the same '
            'minutes (e.g. "at 9am and 5pm") or the same hour (e.g. "at 9:00 and 9:30"). '
            "Create a second task for the other times."
        )
    cron_expr = f"{_cron_list(minutes)} {_cron_list(hours)} * * {cron_days}"
    return Schedule(cron_expr, is_oneshot=False)


def _cron_list(values: set[int]) -> str:
    """Sorted cron list with runs of three or more as ranges: {1,2,3,4,5} → "1-5"."""
    runs: list[list[int]] = []
    for value in sorted(values):
        if runs and value == runs[-1][-1] + 1:
            runs[-1].append(value)
        else:
            runs.append([value])
    return ",".join(
        f"{run[0]}-{run[-1]}" if len(run) >= 3 else ",".join(map(str, run)) for run in runs
    )


def _interval(match: re.Match[str], context: _Context) -> Schedule:
    count = int(match["count"] or 1)
    unit = _UNITS[match["unit"]]
    phrase = match[0]
    if count == 0:
        raise ScheduleError(
            f'"{phrase}": the interval must be at least 1 {unit}, '
            'e.g. "every 5 minutes" or "every 2 hours".'
        )
    if unit == "second":
        raise ScheduleError(
            f'"{phrase}": schedules run at most once a minute. '
            'Try "every minute" or "every 2 minutes".'
        )
    if unit == "minute":
        return Schedule(_every_minutes(count, phrase), is_oneshot=False)
    if unit == "hour":
        return Schedule(_every_hours(count, phrase), is_oneshot=False)
    if count == 1:
        return Schedule("0 0 * * *" if unit == "day" else "0 0 * * 0", is_oneshot=False)
    raise ScheduleError(
        f'"{phrase}" cannot be a cron schedule: cron cannot repeat every few days or weeks '
        'evenly (months differ in length). Try "daily at 9am" or '
        '"every monday and thursday at 9am".'
    )


def _every_minutes(count: int, phrase: str) -> str:
    if count % 60 == 0:
        return _every_hours(count // 60, phrase)
    if 60 % count:
        raise ScheduleError(
            f'"{phrase}" cannot run at even intervals, because cron restarts the count of '
            f"minutes every hour. Use a number of minutes that divides 60 "
            f'({_divisors(60)}) or whole hours, e.g. "every 30 minutes" or "every 2 hours".'
        )
    return "* * * * *" if count == 1 else f"*/{count} * * * *"


def _every_hours(count: int, phrase: str) -> str:
    if count == 24:
        return "0 0 * * *"
    if 24 % count:
        raise ScheduleError(
            f'"{phrase}" cannot run at even intervals, because cron restarts the count of '
            f"hours every day. Use a number of hours that divides 24 ({_divisors(24)}), "
            'e.g. "every 4 hours" or "every 6 hours".'
        )
    return "0 * * * *" if count == 1 else f"0 */{count} * * *"


def _divisors(total: int) -> str:
    return ", ".join(str(number) for number in range(1, total) if total % number == 0)


def _parse_time(text: str) -> tuple[int, int]:
    """(hour, minute) of "9am", "9:30 pm", "14:30", "9" (24-hour), "noon", "midnight"."""
    if text in ("noon", "midnight"):
        return (12, 0) if text == "noon" else (0, 0)
    parts = re.fullmatch(r"(\d{1,2})(?::(\d{2}))?\s?([ap]m)?", text)
    assert parts is not None  # the phrase patterns only capture times of this form
    hour, minute, meridiem = int(parts[1]), int(parts[2] or 0), parts[3]
    if minute > 59:
        raise ScheduleError(f'"{text}" is not a valid time: minutes go from 00 to 59.')
    if meridiem and not 1 <= hour <= 12:
        raise ScheduleError(
            f'"{text}" is not a valid time: with am/pm the hour goes from 1 to 12, '
            'e.g. "9am" or "12pm" (noon).'
        )
    if meridiem:
        return hour % 12 + (12 if meridiem == "pm" else 0), minute
    if hour > 23:
        raise ScheduleError(
            f'"{text}" is not a valid time: hours go from 0 to 23, e.g. "14:30", "2:30pm" '
            'or "midnight".'
        )
    return hour, minute


# One-shot phrases


def _in_duration(match: re.Match[str], context: _Context) -> Schedule:
    delta = timedelta()
    for amount in _AMOUNT_PARTS.finditer(match["amounts"]):
        count = int(amount["number"] or 1)
        unit = _UNITS[amount["unit"]]
        if unit == "second":
            raise ScheduleError(
                f'"{match[0]}": schedules have minute precision. Try "in 1 minute" or '
                '"in 2 minutes".'
            )
        delta += timedelta(**{f"{unit}s": count})
    if not delta:
        raise ScheduleError(f'"{match[0]}" is not in the future. Try "in 5 minutes".')
    # Elapsed time, so computed in UTC: "in 2 hours" across a clock change is 2 hours.
    target = (context.now.astimezone(UTC) + delta).astimezone(context.zone)
    return _oneshot(target.replace(second=0, microsecond=0), context)


def _relative_day(match: re.Match[str], context: _Context) -> Schedule:
    if not match["times"]:
        raise ScheduleError(f'Say at what time, e.g. "{match["day"]} at 9am".')
    time_text = _single_time(match["times"])
    hour, minute = _parse_time(time_text)
    day = context.now.date() + timedelta(days=1 if match["day"] == "tomorrow" else 0)
    if match["day"] == "tonight":
        # "tonight at 11" means 23:00, and "tonight at 1am" the early hours after today.
        if hour < 12 and not time_text.endswith("am") and time_text != "midnight":
            hour += 12
        day += timedelta(days=1 if hour < 6 else 0)
    return _oneshot(_wall_time(day, hour, minute, context.zone), context)


def _on_date(match: re.Match[str], context: _Context) -> Schedule:
    month = _MONTHS[match["month"] or match["month2"]]
    day = int(re.sub(r"\D", "", match["day"] or match["day2"]))
    month_name = calendar.month_name[month]
    if not 1 <= day <= calendar.monthrange(2024, month)[1]:  # 2024: leap year, so Feb 29 is ok
        raise ScheduleError(
            f'{month_name} has no day {day}. Try e.g. "on {month_name} 1st at 3pm" or '
            '"tomorrow at 9am".'
        )
    if not match["times"]:
        raise ScheduleError(f'Say at what time, e.g. "on {month_name} {day} at 3pm".')
    hour, minute = _parse_time(_single_time(match["times"]))
    if match["year"]:
        years = [int(match["year"])]
    else:
        # The next occurrence: this year if still ahead, else a later one (Feb 29: leap years).
        years = list(range(context.now.year, context.now.year + 9))
    for year in years:
        if day <= calendar.monthrange(year, month)[1]:
            target = _wall_time(date(year, month, day), hour, minute, context.zone)
            if target.astimezone(UTC) > context.now.astimezone(UTC) or match["year"]:
                return _oneshot(target, context)
    raise ScheduleError(
        f"{month_name} {day}, {match['year']} does not exist. Try e.g. "
        f'"on {month_name} 1st at 3pm".'
    )


def _at_time(match: re.Match[str], context: _Context) -> Schedule:
    hour, minute = _parse_time(_single_time(match["times"]))
    today = context.now.date()
    target = _wall_time(today, hour, minute, context.zone)
    if target.astimezone(UTC) <= context.now.astimezone(UTC):
        target = _wall_time(today + timedelta(days=1), hour, minute, context.zone)
    return _oneshot(target, context)


def _iso(match: re.Match[str], context: _Context) -> Schedule:
    try:
        moment = datetime.fromisoformat(match[0].upper())
    except ValueError:
        raise ScheduleError(
            f'"{match[0]}" is not a valid date and time. Use e.g. "2026-12-24 18:00".'
        ) from None
    if moment.tzinfo is None:
        moment = _wall_time(moment.date(), moment.hour, moment.minute, context.zone)
    return _oneshot(moment.astimezone(context.zone).replace(second=0, microsecond=0), context)


def _single_time(times_text: str) -> str:
    times = re.split(_SEP, times_text)
    if len(times) > 1:
        raise ScheduleError(
            f'A one-time schedule takes a single time, not "{times_text}". '
            'For several runs a day use e.g. "every day at 9am and 5pm".'
        )
    return times[0]


def _wall_time(day: date, hour: int, minute: int, zone: tzinfo) -> datetime:
    """`day` at hour:minute in `zone`; the first of the two when the clocks go back."""
    moment = datetime.combine(day, time(hour, minute), tzinfo=zone)
    if moment.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != moment.replace(tzinfo=None):
        raise ScheduleError(
            f"{moment:%H:%M} does not exist on {moment:%Y-%m-%d} in {zone}, because the clocks "
            "go forward then. Pick a time an hour later."
        )
    return moment


def _oneshot(target: datetime, context: _Context) -> Schedule:
    if target.astimezone(UTC) <= context.now.astimezone(UTC):
        raise ScheduleError(
            f"{target:%Y-%m-%d %H:%M} is in the past (it is now {context.now:%Y-%m-%d %H:%M}). "
            'Pick a later time, e.g. "tomorrow at 9am" or "in 20 minutes".'
        )
    cron_expr = f"{target.minute} {target.hour} {target.day} {target.month} *"
    # The expression has no year: it must not match an earlier day than the target.
    first_run = next_run(cron_expr, context.now, context.zone)
    if first_run.replace(tzinfo=None) != target.replace(tzinfo=None):
        raise ScheduleError(
            f"{target:%Y-%m-%d %H:%M} is too far ahead: a one-time schedule must fall within "
            'the next year. Try e.g. "on March 5th at 3pm" or "in 2 days".'
        )
    return Schedule(cron_expr, is_oneshot=True)


_Handler = Callable[[re.Match[str], _Context], Schedule]
_RULES: tuple[tuple[re.Pattern[str], _Handler], ...] = tuple(
    (re.compile(pattern), handler)
    for pattern, handler in [
        (rf"(?:daily|everyday|(?:every|each)\s+day){_AT}", _every_day),
        (
            rf"(?:(?:every|each|on)\s+)?(?P<days>{_DAY_TERM}(?:{_SEP}{_DAY_TERM})*){_AT}",
            _on_days,
        ),
        (rf"(?:every|each)\s+(?:(?P<count>\d+)\s*)?(?P<unit>{_UNIT})", _interval),
        (rf"in\s+(?P<amounts>{_AMOUNT}(?:(?:{_SEP}|\s*){_AMOUNT})*)", _in_duration),
        (rf"(?P<day>today|tomorrow|tonight){_AT}", _relative_day),
        (
            rf"(?:on\s+)?(?:(?P<month>{_MONTH})\s+(?:the\s+)?(?P<day>{_ORDINAL})"
            rf"|(?:the\s+)?(?P<day2>{_ORDINAL})(?:\s+of)?\s+(?P<month2>{_MONTH}))"
            rf"(?:,?\s+(?P<year>\d{{4}}))?{_AT}",
            _on_date,
        ),
        (rf"at\s+(?P<times>{_TIMES})", _at_time),
        (
            r"\d{4}-\d{2}-\d{2}[t ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:z|[+-]\d{2}(?::?\d{2})?)?",
            _iso,
        ),
    ]
)
