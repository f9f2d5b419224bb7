"""The scheduled tasks page: the list, the live preview, creating and the actions."""

from __future__ import annotations

from datetime import datetime

import pytest
from django.test import Client
from django.urls import reverse

from memory.models import Event
from scheduler import due_tasks
from scheduler.models import ScheduledTask
from scheduler.planning import MAX_PROMPT_CHARS
from sessions_app.models import Session
from tests.support.records import BERLIN, FRIDAY, MONDAY_9, make_task, take_queued_tasks
from tests.support.scripted_llm import Reply
from tests.support.web import ESCAPED, HTMX, XSS, text

# The page and the live preview -------------------------------------------------


def test_it_lists_the_users_tasks_on_a_full_page(alice_client, alice):
    make_task(alice, "Morning report", last_run_at=FRIDAY)
    make_task(alice, "From config", source=ScheduledTask.Source.CONFIG, is_trusted=True)
    response = alice_client.get(reverse("task-list"))
    assert response.status_code == 200
    page = text(response)
    assert "<html" in page and 'href="/tasks/"' in page  # the nav links the page
    assert "Morning report" in page
    assert "every weekday at 9am" in page and "0 9 * * 1-5" in page
    assert "Mon 8 Jun, 09:00 CEST" in page  # the next run, in the task's zone
    assert "Fri 5 Jun, 10:00" in page  # the last run
    assert "From config.toml: read-only" in page
    assert "Trusted" in page


def test_it_returns_only_the_list_to_htmx(alice_client, alice):
    make_task(alice)
    response = alice_client.get(reverse("task-list"), **HTMX)
    assert "<html" not in text(response)
    assert "Report" in text(response)


def test_it_previews_a_schedule_with_its_next_three_runs(alice_client, berlin_friday):
    response = alice_client.get(
        reverse("task-preview"), {"schedule": "every weekday at 9am"}, **HTMX
    )
    page = text(response)
    assert "<html" not in page
    assert "0 9 * * 1-5" in page
    assert "Europe/Berlin" in page
    assert page.count("<li>") == 3
    for day in ["Mon 8 Jun 2026, 09:00", "Tue 9 Jun 2026, 09:00", "Wed 10 Jun 2026, 09:00"]:
        assert day in page


def test_it_previews_a_oneshot_with_its_one_run(alice_client, berlin_friday):
    page = text(alice_client.get(reverse("task-preview"), {"schedule": "tomorrow at 9am"}))
    assert "once" in page
    assert page.count("<li>") == 1
    assert "Sat 6 Jun 2026, 09:00" in page


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("never", "Could not understand &quot;never&quot; as a schedule"),
        ("daily at 25:00", "is not a valid time: hours go from 0 to 23"),
    ],
)
def test_it_previews_why_a_schedule_cannot_run(alice_client, schedule, message):
    page = text(alice_client.get(reverse("task-preview"), {"schedule": schedule}, **HTMX))
    assert message in page
    assert "<li>" not in page


def test_it_escapes_the_schedule_in_the_preview(alice_client):
    page = text(alice_client.get(reverse("task-preview"), {"schedule": XSS}))
    assert XSS not in page
    assert ESCAPED in page


# Creating ----------------------------------------------------------------------


def create(client: Client, htmx: bool = True, **fields: str):
    data = {"schedule": "every weekday at 9am", "prompt": "summarise my open todos", **fields}
    return client.post(reverse("task-list"), data, **(HTMX if htmx else {}))


def test_it_creates_a_task_from_natural_language(alice_client, alice, berlin_friday):
    response = create(alice_client, name="Todos")
    page = text(response)
    assert "<html" not in page
    assert "Created “Todos”" in page
    task = ScheduledTask.objects.get(owner=alice)
    assert (task.name, task.cron_expr, task.original_schedule) == (
        "Todos",
        "0 9 * * 1-5",
        "every weekday at 9am",
    )
    assert task.source == ScheduledTask.Source.TOOL
    assert task.next_run_at == MONDAY_9
    assert f'id="task-{task.pk}"' in page
    assert "Mon 8 Jun, 09:00 CEST" in page


def test_it_names_a_task_after_its_prompt_when_no_name_is_given(alice_client, alice):
    create(alice_client)
    assert ScheduledTask.objects.get(owner=alice).name == "summarise my open todos"


def test_it_redirects_a_plain_create_back_to_the_page(alice_client, alice):
    response = create(alice_client, htmx=False, name="Todos")
    assert response.status_code == 302
    assert ScheduledTask.objects.owned_by(alice).count() == 1
    assert "Created &quot;Todos&quot;" in text(alice_client.get(reverse("task-list")))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"prompt": "x" * (MAX_PROMPT_CHARS + 1)}, "a task&#x27;s prompt can be at most 8,000"),
        ({"prompt": "   "}, "The prompt is empty"),
        ({"name": "n" * 201}, "A task name can be at most 200 characters"),
        ({"schedule": "never"}, "Could not understand &quot;never&quot; as a schedule"),
        ({"schedule": "daily at 25:00"}, "hours go from 0 to 23"),
        ({"schedule": ""}, "Enter a schedule"),
    ],
)
def test_it_refuses_bad_input_and_saves_nothing(alice_client, alice, fields, message):
    response = create(alice_client, **fields)
    assert response.status_code == 200
    assert message in text(response)
    assert not ScheduledTask.objects.exists()


def test_it_refuses_a_duplicate_name(alice_client, alice):
    make_task(alice, "Todos")
    page = text(create(alice_client, name="Todos"))
    assert "You already have a task named &quot;Todos&quot;" in page
    assert ScheduledTask.objects.count() == 1


def test_it_keeps_what_was_typed_after_an_error(alice_client):
    page = text(create(alice_client, schedule="daily at 25:00", name="Keep me"))
    assert 'value="daily at 25:00"' in page
    assert "Keep me" in page
    assert "summarise my open todos" in page


# Actions -----------------------------------------------------------------------


def test_it_pauses_and_resumes_a_task(alice_client, alice, berlin_friday):
    task = make_task(alice, next_run_at=datetime(2026, 6, 1, 9, 0, tzinfo=BERLIN))
    page = text(alice_client.post(reverse("task-pause", args=[task.pk]), **HTMX))
    assert page.lstrip().startswith('<tr id="task-')
    assert "Paused" in page and "Resume" in page
    task.refresh_from_db()
    assert task.is_paused

    page = text(alice_client.post(reverse("task-resume", args=[task.pk]), **HTMX))
    assert "Resumed" in page and "Pause" in page
    task.refresh_from_db()
    assert not task.is_paused
    assert task.next_run_at == MONDAY_9  # from now on, not the run missed while paused


def test_it_redirects_plain_actions_back_to_the_page(alice_client, alice):
    task = make_task(alice)
    response = alice_client.post(reverse("task-pause", args=[task.pk]))
    assert response.status_code == 302
    assert "Paused: it will not run" in text(alice_client.get(reverse("task-list")))


@pytest.mark.django_db(transaction=True)
def test_it_runs_a_task_now_in_a_worker_and_answers_in_its_cron_chat(alice_client, alice, llm):
    take_queued_tasks()
    task = make_task(alice, is_paused=True)
    page = text(alice_client.post(reverse("task-run", args=[task.pk]), **HTMX))
    assert f"Running now: the answer will appear in the chat cron:{task.pk}" in page
    assert f'href="/chat/cron:{task.pk}/"' in page
    [queued] = take_queued_tasks()  # queued for the cluster, not run in the request
    assert queued["args"] == (str(task.pk),)

    llm.script(Reply(text="You have 3 open todos."))
    run = due_tasks.run_now(str(task.pk))  # what the worker calls
    assert run is not None and run.status == "completed"
    session = Session.objects.get(key=f"cron:{task.pk}")
    answers = Event.objects.filter(session_id=str(session.pk), event_type="assistant_response")
    assert [event.data["content"] for event in answers] == ["You have 3 open todos."]
    task.refresh_from_db()
    assert task.last_run_at is not None
    assert task.next_run_at == MONDAY_9  # the schedule is unchanged


def test_it_says_so_when_a_run_cannot_be_queued(alice_client, alice, monkeypatch):
    task = make_task(alice)

    def broker_down(task: ScheduledTask) -> None:
        raise ConnectionError("redis is down")

    monkeypatch.setattr(due_tasks, "queue_run_now", broker_down)
    page = text(alice_client.post(reverse("task-run", args=[task.pk]), **HTMX))
    assert "Could not start the run (ConnectionError); try again." in page


def test_it_asks_before_deleting_a_task(alice_client, alice):
    task = make_task(alice)
    confirm = text(alice_client.get(reverse("task-delete", args=[task.pk]), **HTMX))
    assert "Delete “<strong>Report</strong>”?" in confirm
    assert "<html" not in confirm
    assert ScheduledTask.objects.filter(pk=task.pk).exists()

    cancelled = text(alice_client.get(reverse("task-row", args=[task.pk]), **HTMX))
    assert "Run now" in cancelled

    full = alice_client.get(reverse("task-delete", args=[task.pk]))
    assert "<html" in text(full) and "Delete a scheduled task" in text(full)

    response = alice_client.post(reverse("task-delete", args=[task.pk]), **HTMX)
    assert response.status_code == 200 and text(response) == ""
    assert not ScheduledTask.objects.filter(pk=task.pk).exists()


def test_it_deletes_with_a_plain_request_and_redirects(alice_client, alice):
    task = make_task(alice)
    response = alice_client.post(reverse("task-delete", args=[task.pk]))
    assert response.status_code == 302
    assert not ScheduledTask.objects.exists()


@pytest.mark.parametrize("action", ["task-pause", "task-resume", "task-delete"])
def test_it_refuses_to_change_a_config_task(alice_client, alice, action):
    task = make_task(alice, source=ScheduledTask.Source.CONFIG, is_paused=action == "task-resume")
    page = text(alice_client.post(reverse(action, args=[task.pk]), **HTMX))
    assert "comes from config.toml ([[scheduled_tasks]])" in page
    after = ScheduledTask.objects.get(pk=task.pk)
    assert after.is_paused == task.is_paused


def test_it_offers_no_changes_for_a_config_task(alice_client, alice):
    task = make_task(alice, source=ScheduledTask.Source.CONFIG)
    page = text(alice_client.get(reverse("task-list")))
    assert reverse("task-pause", args=[task.pk]) not in page
    assert reverse("task-delete", args=[task.pk]) not in page
    assert "comes from config.toml" in text(
        alice_client.get(reverse("task-delete", args=[task.pk]), **HTMX)
    )


def test_it_escapes_task_names_and_prompts(alice_client, alice):
    make_task(alice, XSS, prompt=XSS)
    page = text(alice_client.get(reverse("task-list")))
    assert XSS not in page
    assert ESCAPED in page


# Another user's ----------------------------------------------------------------


def test_it_shows_nobody_elses_tasks(alice, bob_client):
    make_task(alice, "Alice's secret report", prompt="alice-only prompt")
    for response in [
        bob_client.get(reverse("task-list")),
        bob_client.get(reverse("task-list"), **HTMX),
    ]:
        assert "secret report" not in text(response)
        assert "alice-only" not in text(response)
        assert "No scheduled tasks yet" in text(response)


@pytest.mark.parametrize(
    ("method", "action"),
    [
        ("get", "task-row"),
        ("post", "task-pause"),
        ("post", "task-resume"),
        ("post", "task-run"),
        ("get", "task-delete"),
        ("post", "task-delete"),
    ],
)
def test_it_answers_404_for_someone_elses_task(alice, bob_client, method, action):
    take_queued_tasks()
    task = make_task(alice, is_paused=action == "task-resume")
    response = getattr(bob_client, method)(reverse(action, args=[task.pk]), **HTMX)
    assert response.status_code == 404
    assert "Report" not in text(response)
    after = ScheduledTask.objects.get(pk=task.pk)
    assert (after.is_paused, after.last_run_at) == (task.is_paused, None)
    assert take_queued_tasks() == []


def test_it_lets_two_users_use_the_same_task_name(alice_client, bob_client, alice, bob):
    make_task(alice, "Todos")
    create(bob_client, name="Todos")
    assert ScheduledTask.objects.owned_by(bob).filter(name="Todos").exists()


@pytest.mark.parametrize("name", ["task-list", "task-preview"])
def test_it_sends_anonymous_visitors_to_log_in(client, alice, name):
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]
