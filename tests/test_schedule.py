from __future__ import annotations

import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from scheduler.schedule import (
    Schedule,
    ScheduleError,
    next_run,
    next_runs,
    parse_schedule,
    split_schedule,
)

BERLIN = ZoneInfo("Europe/Berlin")
# A Sunday morning; 2026's clocks change on March 29 and October 25 in Berlin.
NOW = datetime(2026, 3, 1, 10, 15, tzinfo=BERLIN)


def berlin(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=BERLIN)


@pytest.mark.parametrize(
    ("text", "cron_expr"),
    [
        ("*/5 * * * *", "*/5 * * * *"),
        ("0 9 * * 1-5", "0 9 * * 1-5"),
        ("  0   9 * *   MON-FRI ", "0 9 * * mon-fri"),
        ("30 2 1,15 * *", "30 2 1,15 * *"),
        ("hourly", "0 * * * *"),
        ("daily", "0 0 * * *"),
        ("weekly", "0 0 * * 0"),
        ("monthly", "0 0 1 * *"),
        ("every day", "0 0 * * *"),
        ("every week", "0 0 * * 0"),
        ("every 5m", "*/5 * * * *"),
        ("every 15 minutes", "*/15 * * * *"),
        ("every 30 mins", "*/30 * * * *"),
        ("each 2h", "0 */2 * * *"),
        ("every 4 hours", "0 */4 * * *"),
        ("every 12 hrs", "0 */12 * * *"),
        ("every minute", "* * * * *"),
        ("every 1 minute", "* * * * *"),
        ("every hour", "0 * * * *"),
        ("every 60 minutes", "0 * * * *"),
        ("every 120 minutes", "0 */2 * * *"),
        ("every 24 hours", "0 0 * * *"),
        ("daily at 9am", "0 9 * * *"),
        ("daily at 14:30", "30 14 * * *"),
        ("everyday at 7", "0 7 * * *"),
        ("every day at 6am, 12pm and 6pm", "0 6,12,18 * * *"),
        ("every day at 9:00 and 9:30", "0,30 9 * * *"),
        ("every day at 9, 10 and 11", "0 9-11 * * *"),
        ("weekdays at 9am", "0 9 * * 1-5"),
        ("every weekday at 9am and 5pm", "0 9,17 * * 1-5"),
        ("on weekdays at 8:15", "15 8 * * 1-5"),
        ("weekends at 10am", "0 10 * * 0,6"),
        ("every weekend at 10am", "0 10 * * 0,6"),
        ("every Monday and Friday at 9am", "0 9 * * 1,5"),
        ("on mondays at 9", "0 9 * * 1"),
        ("every mon, wed and fri at 8:15", "15 8 * * 1,3,5"),
        ("every tue & thu at 6pm", "0 18 * * 2,4"),
        ("tuesdays and thursdays at 6pm", "0 18 * * 2,4"),
        ("every sat, sun at noon", "0 12 * * 0,6"),
        ("every mon-fri at 9am", "0 9 * * 1-5"),
        ("every monday to wednesday at 9am", "0 9 * * 1-3"),
        ("every friday through monday at 9am", "0 9 * * 0,1,5,6"),
        ("every monday to sunday at 9am", "0 9 * * *"),
        ("at 9am every weekday", "0 9 * * 1-5"),
        ("Every  Weekday   AT 9AM", "0 9 * * 1-5"),
        ("every weekday at 9 a.m.", "0 9 * * 1-5"),
        ("every weekday at 5 p.m", "0 17 * * 1-5"),
        ("every day at 5pm.", "0 17 * * *"),
    ],
)
def test_it_parses_recurring_schedules(text: str, cron_expr: str):
    assert parse_schedule(text, now=NOW, tz=BERLIN) == Schedule(cron_expr, is_oneshot=False)


@pytest.mark.parametrize(
    ("time_text", "cron_expr"),
    [
        ("9am", "0 9 * * *"),
        ("9 am", "0 9 * * *"),
        ("9:30am", "30 9 * * *"),
        ("9:30 PM", "30 21 * * *"),
        ("12pm", "0 12 * * *"),
        ("12am", "0 0 * * *"),
        ("12:30am", "30 0 * * *"),
        ("noon", "0 12 * * *"),
        ("midnight", "0 0 * * *"),
        ("14:30", "30 14 * * *"),
        ("09:05", "5 9 * * *"),
        ("9", "0 9 * * *"),
        ("0", "0 0 * * *"),
        ("23:59", "59 23 * * *"),
    ],
)
def test_it_reads_times(time_text: str, cron_expr: str):
    schedule = parse_schedule(f"daily at {time_text}", now=NOW, tz=BERLIN)
    assert schedule.cron_expr == cron_expr


@pytest.mark.parametrize(
    ("text", "cron_expr", "first_run"),
    [
        ("in 20 minutes", "35 10 1 3 *", "2026-03-01 10:35"),
        ("in 1 minute", "16 10 1 3 *", "2026-03-01 10:16"),
        ("in 1 hour 30 minutes", "45 11 1 3 *", "2026-03-01 11:45"),
        ("in 1 hour and 30 minutes", "45 11 1 3 *", "2026-03-01 11:45"),
        ("in 1h30m", "45 11 1 3 *", "2026-03-01 11:45"),
        ("in an hour", "15 11 1 3 *", "2026-03-01 11:15"),
        ("in 90 minutes", "45 11 1 3 *", "2026-03-01 11:45"),
        ("in 2 days", "15 10 3 3 *", "2026-03-03 10:15"),
        ("in 1 week", "15 10 8 3 *", "2026-03-08 10:15"),
        ("tomorrow at 9am", "0 9 2 3 *", "2026-03-02 09:00"),
        ("today at 5pm", "0 17 1 3 *", "2026-03-01 17:00"),
        ("tonight at 11pm", "0 23 1 3 *", "2026-03-01 23:00"),
        ("tonight at 11", "0 23 1 3 *", "2026-03-01 23:00"),
        ("tonight at midnight", "0 0 2 3 *", "2026-03-02 00:00"),
        ("tonight at 1am", "0 1 2 3 *", "2026-03-02 01:00"),
        ("on March 5th at 3pm", "0 15 5 3 *", "2026-03-05 15:00"),
        ("march 5 at 15:00", "0 15 5 3 *", "2026-03-05 15:00"),
        ("on the 5th of march at 3pm", "0 15 5 3 *", "2026-03-05 15:00"),
        ("on 5 mar at 3pm", "0 15 5 3 *", "2026-03-05 15:00"),
        ("on December 24th, 2026 at 6pm", "0 18 24 12 *", "2026-12-24 18:00"),
        ("at 3pm on march 5th", "0 15 5 3 *", "2026-03-05 15:00"),
        ("on February 5th at 3pm", "0 15 5 2 *", "2027-02-05 15:00"),
        ("on March 1st at 10:15", "15 10 1 3 *", "2027-03-01 10:15"),
        ("on February 29th at 9am", "0 9 29 2 *", "2028-02-29 09:00"),
        ("at 3pm", "0 15 1 3 *", "2026-03-01 15:00"),
        ("at 9am", "0 9 2 3 *", "2026-03-02 09:00"),
        ("at 10:15", "15 10 2 3 *", "2026-03-02 10:15"),
        ("at noon", "0 12 1 3 *", "2026-03-01 12:00"),
        ("at midnight", "0 0 2 3 *", "2026-03-02 00:00"),
        ("at 9am tomorrow", "0 9 2 3 *", "2026-03-02 09:00"),
        ("2026-12-24T18:00", "0 18 24 12 *", "2026-12-24 18:00"),
        ("2026-12-24 18:00", "0 18 24 12 *", "2026-12-24 18:00"),
        ("2026-12-24T18:00:00", "0 18 24 12 *", "2026-12-24 18:00"),
        ("2026-12-24T17:00Z", "0 18 24 12 *", "2026-12-24 18:00"),
        ("2026-12-24T18:00+01:00", "0 18 24 12 *", "2026-12-24 18:00"),
    ],
)
def test_it_parses_oneshots(text: str, cron_expr: str, first_run: str):
    schedule = parse_schedule(text, now=NOW, tz=BERLIN)
    assert schedule == Schedule(cron_expr, is_oneshot=True)
    assert next_run(schedule.cron_expr, NOW, BERLIN) == berlin(first_run)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Enter a schedule"),
        ("   ", "Enter a schedule"),
        ("x" * 201, "at most 200 characters"),
        ("never", 'Could not understand "never" as a schedule. Try e.g. "every weekday at 9am"'),
        ("every blue moon", 'Could not understand "every blue moon"'),
        ("@daily", 'Could not understand "@daily"'),
        ("every weekday at 9am summarise my todos", "Could not understand"),
        ("every 0m", '"every 0m": the interval must be at least 1 minute'),
        ("every 0 hours", "the interval must be at least 1 hour"),
        ("every 90 seconds", "schedules run at most once a minute"),
        (
            "every 45m",
            "Use a number of minutes that divides 60 (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30)",
        ),
        ("every 90 minutes", "Use a number of minutes that divides 60"),
        ("every 5 hours", "Use a number of hours that divides 24 (1, 2, 3, 4, 6, 8, 12)"),
        ("every 300 minutes", "Use a number of hours that divides 24"),
        ("every 48 hours", "Use a number of hours that divides 24"),
        ("every 2 days", "cannot repeat every few days or weeks"),
        ("every 2 weeks", "cannot repeat every few days or weeks"),
        ("daily at 25:00", '"25:00" is not a valid time: hours go from 0 to 23'),
        ("daily at 9:75", '"9:75" is not a valid time: minutes go from 00 to 59'),
        ("daily at 13pm", '"13pm" is not a valid time: with am/pm the hour goes from 1 to 12'),
        ("daily at 0am", '"0am" is not a valid time'),
        ("every day at 9am and 5:30pm", "the times must all have the same minutes"),
        ("every monday", 'Say at what time, e.g. "every monday at 9am"'),
        ("weekdays", 'Say at what time, e.g. "weekdays at 9am"'),
        ("tomorrow", 'Say at what time, e.g. "tomorrow at 9am"'),
        ("tomorrow at 9am and 5pm", "A one-time schedule takes a single time"),
        ("on March 5th", 'Say at what time, e.g. "on March 5 at 3pm"'),
        ("on February 30th", "February has no day 30"),
        ("on February 30th at 9am", "February has no day 30"),
        ("on April 31 at 9am", "April has no day 31"),
        ("on February 29th, 2027 at 9am", "February 29, 2027 does not exist"),
        ("today at 9am", "2026-03-01 09:00 is in the past (it is now 2026-03-01 10:15)"),
        ("today at 10:15", "is in the past"),
        ("on March 1st, 2026 at 9am", "2026-03-01 09:00 is in the past"),
        ("2026-01-01T10:00", "2026-01-01 10:00 is in the past"),
        ("2026-02-30 10:00", '"2026-02-30 10:00" is not a valid date and time'),
        ("in 0 minutes", '"in 0 minutes" is not in the future'),
        ("in 30 seconds", "schedules have minute precision"),
        ("in 400 days", "2027-04-05 11:15 is too far ahead"),
        ("2027-06-01 10:00", "a one-time schedule must fall within the next year"),
        ("* * * * * *", "has 6 fields, but a cron expression needs exactly 5"),
        ("0 9 * *", "has 4 fields"),
        ("61 * * * *", '"61 * * * *" is not a valid cron expression (minute 0-59'),
        ("0 24 * * *", "is not a valid cron expression"),
        ("*/0 * * * *", "is not a valid cron expression"),
        ("0 9 * * 8", "is not a valid cron expression"),
        ("0 0 30 2 *", '"0 0 30 2 *" never runs'),
    ],
)
def test_it_rejects_with_a_message(text: str, message: str):
    with pytest.raises(ScheduleError, match=re.escape(message)):
        parse_schedule(text, now=NOW, tz=BERLIN)


def test_it_raises_a_value_error():
    with pytest.raises(ValueError):
        parse_schedule("never", now=NOW, tz=BERLIN)


@pytest.mark.parametrize(
    ("tz", "cron_expr"),
    [
        (BERLIN, "35 10 1 3 *"),
        ("Europe/Berlin", "35 10 1 3 *"),
        ("America/New_York", "35 4 1 3 *"),
        ("UTC", "35 9 1 3 *"),
    ],
)
def test_it_encodes_oneshots_in_the_tasks_time_zone(tz: ZoneInfo | str, cron_expr: str):
    assert parse_schedule("in 20 minutes", now=NOW, tz=tz).cron_expr == cron_expr


def test_it_defaults_to_the_current_time_zone_and_time(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(timezone, "now", lambda: NOW.astimezone(UTC))
    with timezone.override("America/New_York"):
        assert parse_schedule("in 20 minutes") == Schedule("35 4 1 3 *", is_oneshot=True)


def test_it_rejects_an_unknown_time_zone():
    with pytest.raises(ScheduleError, match='Unknown time zone "Mars/Olympus"'):
        parse_schedule("daily", now=NOW, tz="Mars/Olympus")


def test_it_refuses_a_naive_now():
    with pytest.raises(ValueError, match="needs a time zone"):
        parse_schedule("in 20 minutes", now=datetime(2026, 3, 1, 10, 15), tz=BERLIN)


@pytest.mark.parametrize(
    ("text", "now", "cron_expr", "first_run"),
    [
        # Elapsed time: two hours after 01:30 CET is 04:30 CEST.
        ("in 2 hours", "2026-03-29 01:30", "30 4 29 3 *", "2026-03-29T04:30+02:00"),
        # 02:30 happens twice on October 25th; a one-shot takes the first.
        ("tomorrow at 2:30", "2026-10-24 12:00", "30 2 25 10 *", "2026-10-25T02:30+02:00"),
    ],
)
def test_it_places_oneshots_across_clock_changes(
    text: str, now: str, cron_expr: str, first_run: str
):
    schedule = parse_schedule(text, now=berlin(now), tz=BERLIN)
    assert schedule == Schedule(cron_expr, is_oneshot=True)
    assert next_run(cron_expr, berlin(now), BERLIN).isoformat(timespec="minutes") == first_run


def test_it_rejects_a_oneshot_in_the_skipped_hour():
    with pytest.raises(ScheduleError, match="02:30 does not exist on 2026-03-29 in Europe/Berlin"):
        parse_schedule("tomorrow at 2:30", now=berlin("2026-03-28 12:00"), tz=BERLIN)


@pytest.mark.parametrize(
    ("cron_expr", "now", "runs"),
    [
        (
            "0 9 * * 1-5",
            "2026-03-01 10:15",
            ["2026-03-02T09:00+01:00", "2026-03-03T09:00+01:00", "2026-03-04T09:00+01:00"],
        ),
        (
            "15 10 * * *",  # strictly after now, even on the minute
            "2026-03-01 10:15",
            ["2026-03-02T10:15+01:00", "2026-03-03T10:15+01:00", "2026-03-04T10:15+01:00"],
        ),
        (
            # 02:30 does not exist on March 29th: that run happens when the clocks jump.
            "30 2 * * *",
            "2026-03-28 12:00",
            ["2026-03-29T03:00+02:00", "2026-03-30T02:30+02:00", "2026-03-31T02:30+02:00"],
        ),
        (
            # 02:30 happens twice on October 25th: a daily run happens once.
            "30 2 * * *",
            "2026-10-24 12:00",
            ["2026-10-25T02:30+02:00", "2026-10-26T02:30+01:00", "2026-10-27T02:30+01:00"],
        ),
        (
            # An hourly run keeps its pace through the repeated hour.
            "0 * * * *",
            "2026-10-25 01:30",
            ["2026-10-25T02:00+02:00", "2026-10-25T02:00+01:00", "2026-10-25T03:00+01:00"],
        ),
        (
            "0 * * * *",
            "2026-03-29 01:30",
            ["2026-03-29T03:00+02:00", "2026-03-29T04:00+02:00", "2026-03-29T05:00+02:00"],
        ),
        (
            "35 10 1 3 *",
            "2026-03-01 10:15",
            ["2026-03-01T10:35+01:00", "2027-03-01T10:35+01:00", "2028-03-01T10:35+01:00"],
        ),
    ],
)
def test_it_lists_the_next_runs(cron_expr: str, now: str, runs: list[str]):
    # Compared as text: an aware time in a repeated hour never equals one in another zone.
    assert [
        run.isoformat(timespec="minutes")
        for run in next_runs(cron_expr, now=berlin(now), tz=BERLIN)
    ] == runs


@pytest.mark.parametrize("cron_expr", ["30 2 * * *", "0 2 * * *", "0,30 2,3 * * *", "0 1-4 * * *"])
@pytest.mark.parametrize("now", ["2026-03-28 12:00", "2026-10-24 12:00"])
def test_it_never_runs_a_fixed_time_twice_or_at_a_time_that_does_not_exist(
    cron_expr: str, now: str
):
    runs = next_runs(cron_expr, count=12, now=berlin(now), tz="Europe/Berlin")
    for run in runs:
        assert run.tzinfo == BERLIN
        assert run.astimezone(UTC).astimezone(BERLIN).replace(tzinfo=None) == run.replace(
            tzinfo=None
        )
    assert runs == sorted(runs, key=lambda run: run.astimezone(UTC))
    wall_times = [run.replace(tzinfo=None) for run in runs]
    assert len(set(wall_times)) == len(wall_times)


def test_it_lists_runs_from_the_current_time_by_default():
    runs = next_runs("* * * * *", count=2, tz="UTC")
    assert timezone.now() < runs[0] < runs[1]


@pytest.mark.parametrize(
    ("cron_expr", "message"),
    [
        ("* * * * * *", "has 6 fields"),
        ("0 25 * * *", "is not a valid cron expression"),
        ("0 0 31 4 *", "never runs"),
    ],
)
def test_it_refuses_to_compute_runs_of_a_bad_expression(cron_expr: str, message: str):
    with pytest.raises(ScheduleError, match=re.escape(message)):
        next_run(cron_expr, NOW, BERLIN)


@pytest.mark.parametrize(
    ("text", "schedule", "remainder"),
    [
        (
            "every weekday at 9am summarise my open todos",
            "every weekday at 9am",
            "summarise my open todos",
        ),
        (
            "every weekday at 9am and 5pm check the build",
            "every weekday at 9am and 5pm",
            "check the build",
        ),
        ("every day at 9am: check mail", "every day at 9am", "check mail"),
        ("daily at 9am - check mail", "daily at 9am", "check mail"),
        ("every 15 minutes ping the server", "every 15 minutes", "ping the server"),
        ("in 2 days remind me to call Bob", "in 2 days", "remind me to call Bob"),
        ("tomorrow at 9am, water the plants", "tomorrow at 9am", "water the plants"),
        ("at 3pm call mom", "at 3pm", "call mom"),
        ("daily at 9 and then some", "daily at 9", "and then some"),
        ("daily at 9 amend the doc", "daily at 9", "amend the doc"),
        ("every weekday at 5 p.m. lock up", "every weekday at 5 p.m", "lock up"),
        ("0 9 * * 1-5 summarise\nmy todos", "0 9 * * 1-5", "summarise\nmy todos"),
        ("every weekday at 9am", "every weekday at 9am", ""),
        # A schedule with a bad value still ends the phrase, so parsing it explains the problem.
        ("daily at 25:00 do it", "daily at 25:00", "do it"),
        ("every 45 minutes check mail", "every 45 minutes", "check mail"),
    ],
)
def test_it_splits_a_leading_schedule_from_a_prompt(text: str, schedule: str, remainder: str):
    assert split_schedule(text) == (schedule, remainder)


def test_it_says_when_a_prompt_starts_with_no_schedule():
    with pytest.raises(ScheduleError, match='at the start of "summarise my todos every day"'):
        split_schedule("summarise my todos every day")
