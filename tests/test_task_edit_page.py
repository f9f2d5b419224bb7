"""Editing a task's schedule and prompt from the tasks page, in place of its row."""

from __future__ import annotations

from datetime import datetime

import pytest
from django.urls import reverse

from scheduler.models import ScheduledTask
from tests.support.records import BERLIN, make_task
from tests.support.web import HTMX, text


def edit(client, task, **fields):
    data = {"schedule": "every day at 7pm", "prompt": "water the plants", **fields}
    return client.post(reverse("task-edit", args=[task.pk]), data, **HTMX)


def test_it_offers_an_edit_on_each_row_it_may_change(alice_client, alice):
    mine = make_task(alice)
    config = make_task(alice, "From config", source=ScheduledTask.Source.CONFIG)
    page = text(alice_client.get(reverse("task-list")))
    assert reverse("task-edit", args=[mine.pk]) in page
    assert reverse("task-edit", args=[config.pk]) not in page


def test_it_shows_the_form_in_place_of_the_row_with_the_preview(alice_client, alice, berlin_friday):
    task = make_task(alice)
    page = text(alice_client.get(reverse("task-edit", args=[task.pk]), **HTMX))
    assert "<html" not in page
    assert f'<tr id="task-{task.pk}" class="editing">' in page
    assert 'value="every weekday at 9am"' in page and "summarise my open todos" in page
    # The live preview of the schedule as it stands, with its own ids.
    assert f'hx-target="#schedule-preview-{task.pk}"' in page
    assert "<code>0 9 * * 1-5</code>" in page and "Mon 8 Jun 2026, 09:00" in page
    assert f'id="id_prompt-{task.pk}"' in page


def test_it_shows_the_form_as_a_page_without_htmx(alice_client, alice):
    task = make_task(alice)
    page = text(alice_client.get(reverse("task-edit", args=[task.pk])))
    assert "<html" in page and "Edit a scheduled task" in page


def test_it_saves_the_schedule_and_prompt_and_recomputes_the_next_run(
    alice_client, alice, berlin_friday
):
    task = make_task(alice, next_run_at=datetime(2026, 6, 8, 9, 0, tzinfo=BERLIN))
    page = text(edit(alice_client, task))
    assert f'<tr id="task-{task.pk}">' in page and "Saved &quot;Report&quot;" in page
    assert "every day at 7pm" in page and "water the plants" in page
    task.refresh_from_db()
    assert (task.original_schedule, task.cron_expr) == ("every day at 7pm", "0 19 * * *")
    assert task.prompt == "water the plants"
    assert task.next_run_at == datetime(2026, 6, 5, 19, 0, tzinfo=BERLIN)  # today, not Monday


def test_it_redirects_a_plain_save_back_to_the_page(alice_client, alice):
    task = make_task(alice)
    response = alice_client.post(
        reverse("task-edit", args=[task.pk]), {"schedule": "every hour", "prompt": "tick"}
    )
    assert response.status_code == 302 and response["Location"] == reverse("task-list")
    task.refresh_from_db()
    assert task.cron_expr == "0 * * * *"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"schedule": "never"}, "Could not understand &quot;never&quot; as a schedule"),
        ({"schedule": "daily at 25:00"}, "hours go from 0 to 23"),
        ({"schedule": ""}, "Enter a schedule"),
        ({"prompt": "   "}, "The prompt is empty"),
    ],
)
def test_it_refuses_bad_input_inline_and_changes_nothing(alice_client, alice, fields, message):
    task = make_task(alice)
    page = text(edit(alice_client, task, **fields))
    assert message in page
    assert 'class="editing"' in page  # still the form, with what was typed
    if fields.get("schedule"):
        assert f'value="{fields["schedule"]}"' in page
    after = ScheduledTask.objects.get(pk=task.pk)
    assert (after.original_schedule, after.prompt, after.next_run_at) == (
        task.original_schedule,
        task.prompt,
        task.next_run_at,
    )


def test_it_refuses_to_edit_a_config_task(alice_client, alice):
    task = make_task(alice, source=ScheduledTask.Source.CONFIG)
    page = text(edit(alice_client, task))
    assert "comes from config.toml ([[scheduled_tasks]])" in page
    assert ScheduledTask.objects.get(pk=task.pk).prompt == task.prompt


@pytest.mark.parametrize("method", ["get", "post"])
def test_it_answers_404_for_someone_elses_task(alice, bob_client, method):
    task = make_task(alice)
    data = {"schedule": "every hour", "prompt": "bob was here"}
    call = getattr(bob_client, method)
    response = call(reverse("task-edit", args=[task.pk]), *([data] if method == "post" else []))
    assert response.status_code == 404
    assert "summarise" not in text(response)
    assert ScheduledTask.objects.get(pk=task.pk).prompt == task.prompt
