"""Scheduled tasks: the agent's tools, the runner and the tasks of config.toml."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django_q.models import Schedule

from agent.models import ApprovalRequest
from agent.tools import ToolError, available_tools, get_tool
from core.history import Actor
from memory.models import Event, EventType
from scheduler import due_tasks
from scheduler.config_sync import SyncError, sync_config_tasks
from scheduler.due_tasks import run_due_tasks
from scheduler.models import ScheduledTask
from scheduler.planning import MAX_PROMPT_CHARS, TaskError
from sessions_app.models import Agent, Session
from tests.support.records import BERLIN, FRIDAY, MONDAY_9, allow_terminal, config_task, make_task
from tests.support.scripted_llm import Reply, reply_with_tool
from tests.support.tools import context_for, use_tool
from tests.support.websocket import ignore

TUESDAY_9 = datetime(2026, 6, 9, 9, 0, tzinfo=BERLIN)


@pytest.fixture
def berlin(configure):
    configure("server", time_zone="Europe/Berlin")


@pytest.fixture
def frozen(monkeypatch):
    """Fix the clock the tools read."""

    def freeze(moment: datetime) -> None:
        monkeypatch.setattr("django.utils.timezone.now", lambda: moment)

    return freeze


def cron_events(task_id: Any) -> list[Event]:
    session = Session.objects.get(key=f"cron:{task_id}", status=Session.Status.ACTIVE)
    return list(Event.objects.filter(session_id=str(session.pk)).order_by("id"))


def texts(events: list[Event], event_type: str) -> list[str]:
    return [event.data.get("content", "") for event in events if event.event_type == event_type]


# The "Done when" ------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_it_schedules_summarise_my_todos_and_runs_it_at_the_right_minute(
    alice, llm, berlin, frozen, monkeypatch
):
    frozen(FRIDAY)
    answer = use_tool(
        alice, "schedule_task", schedule="every weekday at 9am", prompt="summarise my open todos"
    )
    monkeypatch.undo()  # the clock runs again; the runner gets its time passed in
    task = ScheduledTask.objects.get(owner=alice)
    assert task.source == ScheduledTask.Source.TOOL
    assert (task.cron_expr, task.is_oneshot, task.time_zone) == (
        "0 9 * * 1-5",
        False,
        "Europe/Berlin",
    )
    assert "cron `0 9 * * 1-5` (recurring, Europe/Berlin)" in answer
    assert (
        "Mon 2026-06-08 09:00 CEST, Tue 2026-06-09 09:00 CEST, Wed 2026-06-10 09:00 CEST" in answer
    )

    assert run_due_tasks(now=datetime(2026, 6, 8, 8, 59, tzinfo=BERLIN)).runs == []

    llm.script(Reply(text="You have 2 open todos: taxes and the dentist."))
    report = run_due_tasks(now=MONDAY_9)
    assert [(run.name, run.status) for run in report.runs] == [(task.name, "completed")]
    events = cron_events(task.pk)
    assert texts(events, EventType.USER_MESSAGE) == ["summarise my open todos"]
    assert texts(events, EventType.ASSISTANT_RESPONSE) == [
        "You have 2 open todos: taxes and the dentist."
    ]
    task.refresh_from_db()
    assert task.last_run_at == MONDAY_9
    assert task.next_run_at == TUESDAY_9

    assert run_due_tasks(now=MONDAY_9.replace(second=30)).runs == []
    assert len(llm.requests) == 1


@pytest.mark.django_db(transaction=True)
def test_it_shows_the_cron_run_in_the_owners_chat_sidebar(alice, llm):
    from sessions_app.chat import sidebar_chats

    task = make_task(alice)
    llm.script(Reply(text="Done."))
    run_due_tasks(now=MONDAY_9)
    assert [chat.key for chat in sidebar_chats(alice)] == [f"cron:{task.pk}"]
    assert sidebar_chats(alice)[0].title == "Report"


# The runner ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_it_runs_missed_runs_once_after_downtime(alice, llm):
    task = make_task(alice)
    llm.script(Reply(text="Caught up."))
    thursday_noon = datetime(2026, 6, 11, 12, 0, tzinfo=BERLIN)
    assert len(run_due_tasks(now=thursday_noon).runs) == 1
    task.refresh_from_db()
    assert task.next_run_at == datetime(2026, 6, 12, 9, 0, tzinfo=BERLIN)
    assert run_due_tasks(now=thursday_noon.replace(minute=1)).runs == []


@pytest.mark.django_db(transaction=True)
def test_it_deletes_a_oneshot_after_its_run_and_keeps_its_answer(alice, llm):
    task = make_task(alice, cron_expr="30 14 8 6 *", is_oneshot=True)
    llm.script(Reply(text="Reminder sent."))
    assert run_due_tasks(now=MONDAY_9).runs[0].status == "completed"
    assert not ScheduledTask.objects.filter(pk=task.pk).exists()
    assert texts(cron_events(task.pk), EventType.ASSISTANT_RESPONSE) == ["Reminder sent."]


@pytest.mark.django_db(transaction=True)
def test_it_does_not_run_paused_tasks(alice, llm):
    make_task(alice, is_paused=True)
    assert run_due_tasks(now=TUESDAY_9).runs == []
    assert llm.requests == []


@pytest.mark.django_db(transaction=True)
def test_it_runs_a_task_once_when_two_clusters_claim_it(alice, llm):
    task = make_task(alice)
    llm.script(Reply(text="Once."), Reply(text="Twice?"))
    start = threading.Barrier(2)
    reports: list[due_tasks.RunReport] = []

    def cluster() -> None:
        try:
            start.wait()
            reports.append(run_due_tasks(now=MONDAY_9))
        finally:
            connection.close()

    threads = [threading.Thread(target=cluster) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(len(report.runs) for report in reports) == [0, 1]
    assert texts(cron_events(task.pk), EventType.USER_MESSAGE) == ["summarise my open todos"]


@pytest.mark.django_db(transaction=True)
def test_it_runs_a_trusted_tasks_command_without_approval(alice, llm, configure):
    configure("terminal", enabled=True)
    task = make_task(allow_terminal(alice), is_trusted=True)
    llm.script(reply_with_tool("terminal", {"command": "echo trusted-run"}), Reply(text="Ran."))
    assert run_due_tasks(now=MONDAY_9).runs[0].status == "completed"
    results = texts(cron_events(task.pk), EventType.TOOL_RESULT)
    assert results == ["exit code 0\ntrusted-run\n"]
    assert not ApprovalRequest.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_it_runs_no_trusted_command_once_the_permission_is_gone(alice, llm, configure):
    configure("terminal", enabled=True)
    task = make_task(alice, is_trusted=True)
    llm.script(reply_with_tool("terminal", {"command": "echo trusted-run"}), Reply(text="No."))
    assert run_due_tasks(now=MONDAY_9).runs[0].status == "completed"
    [result] = texts(cron_events(task.pk), EventType.TOOL_RESULT)
    assert "needs the permission" in result and "trusted-run" not in result


@pytest.mark.django_db(transaction=True)
def test_it_asks_the_owner_instead_of_blocking_on_an_untrusted_command(alice, llm, configure):
    configure("terminal", enabled=True, approval_timeout_seconds=300.0)
    task = make_task(allow_terminal(alice))
    llm.script(reply_with_tool("terminal", {"command": "echo hi"}), Reply(text="Could not run."))
    started = time.monotonic()
    assert run_due_tasks(now=MONDAY_9).runs[0].status == "completed"
    assert time.monotonic() - started < 60  # not the 300 s a watched chat would wait
    events = cron_events(task.pk)
    request = ApprovalRequest.objects.get(owner=alice)
    assert (request.command, request.status) == ("echo hi", ApprovalRequest.Status.PENDING)
    assert request.session_id == str(events[0].session_id)
    assert "it was not run" in texts(events, EventType.TOOL_RESULT)[0]
    [notice] = [e for e in events if e.data.get("kind") == "approval_needed"]
    assert "`echo hi`" in notice.text and "Allow always" in notice.text


@pytest.mark.django_db(transaction=True)
def test_it_records_a_failing_task_and_runs_the_next(alice, bob, llm):
    failing = make_task(alice, next_run_at=MONDAY_9.replace(minute=0))
    working = make_task(bob, next_run_at=MONDAY_9.replace(minute=1))
    llm.script(Reply(status=400, error="model is down"), Reply(text="Fine here."))
    report = run_due_tasks(now=MONDAY_9.replace(minute=5))
    assert [run.status for run in report.runs] == ["error", "completed"]
    assert texts(cron_events(failing.pk), EventType.ERROR)
    assert texts(cron_events(working.pk), EventType.ASSISTANT_RESPONSE) == ["Fine here."]
    failing.refresh_from_db()
    assert failing.last_run_at is not None and failing.next_run_at > MONDAY_9


@pytest.mark.django_db(transaction=True)
def test_it_survives_an_unexpected_exception(alice, bob, llm, monkeypatch):
    broken = make_task(alice)
    make_task(bob)
    real_session = due_tasks.cron_session
    calls = []

    def flaky(task: ScheduledTask) -> Session:
        calls.append(task.pk)
        if task.pk == broken.pk and len(calls) == 1:
            raise RuntimeError("disk on fire")
        return real_session(task)

    monkeypatch.setattr(due_tasks, "cron_session", flaky)
    llm.script(Reply(text="Fine."))
    report = run_due_tasks(now=MONDAY_9)
    assert sorted(run.status for run in report.runs) == ["completed", "failed"]
    failed = next(run for run in report.runs if run.status == "failed")
    assert "disk on fire" in failed.detail
    error = Event.objects.get(owner=alice, event_type=EventType.ERROR)
    assert error.data["kind"] == "task_failed" and error.task_id == str(broken.pk)


@pytest.mark.django_db(transaction=True)
def test_it_runs_a_task_whose_agent_was_deleted_with_the_default_agent(alice, llm):
    helper = Agent.objects.create(owner=alice, name="helper")
    task = make_task(alice, agent=helper)
    helper.delete()
    llm.script(Reply(text="Still here."))
    assert run_due_tasks(now=MONDAY_9).runs[0].status == "completed"
    task.refresh_from_db()
    assert task.agent.name == "main"
    events = cron_events(task.pk)
    [note] = [e for e in events if e.data.get("kind") == "agent_replaced"]
    assert 'runs with your default agent "main"' in note.text
    assert texts(events, EventType.ASSISTANT_RESPONSE) == ["Still here."]


@pytest.mark.django_db(transaction=True)
def test_it_pauses_a_task_whose_schedule_can_never_run(alice):
    task = make_task(alice, cron_expr="0 9 30 2 *")
    assert run_due_tasks(now=MONDAY_9).runs == []
    task.refresh_from_db()
    assert task.is_paused
    [error] = texts(cron_events(task.pk), EventType.ERROR)
    assert "never runs" in error


@pytest.mark.django_db(transaction=True)
def test_it_prints_what_ran(alice, llm, capsys):
    make_task(alice, next_run_at=datetime(2020, 1, 1, tzinfo=BERLIN))
    llm.script(Reply(text="Done."))
    call_command("run_due_tasks")
    out = capsys.readouterr().out
    assert 'ran 1 task(s).\n- "Report" (alice, ' in out and "completed: Done." in out
    call_command("run_due_tasks")
    assert "no tasks were due" in capsys.readouterr().out


def test_it_is_scheduled_every_minute(db):
    schedule = Schedule.objects.get(name=due_tasks.SCHEDULE_NAME)
    assert (schedule.func, schedule.minutes) == ("scheduler.due_tasks.run_due_tasks", 1)


# The tools -----------------------------------------------------------------------


def test_it_offers_the_scheduling_tools_to_the_agent(db):
    names = {tool.name for tool in available_tools()}
    assert {"schedule_task", "list_tasks", "pause_task", "resume_task", "cancel_task"} <= names


def test_it_schedules_a_oneshot_and_names_it(alice, berlin, frozen):
    frozen(FRIDAY)
    answer = use_tool(
        alice, "schedule_task", schedule="in 20 minutes", prompt="stretch", name="Break"
    )
    task = ScheduledTask.objects.get(owner=alice, name="Break")
    assert task.is_oneshot and task.next_run_at == FRIDAY.replace(minute=20)
    assert "(one-time, Europe/Berlin). Runs at: Fri 2026-06-05 10:20 CEST." in answer


@pytest.mark.parametrize(
    "schedule, message",
    [
        ("never", 'Could not understand "never" as a schedule'),
        ("every 0m", "the interval must be at least 1 minute"),
        ("daily at 25:00", '"25:00" is not a valid time'),
        ("0 9 30 2 *", "never runs"),
    ],
)
def test_it_refuses_bad_schedules(alice, schedule, message):
    with pytest.raises(ToolError, match=message):
        use_tool(alice, "schedule_task", schedule=schedule, prompt="do it")
    assert not ScheduledTask.objects.exists()


def test_it_refuses_a_prompt_over_the_limit(alice):
    tool = get_tool("schedule_task")
    too_long = "x" * (MAX_PROMPT_CHARS + 1)
    with pytest.raises(ToolError, match="'prompt' is longer than 8000"):
        use_tool(alice, "schedule_task", schedule="daily", prompt=too_long)
    with pytest.raises(ToolError, match="can be at most 8,000"):
        tool.run(context_for(alice), {"schedule": "daily", "prompt": too_long})
    assert not ScheduledTask.objects.exists()


def test_it_refuses_a_duplicate_name(alice):
    use_tool(alice, "schedule_task", schedule="daily", prompt="a", name="Daily")
    with pytest.raises(ToolError, match='already have a task named "Daily"'):
        use_tool(alice, "schedule_task", schedule="hourly", prompt="b", name="Daily")


def test_it_lists_pauses_resumes_and_cancels_by_name_or_id(alice, berlin, frozen):
    frozen(FRIDAY)
    use_tool(alice, "schedule_task", schedule="every weekday at 9am", prompt="todos", name="Todos")
    task = ScheduledTask.objects.get(owner=alice)
    assert '- "Todos" (id ' in use_tool(alice, "list_tasks")
    assert use_tool(alice, "pause_task", task="Todos") == f'Paused "Todos" (id {task.pk}).'
    assert "paused" in use_tool(alice, "list_tasks")
    frozen(datetime(2026, 6, 10, 12, 0, tzinfo=BERLIN))
    use_tool(alice, "resume_task", task=str(task.pk))
    task.refresh_from_db()
    # From now on, not at once for the runs missed while paused.
    assert not task.is_paused and task.next_run_at == datetime(2026, 6, 11, 9, tzinfo=BERLIN)
    assert use_tool(alice, "cancel_task", task="Todos") == f'Cancelled "Todos" (id {task.pk}).'
    assert not ScheduledTask.objects.exists()
    assert use_tool(alice, "list_tasks") == "There are no scheduled tasks."


@pytest.mark.parametrize("tool", ["pause_task", "resume_task", "cancel_task"])
def test_it_does_not_find_someone_elses_task(alice, bob, tool):
    task = make_task(bob)
    for reference in (str(task.pk), task.name):
        with pytest.raises(ToolError, match="You have no scheduled task"):
            use_tool(alice, tool, task=reference)
    task.refresh_from_db()
    assert not task.is_paused


@pytest.mark.parametrize("tool", ["pause_task", "resume_task", "cancel_task"])
def test_it_refuses_to_change_a_config_task(alice, tool):
    task = make_task(alice, source=ScheduledTask.Source.CONFIG)
    with pytest.raises(ToolError, match=r"comes from config.toml \(\[\[scheduled_tasks\]\]\)"):
        use_tool(alice, tool, task="Report")
    assert ScheduledTask.objects.get(pk=task.pk).is_paused is False


# The task's own behaviour (ScheduledTask and its queryset) ------------------------


def test_it_creates_a_task_untrusted_with_its_first_run(alice, berlin):
    task, planned = ScheduledTask.objects.create_task(
        alice, "every weekday at 9am", " todos ", actor=Actor.user(alice), now=FRIDAY
    )
    assert (task.name, task.prompt, task.source) == ("todos", "todos", ScheduledTask.Source.TOOL)
    assert task.next_run_at == planned.runs[0] == MONDAY_9
    assert not task.is_trusted and task.agent == Agent.objects.default_for(alice)


def test_it_finds_a_task_by_id_or_name_among_the_owners_own(alice, bob):
    task = make_task(alice)
    make_task(bob)
    owned = ScheduledTask.objects.owned_by(alice)
    assert owned.find(str(task.pk)) == owned.find(" Report ") == task
    with pytest.raises(TaskError, match='no scheduled task "Other"'):
        owned.find("Other")
    with pytest.raises(TaskError, match="no scheduled task"):
        ScheduledTask.objects.owned_by(bob).find(str(task.pk))


def test_it_resumes_from_the_next_slot_after_now(alice):
    task = make_task(alice, is_paused=True)
    task.resume(actor=Actor.user(alice), now=datetime(2026, 6, 10, 12, 0, tzinfo=BERLIN))
    task.refresh_from_db()
    assert not task.is_paused and task.next_run_at == datetime(2026, 6, 11, 9, tzinfo=BERLIN)


def test_it_resumes_a_oneshot_at_its_own_time(alice):
    task = make_task(alice, is_oneshot=True, is_paused=True)
    task.resume(actor=Actor.user(alice), now=datetime(2026, 6, 10, 12, 0, tzinfo=BERLIN))
    task.refresh_from_db()
    assert not task.is_paused and task.next_run_at == MONDAY_9  # passed: runs once


def test_it_keeps_a_task_paused_when_its_schedule_cannot_run_again(alice):
    task = make_task(alice, cron_expr="0 9 30 2 *", is_paused=True)
    with pytest.raises(TaskError, match='"Report" cannot run again'):
        task.resume(actor=Actor.user(alice), now=FRIDAY)
    assert ScheduledTask.objects.get(pk=task.pk).is_paused


def test_it_edits_the_schedule_and_prompt_and_moves_the_next_run(alice, berlin):
    task = make_task(alice)
    task.edit("daily at 14:30", "water the plants", actor=Actor.user(alice), now=FRIDAY)
    task.refresh_from_db()
    assert (task.cron_expr, task.original_schedule, task.prompt) == (
        "30 14 * * *",
        "daily at 14:30",
        "water the plants",
    )
    assert task.next_run_at == FRIDAY.replace(hour=14, minute=30)


def test_it_changes_nothing_on_a_bad_edit(alice):
    task = make_task(alice)
    with pytest.raises(TaskError, match="never runs"):
        task.edit("0 9 30 2 *", "water the plants", actor=Actor.user(alice))
    with pytest.raises(TaskError, match="The prompt is empty"):
        task.edit("daily", "  ", actor=Actor.user(alice))
    assert ScheduledTask.objects.get(pk=task.pk).prompt == "summarise my open todos"


@pytest.mark.parametrize(
    "change",
    [
        lambda task, actor: task.edit("daily", "other", actor=actor),
        lambda task, actor: task.pause(actor=actor),
        lambda task, actor: task.resume(actor=actor),
        lambda task, actor: task.cancel(actor=actor),
    ],
)
def test_it_leaves_a_config_task_to_config_toml(alice, change):
    task = make_task(alice, source=ScheduledTask.Source.CONFIG, is_paused=True)
    with pytest.raises(TaskError, match=r"comes from config\.toml"):
        change(task, Actor.user(alice))
    kept = ScheduledTask.objects.get(pk=task.pk)
    assert (kept.is_paused, kept.prompt) == (True, "summarise my open todos")


def test_it_guards_a_trusted_tasks_prompt_and_agent_with_its_trust(alice):
    assert make_task(alice).trust_fields() == ["is_trusted"]
    trusted = make_task(alice, "Trusted", is_trusted=True)
    assert trusted.trust_fields() == ["is_trusted", "prompt", "agent"]


@pytest.mark.django_db(transaction=True)
def test_it_lets_the_agent_schedule_a_task_in_a_chat(alice, llm):
    from asgiref.sync import async_to_sync

    from sessions_app.chat import start_chat
    from tests.support.chat_turns import converse

    session = start_chat(alice)
    llm.script(
        reply_with_tool(
            "schedule_task", {"schedule": "every weekday at 9am", "prompt": "summarise my todos"}
        ),
        Reply(text="Scheduled."),
    )

    async_to_sync(converse)(session, "every weekday at 9am summarise my todos", ignore)
    task = ScheduledTask.objects.get(owner=alice)
    assert (task.cron_expr, task.agent.name, task.prompt) == (
        "0 9 * * 1-5",
        "main",
        "summarise my todos",
    )
    [result] = texts(list(Event.objects.filter(owner=alice)), EventType.TOOL_RESULT)
    assert result.startswith('Scheduled "summarise my todos" (id ')


# Config tasks ----------------------------------------------------------------------


def test_it_creates_updates_and_removes_config_tasks(alice, bob, berlin):
    report = sync_config_tasks([config_task(), config_task(name="Backup", owner="bob")], now=FRIDAY)
    assert (report.created, report.updated, report.deleted) == (["Morning brief", "Backup"], [], [])
    brief = ScheduledTask.objects.get(owner=alice)
    assert (brief.source, brief.cron_expr, brief.time_zone) == (
        "config",
        "0 7 * * *",
        "Europe/Berlin",
    )
    assert brief.next_run_at == datetime(2026, 6, 6, 7, tzinfo=BERLIN)
    make_task(alice, name="Mine")  # a tool task is never touched by the sync

    unchanged = sync_config_tasks(
        [config_task(), config_task(name="Backup", owner="bob")], now=FRIDAY
    )
    assert (unchanged.created, unchanged.updated, unchanged.deleted) == ([], [], [])

    changed = [
        config_task(schedule="daily at 8am", prompt="brief me well", trusted=True, agent="work")
    ]
    report = sync_config_tasks(changed, now=FRIDAY)
    assert (report.created, report.updated, report.deleted) == ([], ["Morning brief"], ["Backup"])
    brief.refresh_from_db()
    assert (brief.cron_expr, brief.prompt, brief.is_trusted, brief.agent.name) == (
        "0 8 * * *",
        "brief me well",
        True,
        "work",
    )
    assert brief.next_run_at == datetime(2026, 6, 6, 8, tzinfo=BERLIN)
    assert set(ScheduledTask.objects.values_list("name", flat=True)) == {"Morning brief", "Mine"}


def test_it_keeps_the_next_run_when_only_the_prompt_changes(alice):
    sync_config_tasks([config_task()], now=FRIDAY)
    due = datetime(2026, 6, 1, 7, tzinfo=BERLIN)
    ScheduledTask.objects.update(next_run_at=due)
    sync_config_tasks([config_task(prompt="brief me again")], now=FRIDAY)
    assert ScheduledTask.objects.get().next_run_at == due


@pytest.mark.parametrize(
    "bad, message",
    [
        (config_task(name="Ghost", owner="nobody"), '#2 "Ghost": there is no user "nobody"'),
        (config_task(name="Broken", schedule="never"), '#2 "Broken": Could not understand "never"'),
        (config_task(name="Once", schedule="tomorrow at 9am"), '#2 "Once": .* runs only once'),
        (config_task(name="Long", prompt="x" * 9000), '#2 "Long": The prompt is 9,000 characters'),
        (config_task(agent="bad agent"), "agent 'bad agent' must be"),
        (config_task(), '"Morning brief" appears twice for alice'),
    ],
)
def test_it_applies_nothing_from_a_bad_config(alice, bad, message):
    sync_config_tasks([config_task(name="Old")], now=FRIDAY)
    with pytest.raises(SyncError, match=message):
        sync_config_tasks([config_task(), bad], now=FRIDAY)
    assert list(ScheduledTask.objects.values_list("name", flat=True)) == ["Old"]


def test_it_syncs_from_the_command_and_explains_errors(alice, settings, capsys):
    settings.NEOTASK = {**settings.NEOTASK, "scheduled_tasks": [config_task()]}
    call_command("sync_scheduled_tasks")
    assert "created 1 (Morning brief)" in capsys.readouterr().out
    settings.NEOTASK = {**settings.NEOTASK, "scheduled_tasks": [config_task(owner="nobody")]}
    with pytest.raises(CommandError, match=r'configuration error: .*no user "nobody"'):
        call_command("sync_scheduled_tasks")
    assert ScheduledTask.objects.count() == 1
