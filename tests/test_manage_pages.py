"""The management pages: scheduled tasks, facts, macros and terminal prefixes."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from agent.macros import hint
from agent.models import TerminalAllowedPrefix
from memory.models import Event, Fact, Macro
from scheduler import runner
from scheduler.models import ScheduledTask
from scheduler.planning import MAX_PROMPT_CHARS
from sessions_app.models import Agent, Session
from tests.helpers import allow_terminal, take_queued_tasks
from tests.scripted_llm import Reply

BERLIN = ZoneInfo("Europe/Berlin")
FRIDAY = datetime(2026, 6, 5, 10, 0, tzinfo=BERLIN)
MONDAY_9 = datetime(2026, 6, 8, 9, 0, tzinfo=BERLIN)
XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def berlin_friday(configure, monkeypatch):
    """The server's zone is Berlin and it is Friday 10:00 there."""
    configure("server", time_zone="Europe/Berlin")
    monkeypatch.setattr("django.utils.timezone.now", lambda: FRIDAY)


def make_task(owner: User, name: str = "Report", **fields: Any) -> ScheduledTask:
    values: dict[str, Any] = {
        "cron_expr": "0 9 * * 1-5",
        "original_schedule": "every weekday at 9am",
        "prompt": "summarise my open todos",
        "time_zone": "Europe/Berlin",
        "next_run_at": MONDAY_9,
        "agent": Agent.objects.default_for(owner),
        **fields,
    }
    return ScheduledTask.objects.create(owner=owner, name=name, **values)


def text(response) -> str:
    return response.content.decode()


# Tasks: the page and the live preview ------------------------------------------


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


# Tasks: creating ---------------------------------------------------------------


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


# Tasks: actions ----------------------------------------------------------------


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
    run = runner.run_now(str(task.pk))  # what the worker calls
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

    monkeypatch.setattr(runner, "queue_run_now", broker_down)
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


# Tasks: another user's --------------------------------------------------------


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


# Facts -------------------------------------------------------------------------


def make_fact(owner: User, category: str = "preference", key: str = "color", **fields: Any) -> Fact:
    values = {"value": "green", "source": Fact.Source.AGENT, **fields}
    return Fact.objects.create(owner=owner, category=category, key=key, **values)


def test_it_lists_facts_on_a_full_page_linked_from_memory_search(alice_client, alice):
    make_fact(alice, value="dark green")
    page = text(alice_client.get(reverse("fact-list")))
    assert "<html" in page and "dark green" in page and "Agent" in page
    search_page = text(alice_client.get(reverse("memory-search")))
    assert reverse("fact-list") in search_page and reverse("macro-list") in search_page


def test_it_searches_facts_for_htmx(alice_client, alice):
    make_fact(alice, "person", "dentist", value="Dr. Molar, Tuesdays")
    make_fact(alice, "preference", "color", value="green")
    page = text(alice_client.get(reverse("fact-list"), {"q": "molar"}, **HTMX))
    assert "<html" not in page and "Add a fact" not in page
    assert "Dr. Molar" in page and "green" not in page
    assert "No facts match “nothing-like-this”" in text(
        alice_client.get(reverse("fact-list"), {"q": "nothing-like-this"}, **HTMX)
    )


def test_it_adds_a_fact_as_the_users(alice_client, alice):
    data = {"category": " Person ", "key": "Dentist", "value": "Dr. Molar"}
    page = text(alice_client.post(reverse("fact-list"), data, **HTMX))
    assert "<html" not in page
    assert "Added person/dentist." in page
    fact = Fact.objects.get(owner=alice)
    assert (fact.category, fact.key, fact.value, fact.source) == (
        "person",
        "dentist",
        "Dr. Molar",
        Fact.Source.USER,
    )
    assert f'id="fact-{fact.pk}"' in page


def test_it_offers_to_edit_the_existing_fact_instead_of_a_duplicate(alice_client, alice):
    existing = make_fact(alice, value="green")
    data = {"category": "preference", "key": "color", "value": "blue"}
    page = text(alice_client.post(reverse("fact-list"), data, **HTMX))
    assert "You already have a fact preference/color." in page
    assert "Edit the existing one" in page
    assert f'hx-get="{reverse("fact-edit", args=[existing.pk])}"' in page
    assert f'hx-target="#fact-{existing.pk}"' in page
    assert list(Fact.objects.values_list("value", flat=True)) == ["green"]


def test_it_reports_a_fact_another_tab_added_after_the_check(alice_client, alice, monkeypatch):
    from memory.forms import FactForm

    checked = FactForm.clean

    def clean_then_race(form: FactForm) -> dict[str, Any]:
        cleaned = checked(form)  # no duplicate yet; the agent adds one before the save
        make_fact(alice, value="green")
        return cleaned

    monkeypatch.setattr(FactForm, "clean", clean_then_race)
    data = {"category": "preference", "key": "color", "value": "blue"}
    response = alice_client.post(reverse("fact-list"), data, **HTMX)
    assert response.status_code == 200
    assert "You already have a fact preference/color." in text(response)
    assert list(Fact.objects.values_list("value", flat=True)) == ["green"]


def test_it_refuses_an_empty_or_too_long_fact(alice_client, alice):
    page = text(alice_client.post(reverse("fact-list"), {"category": "a", "key": "b"}, **HTMX))
    assert "Value: This field is required." in page
    data = {"category": "a", "key": "b", "value": "x" * 4001}
    page = text(alice_client.post(reverse("fact-list"), data, **HTMX))
    assert "A fact can be at most 4,000 characters" in page
    assert not Fact.objects.exists()


def test_it_edits_a_fact_inline(alice_client, alice):
    fact = make_fact(alice)
    form = text(alice_client.get(reverse("fact-edit", args=[fact.pk]), **HTMX))
    assert form.lstrip().startswith(f'<tr id="fact-{fact.pk}" class="editing">')
    assert 'name="value"' in form and "green" in form

    data = {"category": "preference", "key": "color", "value": "teal"}
    row = text(alice_client.post(reverse("fact-edit", args=[fact.pk]), data, **HTMX))
    assert row.lstrip().startswith(f'<tr id="fact-{fact.pk}">')
    assert "teal" in row and "Edit" in row
    fact.refresh_from_db()
    assert (fact.value, fact.source) == ("teal", Fact.Source.USER)

    cancelled = text(alice_client.get(reverse("fact-row", args=[fact.pk]), **HTMX))
    assert "teal" in cancelled and "editing" not in cancelled


def test_it_keeps_an_edit_that_would_duplicate_another_fact_unsaved(alice_client, alice):
    make_fact(alice, key="color")
    fact = make_fact(alice, key="food", value="pasta")
    data = {"category": "preference", "key": "color", "value": "pasta"}
    page = text(alice_client.post(reverse("fact-edit", args=[fact.pk]), data, **HTMX))
    assert "You already have a fact preference/color." in page
    fact.refresh_from_db()
    assert fact.key == "food"


def test_it_edits_a_fact_on_its_own_page_without_htmx(alice_client, alice):
    fact = make_fact(alice)
    assert "Edit a fact" in text(alice_client.get(reverse("fact-edit", args=[fact.pk])))
    data = {"category": "preference", "key": "color", "value": "red"}
    assert alice_client.post(reverse("fact-edit", args=[fact.pk]), data).status_code == 302
    fact.refresh_from_db()
    assert fact.value == "red"


def test_it_deletes_a_fact_after_confirmation(alice_client, alice):
    fact = make_fact(alice)
    assert "hx-confirm=" in text(alice_client.get(reverse("fact-list")))
    response = alice_client.post(reverse("fact-delete", args=[fact.pk]), **HTMX)
    assert response.status_code == 200 and text(response) == ""
    assert not Fact.objects.exists()


def test_it_escapes_fact_values(alice_client, alice):
    make_fact(alice, value=XSS)
    page = text(alice_client.get(reverse("fact-list")))
    assert XSS not in page and ESCAPED in page


def test_it_shows_nobody_elses_facts(alice, bob_client):
    make_fact(alice, value="alice-only secret")
    for page in [
        text(bob_client.get(reverse("fact-list"))),
        text(bob_client.get(reverse("fact-list"), {"q": "secret"}, **HTMX)),
    ]:
        assert "alice-only" not in page


def test_it_lets_two_users_have_the_same_fact_key(alice, bob, bob_client):
    make_fact(alice)
    data = {"category": "preference", "key": "color", "value": "blue"}
    page = text(bob_client.post(reverse("fact-list"), data, **HTMX))
    assert "Added preference/color." in page
    assert "green" not in page  # neither alice's value nor an offer to edit it


@pytest.mark.parametrize(
    ("method", "action"),
    [("get", "fact-row"), ("get", "fact-edit"), ("post", "fact-edit"), ("post", "fact-delete")],
)
def test_it_answers_404_for_someone_elses_fact(alice, bob_client, method, action):
    fact = make_fact(alice, value="alice-only")
    data = {"category": "preference", "key": "color", "value": "bob was here"}
    response = getattr(bob_client, method)(reverse(action, args=[fact.pk]), data, **HTMX)
    assert response.status_code == 404
    assert "alice-only" not in text(response)
    assert Fact.objects.get(pk=fact.pk).value == "alice-only"


# Macros ------------------------------------------------------------------------


def make_macro(owner: User, trigger: str = "search_memory", **fields: Any) -> Macro:
    values = {"next_tool": "remember_fact", "confidence": 0.9, "used_count": 7, **fields}
    return Macro.objects.create(owner=owner, trigger_tool=trigger, **values)


def test_it_lists_macros_with_their_confidence_and_uses(alice_client, alice):
    make_macro(alice, "terminal", trigger_args_pattern="git status", next_tool="read_file")
    page = text(alice_client.get(reverse("macro-list")))
    assert "<html" in page
    for shown in ["terminal", "git status", "read_file", "90%", ">7<", "Active"]:
        assert shown in page
    assert "<html" not in text(alice_client.get(reverse("macro-list"), **HTMX))


def test_it_disables_and_enables_a_macro_and_hint_ignores_it(alice_client, alice, configure):
    configure("macros", hint_confidence=0.5, min_uses=1)
    macro = make_macro(alice)
    assert hint(alice, "search_memory", {}) is not None

    row = text(alice_client.post(reverse("macro-disable", args=[macro.pk]), **HTMX))
    assert "Disabled" in row and "Enable" in row and 'class="disabled"' in row
    macro.refresh_from_db()
    assert macro.is_disabled
    assert hint(alice, "search_memory", {}) is None

    row = text(alice_client.post(reverse("macro-enable", args=[macro.pk]), **HTMX))
    assert "Disable" in row
    assert hint(alice, "search_memory", {}) is not None


def test_it_deletes_a_macro(alice_client, alice):
    macro = make_macro(alice)
    response = alice_client.post(reverse("macro-delete", args=[macro.pk]), **HTMX)
    assert response.status_code == 200 and text(response) == ""
    assert not Macro.objects.exists()
    assert alice_client.post(reverse("macro-delete", args=[macro.pk])).status_code == 404


def test_it_escapes_macro_tool_names(alice_client, alice):
    make_macro(alice, XSS, trigger_args_pattern=XSS, next_tool=XSS)
    page = text(alice_client.get(reverse("macro-list")))
    assert XSS not in page and ESCAPED in page


@pytest.mark.parametrize("action", ["macro-disable", "macro-enable", "macro-delete"])
def test_it_answers_404_for_someone_elses_macro(alice, bob_client, action):
    macro = make_macro(alice, "alice_only_tool", is_disabled=action == "macro-enable")
    response = bob_client.post(reverse(action, args=[macro.pk]), **HTMX)
    assert response.status_code == 404
    assert Macro.objects.get(pk=macro.pk).is_disabled == macro.is_disabled
    assert "alice_only_tool" not in text(bob_client.get(reverse("macro-list")))


# Terminal allowed prefixes -----------------------------------------------------


def test_it_lists_and_revokes_terminal_prefixes(alice_client, alice):
    allowed = TerminalAllowedPrefix.objects.create(owner=alice, prefix="git status")
    page = text(alice_client.get(reverse("terminal-prefixes")))
    assert "<html" in page and "git status" in page and "hx-confirm=" in page
    assert reverse("terminal-prefixes") in text(alice_client.get(reverse("api-tokens")))
    assert "<html" not in text(alice_client.get(reverse("terminal-prefixes"), **HTMX))

    response = alice_client.post(reverse("terminal-prefix-revoke", args=[allowed.pk]), **HTMX)
    assert response.status_code == 200 and text(response) == ""
    assert not TerminalAllowedPrefix.objects.exists()
    assert "No command is always allowed" in text(alice_client.get(reverse("terminal-prefixes")))


def test_it_revokes_a_prefix_without_htmx(alice_client, alice):
    allowed = TerminalAllowedPrefix.objects.create(owner=alice, prefix="ls")
    response = alice_client.post(reverse("terminal-prefix-revoke", args=[allowed.pk]))
    assert response.status_code == 302
    assert "Revoked “ls”" in text(alice_client.get(reverse("terminal-prefixes")))


def test_it_lets_only_a_user_with_the_permission_switch_on_an_imported_prefix(alice_client, alice):
    imported = TerminalAllowedPrefix.objects.create(owner=alice, prefix="git log", active=False)
    url = reverse("terminal-prefix-activate", args=[imported.pk])
    page = text(alice_client.get(reverse("terminal-prefixes")))
    assert "not yet switched on" in page and url not in page
    alice_client.post(url)
    imported.refresh_from_db()
    assert not imported.active
    allow_terminal(alice)
    assert url in text(alice_client.get(reverse("terminal-prefixes")))
    assert alice_client.post(url).status_code == 302
    imported.refresh_from_db()
    assert imported.active


def test_it_answers_404_to_switching_on_someone_elses_prefix(alice, bob, bob_client):
    imported = TerminalAllowedPrefix.objects.create(owner=alice, prefix="ls", active=False)
    allow_terminal(bob)
    response = bob_client.post(reverse("terminal-prefix-activate", args=[imported.pk]))
    assert response.status_code == 404
    imported.refresh_from_db()
    assert not imported.active


def test_it_warns_on_the_approvals_page_when_the_sandbox_is_off(alice_client, configure):
    configure("terminal", enabled=True)
    assert "sandbox is off" not in text(alice_client.get(reverse("terminal-prefixes")))
    configure("terminal", enabled=True, sandbox="none")
    assert "sandbox is off" in text(alice_client.get(reverse("terminal-prefixes")))


def test_it_escapes_prefixes(alice_client, alice):
    TerminalAllowedPrefix.objects.create(owner=alice, prefix=XSS)
    page = text(alice_client.get(reverse("terminal-prefixes")))
    assert XSS not in page and ESCAPED in page


def test_it_keeps_each_users_prefixes_apart(alice, bob_client):
    allowed = TerminalAllowedPrefix.objects.create(owner=alice, prefix="alice-only-cmd")
    assert "alice-only-cmd" not in text(bob_client.get(reverse("terminal-prefixes")))
    response = bob_client.post(reverse("terminal-prefix-revoke", args=[allowed.pk]), **HTMX)
    assert response.status_code == 404
    assert TerminalAllowedPrefix.objects.filter(pk=allowed.pk).exists()


# Every page needs a login ------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["task-list", "task-preview", "fact-list", "macro-list", "terminal-prefixes"]
)
def test_it_sends_anonymous_visitors_to_log_in(client, alice, name):
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]
