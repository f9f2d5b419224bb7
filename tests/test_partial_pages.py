"""Pages that htmx updates: a plain request gets the whole page, an htmx request
only the part it swaps, without the page's chrome (core.htmx)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from importers.models import ImportJob
from memory.workspace import DEFAULT_AGENT, workspace_dir
from tests.support.records import make_fact, make_task
from tests.support.web import HTMX, text

CHROME = '<header class="topbar">'


def make_memory_file(owner: User) -> str:
    workspace = workspace_dir(owner.pk, DEFAULT_AGENT)
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "MEMORY.md").write_text("Prefers tea.\n")
    return f"{reverse('memory-file')}?path=MEMORY.md"


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
    "mcp servers": Page(
        lambda user: reverse("mcp-servers"), "No MCP servers yet.", '<div id="mcp-servers">'
    ),
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
    "memory search": Page(
        lambda user: f"{reverse('memory-search')}?q=tea",
        "Nothing in your memory matches that.",
        'placeholder="What did I say about…"',
    ),
    "memory file": Page(make_memory_file, "Prefers tea.", '<div id="editor">'),
    "facts": Page(lambda user: reverse("fact-list"), "No facts yet.", "Add a fact"),
    "fact edit": Page(
        lambda user: reverse("fact-edit", args=[make_fact(user).pk]),
        'name="value"',
        "Edit a fact",
    ),
    "macros": Page(lambda user: reverse("macro-list"), "No macros yet.", '<div id="macros">'),
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


def test_it_answers_htmx_with_the_form_in_place_of_the_facts_row(alice, alice_client):
    fact = make_fact(alice)
    row = text(alice_client.get(reverse("fact-edit", args=[fact.pk]), **HTMX))
    assert row.lstrip().startswith(f'<tr id="fact-{fact.pk}" class="editing">')
    assert "<tr" not in text(alice_client.get(reverse("fact-edit", args=[fact.pk])))


def test_it_answers_htmx_adding_a_fact_with_the_form_and_the_rows(alice_client):
    data = {"category": "drink", "key": "morning", "value": "tea"}
    partial = text(alice_client.post(reverse("fact-list"), data, **HTMX))
    assert "Added drink/morning." in partial and "Add a fact" in partial
    assert '<div id="fact-results">' in partial and '<div id="facts">' not in partial
    assert "<html" not in partial and CHROME not in partial
