"""Pages that htmx updates: a plain request gets the whole page, an htmx request
only the part it swaps, without the page's chrome (neotask_site.htmx)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone

from neotask_site.models import ImportJob
from scheduler.models import ScheduledTask
from sessions_app.models import Agent
from tests.helpers import HTMX, text

CHROME = '<header class="topbar">'


def make_task(owner: User) -> ScheduledTask:
    return ScheduledTask.objects.create(
        owner=owner,
        name="Report",
        cron_expr="0 9 * * 1-5",
        original_schedule="every weekday at 9am",
        prompt="summarise my open todos",
        next_run_at=timezone.now(),
        agent=Agent.objects.default_for(owner),
    )


@dataclass(frozen=True)
class Page:
    url: Callable[[User], str]
    fragment: str  # in both answers
    page_only: str  # only in the whole page: what surrounds the part htmx swaps


PAGES = {
    "tasks": Page(lambda user: reverse("task-list"), "New task", '<div id="tasks">'),
    "task delete": Page(
        lambda user: reverse("task-delete", args=[make_task(user).pk]),
        "It will not run again",
        "Delete a scheduled task",
    ),
    "terminal prefixes": Page(
        lambda user: reverse("terminal-prefixes"),
        "No command is always allowed",
        '<div id="prefixes">',
    ),
    "api tokens": Page(lambda user: reverse("api-tokens"), "Create token", '<div id="tokens">'),
    "session cleanup": Page(
        lambda user: reverse("session-cleanup"), "Nothing to clean up", '<div id="cleanup"'
    ),
    "import job": Page(
        lambda user: reverse(
            "import-job", args=[ImportJob.objects.create(owner=user, kind="aidaemon").pk]
        ),
        'class="card import-job"',
        "Import something else",
    ),
}


@pytest.mark.parametrize("name", PAGES)
def test_it_answers_htmx_with_the_part_it_swaps(alice, alice_client, name):
    page = PAGES[name]
    partial = text(alice_client.get(page.url(alice), **HTMX))
    assert page.fragment in partial
    assert page.page_only not in partial
    assert "<html" not in partial and CHROME not in partial


@pytest.mark.parametrize("name", PAGES)
def test_it_answers_a_plain_request_with_the_whole_page(alice, alice_client, name):
    page = PAGES[name]
    whole = text(alice_client.get(page.url(alice)))
    assert page.fragment in whole and page.page_only in whole
    assert "<html" in whole and CHROME in whole


def test_it_answers_htmx_with_the_confirmation_row_in_place_of_the_tasks_row(alice, alice_client):
    task = make_task(alice)
    row = text(alice_client.get(reverse("task-delete", args=[task.pk]), **HTMX))
    assert row.lstrip().startswith(f'<tr id="task-{task.pk}" class="confirm-row">')
    assert "<tr" not in text(alice_client.get(reverse("task-delete", args=[task.pk])))
