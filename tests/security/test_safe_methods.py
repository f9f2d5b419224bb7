"""A GET creates nothing: no row and no file or folder, for the owner on her own
data, for a new user with none, and for the chat socket's connect. (A page
another site links to, a prefetch or a crawler then changes nothing.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.apps import apps
from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.auth.tokens import default_token_generator
from django.test import Client
from django.urls import reverse

from monitoring.counters import HEALTH_WRITES
from monitoring.models import Counter
from sessions_app import chat
from tests.support.records import take_queued_tasks
from tests.support.web import HTMX, client_for, project_urls, uid
from tests.support.websocket import communicator
from tests.support.world import World

# URL name → the GETs tried on it for a user (their own ids where it takes one);
# POST-only URLs are listed with none.
GETS: dict[str, Callable[[World], list[str]]] = {
    "setup": lambda w: ["/setup/"],
    "healthz": lambda w: ["/healthz"],
    "metrics": lambda w: ["/metrics"],
    "web-manifest": lambda w: ["/manifest.webmanifest"],
    "login": lambda w: ["/accounts/login/"],
    "logout": lambda w: [],
    "oidc_authentication_init": lambda w: ["/accounts/oidc/start/"],
    "oidc_authentication_callback": lambda w: ["/accounts/oidc/callback/?code=c&state=s"],
    "password_change": lambda w: ["/accounts/password_change/"],
    "password_change_done": lambda w: ["/accounts/password_change/done/"],
    "password_reset": lambda w: ["/accounts/password_reset/"],
    "password_reset_done": lambda w: ["/accounts/password_reset/done/"],
    "password_reset_confirm": lambda w: [
        f"/accounts/reset/{uid(w.user)}/{default_token_generator.make_token(w.user)}/"
    ],
    "password_reset_complete": lambda w: ["/accounts/reset/done/"],
    "memory-search": lambda w: ["/memory/", "/memory/?q=lake+house", "/memory/?q=key"],
    "memory-files": lambda w: ["/memory/files/", "/memory/files/?agent=main"],
    "memory-file": lambda w: ["/memory/files/view/?path=MEMORY.md"],
    "memory-file-new": lambda w: ["/memory/files/new/"],
    "memory-file-delete": lambda w: ["/memory/files/delete/?path=MEMORY.md"],
    "memory-document-upload": lambda w: ["/memory/files/upload/"],
    "fact-list": lambda w: ["/memory/facts/", "/memory/facts/?q=home"],
    "fact-row": lambda w: [reverse("fact-row", args=[w.fact.pk])],
    "fact-edit": lambda w: [reverse("fact-edit", args=[w.fact.pk])],
    "fact-delete": lambda w: [],
    "forget": lambda w: [
        f"/memory/forget/?subject=fact:{w.fact.pk}",
        f"/memory/forget/?subject=event:{w.answer.pk}",
    ],
    "macro-list": lambda w: ["/memory/macros/"],
    "macro-disable": lambda w: [],
    "macro-enable": lambda w: [],
    "macro-delete": lambda w: [],
    "task-list": lambda w: ["/tasks/"],
    "task-preview": lambda w: ["/tasks/preview/?schedule=daily+at+9am"],
    "task-row": lambda w: [reverse("task-row", args=[w.task.pk])],
    "task-pause": lambda w: [],
    "task-resume": lambda w: [],
    "task-run": lambda w: [],
    "task-delete": lambda w: [reverse("task-delete", args=[w.task.pk])],
    "task-edit": lambda w: [reverse("task-edit", args=[w.task.pk])],
    "terminal-prefixes": lambda w: ["/settings/terminal/"],
    "terminal-prefix-revoke": lambda w: [],
    "terminal-prefix-activate": lambda w: [],
    "mcp-servers": lambda w: ["/settings/mcp/"],
    "mcp-server-test": lambda w: [],
    "mcp-server-delete": lambda w: [],
    "mcp-call-revoke": lambda w: [],
    "home": lambda w: ["/"],
    "user-add": lambda w: ["/settings/users/add/"],
    "chat-new": lambda w: [],
    "agent-list": lambda w: ["/agents/"],
    "agent-edit": lambda w: [reverse("agent-edit", args=[w.agent.pk])],
    "agent-rename": lambda w: [],
    "chat-sidebar": lambda w: [f"/chat/sidebar/?current={w.chat.key}", "/chat/sidebar/?q=lake"],
    "chat": lambda w: [reverse("chat", args=[w.chat.key]), reverse("chat", args=[w.cron.key])],
    "chat-approval": lambda w: [],
    "chat-events": lambda w: [reverse("chat-events", args=[w.chat.key]) + "?after=0"],
    "session-list": lambda w: ["/sessions/"],
    "session-detail": lambda w: [reverse("session-detail", args=[w.archived.pk])],
    "session-transcript": lambda w: [reverse("session-transcript", args=[w.chat.pk])],
    "session-cleanup": lambda w: ["/sessions/cleanup/"],
    "session-cleanup-confirm": lambda w: [],
    "session-cleanup-delete": lambda w: [],
    "event-pin": lambda w: [],
    "event-undo": lambda w: [],
    "chat-delete": lambda w: [reverse("chat-delete", args=[w.chat.key])],
    "chat-rename": lambda w: [reverse("chat-rename", args=[w.chat.key])],
    "chat-model": lambda w: [],
    "model-providers": lambda w: ["/settings/models/"],
    "model-provider-add": lambda w: ["/settings/models/add/"],
    "model-provider-edit": lambda w: ["/settings/models/1/"],
    "model-provider-test": lambda w: [],
    "model-provider-delete": lambda w: [],
    "setup-model": lambda w: ["/setup/model/"],
    "event-delete": lambda w: [reverse("event-delete", args=[w.answer.pk])],
    "event-source": lambda w: [reverse("event-source", args=[w.answer.pk])],
    "history": lambda w: ["/history/", "/history/?subject=fact&actor=agent&q=home"],
    "import": lambda w: ["/import/"],
    "import-job": lambda w: [reverse("import-job", args=[w.import_job.pk])],
    "data": lambda w: ["/data/"],
    "data-export": lambda w: [],
    "data-import": lambda w: [],
    "data-export-job": lambda w: [reverse("data-export-job", args=[w.export_job.pk])],
    "data-export-download": lambda w: [reverse("data-export-download", args=[w.export_job.pk])],
    "api-tokens": lambda w: ["/settings/tokens/"],
    "api-token-revoke": lambda w: [],
    "api-sessions": lambda w: ["/api/v1/sessions/"],
    "api-session": lambda w: [reverse("api-session", args=[w.chat.pk])],
    "api-transcript": lambda w: [reverse("api-transcript", args=[w.chat.pk])],
    "api-messages": lambda w: [],
    "api-exports": lambda w: [],
    "api-export": lambda w: [reverse("api-export", args=[w.export_job.pk])],
    "api-export-download": lambda w: [reverse("api-export-download", args=[w.export_job.pk])],
    "api-imports": lambda w: [],
    "api-import": lambda w: [reverse("api-import", args=[w.import_job.pk])],
    "api-chat": lambda w: [reverse("api-chat", args=[w.chat.key])],
    "api-event": lambda w: [reverse("api-event", args=[w.answer.pk])],
    "api-event-turn": lambda w: [reverse("api-event-turn", args=[w.answer.pk])],
    "api-fact": lambda w: [reverse("api-fact", args=[w.fact.pk])],
    "api-facts": lambda w: ["/api/v1/facts/"],
    "api-history": lambda w: ["/api/v1/history/", "/api/v1/history/?actor=agent"],
    "api-memory-file": lambda w: [reverse("api-memory-file") + "?path=MEMORY.md"],
    "openai-models": lambda w: ["/v1/models"],
    "openai-chat-completions": lambda w: [],
    "openai-unknown": lambda w: ["/v1/embeddings"],
}
# Django's own session row (a reset link's token is kept in it), not the app's data.
NOT_COUNTED = {"sessions.session"}


def rows() -> dict[str, int]:
    counted = {
        model._meta.label_lower: model._default_manager.count()
        for model in apps.get_models()
        if model._meta.label_lower not in NOT_COUNTED
    }
    # /healthz's write probe counts itself (health/checks.py): the one write a
    # GET makes, by design, to tell a database that cannot write.
    counted["monitoring.counter"] = Counter.objects.exclude(name=HEALTH_WRITES).count()
    return counted


def files() -> set[str]:
    root = Path(settings.DATA_DIR)
    return {str(path.relative_to(root)) for path in root.rglob("*")}


def changed(before: dict[str, int], after: dict[str, int]) -> dict[str, tuple[int, int]]:
    return {name: (before[name], after[name]) for name in before if before[name] != after[name]}


def test_it_tries_every_url():
    assert sorted(GETS) == sorted(name for name in project_urls().values())


def get_everything(client: Client, paths: list[str]) -> None:
    for path in paths:
        for headers in ({}, HTMX):
            response = client.get(path, **headers)
            # /healthz is 503 here: no job cluster runs beside the tests.
            unhealthy = path == "/healthz" and response.status_code == 503
            assert response.status_code < 500 or unhealthy, path
            b"".join(response)  # a streamed transcript runs to its end


def test_it_creates_nothing_when_the_owner_looks_at_her_data(alices_world):
    client = client_for(alices_world.user)
    take_queued_tasks()
    before_rows, before_files = rows(), files()
    get_everything(client, [path for urls in GETS.values() for path in urls(alices_world)])
    assert changed(before_rows, rows()) == {}
    assert files() - before_files == set()
    assert take_queued_tasks() == []


def test_it_creates_nothing_when_a_new_user_looks_around(alices_world, db):
    """Carol has nothing yet: no chat, no agent, no workspace. Looking makes none."""
    carol = User.objects.create_user("carol")
    client = client_for(carol)
    before_rows, before_files = rows(), files()
    # Her list pages, and her view of alice's ids (404s, which must create nothing either).
    get_everything(client, [path for urls in GETS.values() for path in urls(alices_world)])
    assert changed(before_rows, rows()) == {}
    assert files() - before_files == set()
    home = client.get("/")
    assert home.status_code == 200
    # A chat not started yet: its message box, whose first message POSTs to start it.
    assert b'<form id="composer" class="composer" method="post" action="/chat/new/"' in home.content


@pytest.mark.django_db(transaction=True)
async def test_it_creates_nothing_when_a_socket_connects(alice, bob):
    mine = await sync_to_async(chat.start_chat)(alice)
    before_rows, before_files = await sync_to_async(rows)(), files()
    for user, key in [(alice, mine.key), (bob, mine.key), (alice, "agent:main:web:nosuchchat")]:
        ws = communicator(user, key)
        await ws.connect()
        await ws.disconnect()
    assert changed(before_rows, await sync_to_async(rows)()) == {}
    assert files() - before_files == set()
