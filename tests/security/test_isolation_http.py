"""Isolation over HTTP: every URL of the project, tried by bob on alice's data.

`CASES` names each URL pattern outside the admin and lists bob's attempts on it;
the admin's patterns are tried from the resolver itself. A new URL without a
case fails `test_it_has_an_isolation_case_for_every_url`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.contrib.auth.tokens import default_token_generator
from django.contrib.contenttypes.models import ContentType
from django.core import mail
from django.db import models
from django.http import HttpResponseBase
from django.test import Client
from django.urls import get_resolver, reverse

from core.models import Change
from core.ownership import OwnedAdmin
from sessions_app.models import ApiToken
from tests.support.records import OWNED_MODELS, take_queued_tasks
from tests.support.web import HTMX, client_for, project_urls, uid, walk
from tests.support.world import MARK, World, leaks, secret, snapshot


@dataclass(frozen=True)
class Attempt:
    method: str
    path: str
    expect: tuple[int, ...]
    data: dict[str, Any] | str | None = None
    headers: dict[str, Any] = field(default_factory=dict)
    token: bool = False  # bob's API token instead of his browser session
    json: bool = False

    def __str__(self) -> str:
        return f"{self.method} {self.path} {self.data or ''} {self.headers or ''}"


def get(path: str, /, *expect: int, htmx: bool = True, **query: str) -> list[Attempt]:
    """A GET, plain and (unless `htmx=False`) as htmx."""
    full = f"{path}?{urlencode(query)}" if query else path
    variants = [{}, HTMX] if htmx else [{}]
    return [Attempt("GET", full, expect, headers=headers) for headers in variants]


def post(path: str, /, *expect: int, htmx: bool = True, **data: Any) -> list[Attempt]:
    variants = [{}, HTMX] if htmx else [{}]
    return [Attempt("POST", path, expect, data=data, headers=headers) for headers in variants]


def api(method: str, path: str, *expect: int, body: dict[str, Any] | None = None) -> Attempt:
    return Attempt(
        method, path, expect, data=json.dumps(body) if body is not None else None, token=True
    )


def completion(**fields: str) -> dict[str, Any]:
    """A /v1/chat/completions request asking about the vault."""
    asked = [{"role": "user", "content": "what is the vault code?"}]
    return {"model": "neotask/main", "messages": asked, **fields}


def file_paths(w: World) -> list[dict[str, Any]]:
    """Every way of naming alice's files from bob's side: her paths (which resolve in
    bob's own workspace), a way out of his workspace into hers, her absolute path,
    and an agent name that climbs to her workspace."""
    return [
        {"path": "MEMORY.md"},
        {"path": f"memory/{secret('notes')}.md"},
        {"path": f"../../{w.user.pk}/main/MEMORY.md"},
        {"path": str(w.workspace / "MEMORY.md")},
        {"path": "MEMORY.md", "agent": f"../{w.user.pk}/main"},
        {"path": "MEMORY.md", "agent": secret("agent")},
    ]


def pk(name: str, value: Any) -> str:
    return reverse(name, args=[value])


# Each URL name → bob's attempts on it (alice's ids where the URL takes one).
CASES: dict[str, Callable[[World, User], list[Attempt]]] = {
    "setup": lambda w, bob: [
        *get("/setup/", 302, htmx=False),
        *post("/setup/", 302, htmx=False, username="mallory", password1="x", password2="x"),
    ],
    # 503 here: no job cluster runs beside the tests; states by name only either way.
    "healthz": lambda w, bob: get("/healthz", 200, 503, htmx=False),
    # Off without [server] metrics_token; with it, for its bearer alone (tests/test_metrics.py).
    "metrics": lambda w, bob: [
        *get("/metrics", 404, htmx=False),
        Attempt("GET", "/metrics", (404,), headers={"HTTP_AUTHORIZATION": "Bearer guess"}),
    ],
    "web-manifest": lambda w, bob: get("/manifest.webmanifest", 200, htmx=False),
    "login": lambda w, bob: [
        *get("/accounts/login/", 200, htmx=False),
        *post("/accounts/login/", 200, htmx=False, username="alice", password="wrong"),
    ],
    "logout": lambda w, bob: post("/accounts/logout/", 302, htmx=False),
    # Single sign-on is off in the suite's settings: no provider, no page
    # (tests/test_single_sign_on.py tries them with one).
    "oidc_authentication_init": lambda w, bob: get("/accounts/oidc/start/", 404, htmx=False),
    "oidc_authentication_callback": lambda w, bob: get(
        "/accounts/oidc/callback/", 404, htmx=False, code="alices-code", state="alices-state"
    ),
    "password_change": lambda w, bob: [
        *get("/accounts/password_change/", 200, htmx=False),
        # Changes bob's own password, whatever the form is given.
        *post(
            "/accounts/password_change/",
            302,
            htmx=False,
            old_password="bob-password",
            new_password1="Bob-new-pw-93",
            new_password2="Bob-new-pw-93",
            username="alice",
        ),
    ],
    "password_change_done": lambda w, bob: get("/accounts/password_change/done/", 200, htmx=False),
    "password_reset": lambda w, bob: [
        *get("/accounts/password_reset/", 200, htmx=False),
        # The same answer as for an unknown address: nothing to learn, and the mail
        # goes to alice (test_it_mails_a_reset_link_only_to_the_accounts_owner).
        *post("/accounts/password_reset/", 302, htmx=False, email="alice@example.org"),
    ],
    "password_reset_done": lambda w, bob: get("/accounts/password_reset/done/", 200, htmx=False),
    "password_reset_confirm": lambda w, bob: [
        # Alice's uid with a token made for bob, and with a made-up one.
        *get(f"/accounts/reset/{uid(w.user)}/{default_token_generator.make_token(bob)}/", 200),
        *post(
            f"/accounts/reset/{uid(w.user)}/set-password/",
            200,
            new_password1="Taken-over-77",
            new_password2="Taken-over-77",
        ),
        *get(f"/accounts/reset/{uid(w.user)}/abc-123/", 200),
    ],
    "password_reset_complete": lambda w, bob: get("/accounts/reset/done/", 200, htmx=False),
    # Memory: search, files, facts, macros.
    "memory-search": lambda w, bob: [
        *get("/memory/", 200, q="What is the vault code of the lake house?"),
        *get("/memory/", 200, q="Where is the spare house key hidden?"),
        *get("/memory/", 200, q=MARK),
    ],
    "memory-files": lambda w, bob: [
        *get("/memory/files/", 200),
        *get("/memory/files/", 200, agent="main"),
        *get("/memory/files/", 404, agent=f"../{w.user.pk}/main"),
    ],
    "memory-file": lambda w, bob: [
        attempt
        for where in file_paths(w)
        for attempt in [
            *get("/memory/files/view/", 404, **where),
            *post("/memory/files/view/", 404, text=f"bob was here {MARK}", sha256="", **where),
        ]
    ],
    "memory-file-new": lambda w, bob: [
        # Created (or refused) in bob's own workspace, never in alice's.
        *post("/memory/files/new/", 302, htmx=False, name="MEMORY.md"),
        *post("/memory/files/new/", 302, htmx=False, name=secret("notes")),
        *post("/memory/files/new/", 302, htmx=False, name=f"../../{w.user.pk}/main/memory/x"),
        *post("/memory/files/new/", 404, htmx=False, name="x", agent=f"../{w.user.pk}/main"),
    ],
    "memory-document-upload": lambda w, bob: [
        # No file: back to his own files page (the paperclip's htmx request: a note
        # saying so); alice's workspace is no agent of his, asked either way.
        *post("/memory/files/upload/", 302, htmx=False),
        Attempt("POST", "/memory/files/upload/", (400,), data={}, headers=HTMX),
        *post("/memory/files/upload/", 404, agent=f"../{w.user.pk}/main"),
        *get("/memory/files/upload/", 405),
    ],
    "memory-file-delete": lambda w, bob: [
        attempt
        for where in file_paths(w)
        for attempt in [
            *get("/memory/files/delete/", 404, **where),
            *post("/memory/files/delete/", 404, **where),
        ]
    ],
    "fact-list": lambda w, bob: [
        *get("/memory/facts/", 200),
        *get("/memory/facts/", 200, q=MARK),
        # The same category/key as alice's: a fact of bob's own, not an edit of hers.
        *post("/memory/facts/", 200, 302, category=w.fact.category, key=w.fact.key, value="bob's"),
    ],
    "fact-row": lambda w, bob: get(pk("fact-row", w.fact.pk), 404),
    # Bob's own history, whatever he filters or searches for.
    "history": lambda w, bob: [
        *get("/history/", 200),
        *get("/history/", 200, q=MARK),
        *get("/history/", 200, q=str(w.fact.pk), subject="fact"),
        *get("/history/", 200, actor="agent", page="2"),
        *get("/history/", 400, subject="nothing"),
    ],
    "event-source": lambda w, bob: [
        *get(pk("event-source", w.answer.pk), 404),
        *get(pk("event-source", w.pinned.pk), 404),
        *get(pk("event-source", w.summary.pk), 404),
    ],
    "fact-edit": lambda w, bob: [
        *get(pk("fact-edit", w.fact.pk), 404),
        *post(pk("fact-edit", w.fact.pk), 404, category="home", key="k", value="bob was here"),
    ],
    "fact-delete": lambda w, bob: [
        *get(pk("fact-delete", w.fact.pk), 405),
        *post(pk("fact-delete", w.fact.pk), 404),
    ],
    # The forget dialog: alice's fact or message is neither listed nor forgotten.
    "forget": lambda w, bob: [
        *get("/memory/forget/", 404, subject=f"fact:{w.fact.pk}"),
        *get("/memory/forget/", 404, subject=f"event:{w.answer.pk}"),
        *post("/memory/forget/", 400, subject=f"fact:{w.fact.pk}", copy=f"fact:{w.fact.pk}"),
        *post("/memory/forget/", 400, subject=f"event:{w.answer.pk}", copy=f"event:{w.answer.pk}"),
    ],
    "macro-list": lambda w, bob: get("/memory/macros/", 200),
    "macro-disable": lambda w, bob: post(pk("macro-disable", w.macro.pk), 404),
    "macro-enable": lambda w, bob: post(pk("macro-enable", w.macro.pk), 404),
    "macro-delete": lambda w, bob: post(pk("macro-delete", w.macro.pk), 404),
    # Scheduled tasks.
    "task-list": lambda w, bob: [
        *get("/tasks/", 200),
        # Task names are per owner: bob gets his own task of the same name.
        *post("/tasks/", 200, 302, schedule="daily at 9am", prompt="tea", name=w.task.name),
    ],
    "task-preview": lambda w, bob: get("/tasks/preview/", 200, schedule="daily at 9am"),
    "task-row": lambda w, bob: get(pk("task-row", w.task.pk), 404),
    "task-pause": lambda w, bob: post(pk("task-pause", w.task.pk), 404),
    "task-resume": lambda w, bob: post(pk("task-resume", w.task.pk), 404),
    "task-run": lambda w, bob: post(pk("task-run", w.task.pk), 404),
    "task-delete": lambda w, bob: [
        *get(pk("task-delete", w.task.pk), 404),
        *post(pk("task-delete", w.task.pk), 404),
    ],
    "task-edit": lambda w, bob: [
        *get(pk("task-edit", w.task.pk), 404),
        *post(pk("task-edit", w.task.pk), 404),
    ],
    # Terminal prefixes.
    "terminal-prefixes": lambda w, bob: get("/settings/terminal/", 200),
    "terminal-prefix-revoke": lambda w, bob: post(pk("terminal-prefix-revoke", w.prefix.pk), 404),
    "terminal-prefix-activate": lambda w, bob: post(
        pk("terminal-prefix-activate", w.prefix.pk), 404
    ),
    # MCP servers: bob's own page; alice's server is a 404 to him.
    "mcp-servers": lambda w, bob: [
        *get("/settings/mcp/", 200),
        *post("/settings/mcp/", 400, name="lake_house", url="http://127.0.0.1:9/mcp"),
    ],
    "mcp-server-test": lambda w, bob: post(pk("mcp-server-test", w.mcp_server.pk), 404),
    "mcp-server-delete": lambda w, bob: post(pk("mcp-server-delete", w.mcp_server.pk), 404),
    "mcp-call-revoke": lambda w, bob: post(pk("mcp-call-revoke", w.mcp_call.pk), 404),
    # Chats and sessions.
    "home": lambda w, bob: get("/", 200, 302, htmx=False),  # his latest chat, or a new one
    "chat-new": lambda w, bob: [
        *post("/chat/new/", 302, htmx=False),
        *post("/chat/new/", 404, htmx=False, agent=str(w.agent.pk)),
    ],
    "agent-list": lambda w, bob: [
        *get("/agents/", 200),
        *post("/agents/", 302, htmx=False, name="bobs-agent", system_prompt="bob's"),
    ],
    "agent-rename": lambda w, bob: [
        *get(pk("agent-rename", w.agent.pk), 405),
        *post(pk("agent-rename", w.agent.pk), 404, name="bobs"),
    ],
    "agent-edit": lambda w, bob: [
        *get(pk("agent-edit", w.agent.pk), 404),
        *post(pk("agent-edit", w.agent.pk), 404, system_prompt="bob was here"),
    ],
    "chat-sidebar": lambda w, bob: [
        *get("/chat/sidebar/", 200),
        *get("/chat/sidebar/", 200, current=w.chat.key),
        # Searching her titles and her messages' words finds none of hers.
        *get("/chat/sidebar/", 200, q=MARK),
        *get("/chat/sidebar/", 200, q="title", current=w.chat.key),
    ],
    "chat": lambda w, bob: [
        *get(pk("chat", w.chat.key), 404),
        *get(pk("chat", w.cron.key), 404),
        *get(pk("chat", w.archived.key), 404),
    ],
    "chat-approval": lambda w, bob: [
        *get("/chat/approval/", 405),
        *post("/chat/approval/", 404, request_id=str(w.approval.pk), decision="once"),
        *post("/chat/approval/", 404, request_id=str(w.approval.pk), decision="always"),
    ],
    "chat-events": lambda w, bob: [
        *get(pk("chat-events", w.chat.key), 404, after="0"),
        *get(pk("chat-events", w.cron.key), 404),
    ],
    "session-list": lambda w, bob: get("/sessions/", 200),
    "session-detail": lambda w, bob: [
        *get(pk("session-detail", w.chat.pk), 404),
        *get(pk("session-detail", w.archived.pk), 404, page="1"),
        *get(pk("session-detail", w.cron.pk), 404),
    ],
    "session-transcript": lambda w, bob: [
        *get(pk("session-transcript", w.chat.pk), 404),
        *get(pk("session-transcript", w.archived.pk), 404),
    ],
    "session-cleanup": lambda w, bob: get("/sessions/cleanup/", 200),
    "session-cleanup-confirm": lambda w, bob: post(
        "/sessions/cleanup/confirm/", 200, session=[str(w.archived.pk), str(w.chat.pk)]
    ),
    "session-cleanup-delete": lambda w, bob: post(
        "/sessions/cleanup/delete/", 200, session=[str(w.archived.pk), str(w.chat.pk)]
    ),
    "chat-delete": lambda w, bob: [
        *get(pk("chat-delete", w.chat.key), 404),
        *post(pk("chat-delete", w.chat.key), 404),
        *post(pk("chat-delete", w.archived.key), 404),
        *post(pk("chat-delete", w.cron.key), 404),
    ],
    "chat-model": lambda w, bob: [
        *post(pk("chat-model", w.chat.key), 404, model=""),
        *post(pk("chat-model", w.archived.key), 404, model=""),
        *post(pk("chat-model", w.cron.key), 404, model=""),
    ],
    # The site's model providers: its staff's, never another user's (bob is not staff).
    "model-providers": lambda w, bob: get("/settings/models/", 403),
    # Adding users is the staff's too: bob can neither see the form nor add anyone.
    "user-add": lambda w, bob: [
        *get("/settings/users/add/", 403),
        *post(
            "/settings/users/add/",
            403,
            username="bobs-friend",
            password1="a long passphrase 42",
            password2="a long passphrase 42",
            is_staff="on",
        ),
    ],
    "model-provider-add": lambda w, bob: [
        *get("/settings/models/add/", 403),
        *post(
            "/settings/models/add/", 403, name="bob's", base_url="http://x/v1", offered_models="m"
        ),
    ],
    "model-provider-edit": lambda w, bob: [
        *get(pk("model-provider-edit", 1), 403),
        *post(pk("model-provider-edit", 1), 403, name="bob's"),
    ],
    "model-provider-test": lambda w, bob: post(
        reverse("model-provider-test"), 403, base_url="http://x/v1", offered_models="m"
    ),
    "model-provider-delete": lambda w, bob: post(pk("model-provider-delete", 1), 403),
    "setup-model": lambda w, bob: [
        *get("/setup/model/", 403),
        *post("/setup/model/", 403, name="bob's", base_url="http://x/v1", offered_models="m"),
    ],
    "chat-rename": lambda w, bob: [
        *get(pk("chat-rename", w.chat.key), 404),
        *post(pk("chat-rename", w.chat.key), 404, title="renamed by bob"),
        *post(pk("chat-rename", w.archived.key), 404, title="renamed by bob"),
        *post(pk("chat-rename", w.cron.key), 404, title="renamed by bob"),
    ],
    "event-delete": lambda w, bob: [
        *get(pk("event-delete", w.answer.pk), 404),
        *post(pk("event-delete", w.answer.pk), 404, scope="message"),
        *post(pk("event-delete", w.pinned.pk), 404, scope="turn"),
    ],
    "event-pin": lambda w, bob: [
        *get(pk("event-pin", w.answer.pk), 405),
        *post(pk("event-pin", w.answer.pk), 404),
        *post(pk("event-pin", w.pinned.pk), 404),
    ],
    # (a memory notice's Undo on her real tool result: tests/test_memory_notice.py)
    "event-undo": lambda w, bob: [
        *get(pk("event-undo", w.answer.pk), 405),
        *post(pk("event-undo", w.answer.pk), 404),
    ],
    # Imports.
    "import": lambda w, bob: [
        *get("/import/", 200),
        *post("/import/", 400, htmx=False, kind="openclaw", agent="main"),
    ],
    "import-job": lambda w, bob: get(pk("import-job", w.import_job.pk), 404),
    # Your data: bob exports and imports his own; alice's jobs are not found.
    "data": lambda w, bob: get("/data/", 200),
    "data-export": lambda w, bob: [*get("/data/export/", 405), *post("/data/export/", 302)],
    "data-import": lambda w, bob: post("/data/import/", 400, htmx=False),
    "data-export-job": lambda w, bob: get(pk("data-export-job", w.export_job.pk), 404),
    "data-export-download": lambda w, bob: get(
        pk("data-export-download", w.export_job.pk), 404, htmx=False
    ),
    # API tokens and the JSON API (bob's token; test_it_answers_bobs_browser_session_
    # like his_token does the same through his browser session).
    "api-tokens": lambda w, bob: [
        *get("/settings/tokens/", 200),
        *post("/settings/tokens/", 200, name="bob's script"),
    ],
    "api-token-revoke": lambda w, bob: post(pk("api-token-revoke", w.token.pk), 404),
    "api-sessions": lambda w, bob: [
        api("GET", "/api/v1/sessions/", 200),
        api("GET", "/api/v1/sessions/?page=1", 200),
        # Alice's agent is no agent of bob's: the answer for a name he made up.
        api("POST", "/api/v1/sessions/", 400, body={"agent": secret("agent")}),
    ],
    "api-session": lambda w, bob: [
        *(api("GET", pk("api-session", s.pk), 404) for s in (w.chat, w.archived, w.cron)),
        api("GET", pk("api-session", w.chat.pk) + "?after=0&limit=200", 404),
        api("DELETE", pk("api-session", w.chat.pk), 404),
        api("DELETE", pk("api-session", w.archived.pk), 404),
    ],
    "api-transcript": lambda w, bob: [
        api("GET", pk("api-transcript", w.chat.pk), 404),
        api("GET", pk("api-transcript", w.archived.pk), 404),
    ],
    "api-chat": lambda w, bob: [
        api("DELETE", pk("api-chat", w.chat.key), 404),
        api("DELETE", pk("api-chat", w.archived.key), 404),
        api("GET", pk("api-chat", w.chat.key), 405),
    ],
    "api-event": lambda w, bob: [
        api("DELETE", pk("api-event", w.answer.pk), 404),
        api("DELETE", pk("api-event", w.pinned.pk), 404),
    ],
    "api-event-turn": lambda w, bob: [api("DELETE", pk("api-event-turn", w.pinned.pk), 404)],
    "api-fact": lambda w, bob: [api("DELETE", pk("api-fact", w.fact.pk), 404)],
    "api-facts": lambda w, bob: [api("GET", "/api/v1/facts/", 200)],
    "api-history": lambda w, bob: [
        api("GET", "/api/v1/history/", 200),
        api("GET", f"/api/v1/history/?q={MARK}", 200),
        api("GET", f"/api/v1/history/?q={w.fact.pk}&subject=fact", 200),
    ],
    "api-memory-file": lambda w, bob: [
        # Her paths name files in bob's own workspace (he has none of those names);
        # the others are no memory path or no agent name of his.
        api("DELETE", f"{reverse('api-memory-file')}?{urlencode(where)}", 400, 404)
        for where in file_paths(w)
    ],
    "api-messages": lambda w, bob: [
        api("POST", pk("api-messages", w.chat.pk), 404, body={"text": "what is the vault code?"}),
        api("POST", pk("api-messages", w.cron.pk), 404, body={"text": "hi"}),
    ],
    "api-exports": lambda w, bob: [api("POST", "/api/v1/export", 202)],
    "api-export": lambda w, bob: [
        api("GET", pk("api-export", w.export_job.pk), 404),
        api("GET", pk("api-export", w.import_job.pk), 404),
    ],
    "api-export-download": lambda w, bob: [
        api("GET", pk("api-export-download", w.export_job.pk), 404)
    ],
    "api-imports": lambda w, bob: [api("POST", "/api/v1/import", 400)],
    # The OpenAI-compatible endpoint: bob's own agents; alice's chats are no chats of his.
    "openai-models": lambda w, bob: [api("GET", "/v1/models", 200)],
    "openai-unknown": lambda w, bob: [api("POST", "/v1/embeddings", 404)],
    "openai-chat-completions": lambda w, bob: [
        *(
            api("POST", "/v1/chat/completions", 404, body=completion(user=s.key))
            for s in (w.chat, w.archived, w.cron)
        ),
        api(
            "POST", "/v1/chat/completions", 404, body=completion(model=f"neotask/{secret('agent')}")
        ),
    ],
    "api-import": lambda w, bob: [
        api("GET", pk("api-import", w.import_job.pk), 404),
        api("GET", pk("api-import", w.export_job.pk), 404),
    ],
}


def admin_routes() -> list[str]:
    return [route for route, _ in walk(get_resolver().url_patterns) if route.startswith("admin/")]


def test_it_has_an_isolation_case_for_every_url():
    urls = project_urls()
    assert all(urls.values()), "every project URL needs a name to be listed in CASES"
    missing = sorted(name for name in urls.values() if name not in CASES)
    assert not missing, f"URLs without an isolation case in CASES: {missing}"
    stale = sorted(set(CASES) - set(urls.values()))
    assert not stale, f"CASES for URLs that no longer exist: {stale}"


def body(response: HttpResponseBase) -> str:
    # Either kind iterates over its bytes (a streamed one over streaming_content).
    content = b"".join(response)
    return content.decode(errors="replace") + "\n" + response.get("Location", "")


def send(attempt: Attempt, client: Client, bobs_token: str) -> HttpResponseBase:
    if attempt.token:
        client = Client(HTTP_AUTHORIZATION=f"Bearer {bobs_token}")
        return client.generic(
            attempt.method, attempt.path, attempt.data or "", content_type="application/json"
        )
    if attempt.method == "GET":
        return client.get(attempt.path, **attempt.headers)
    return client.post(attempt.path, attempt.data, **attempt.headers)


@pytest.mark.parametrize("name", sorted(CASES))
def test_it_keeps_alices_data_from_bob(name, world, bob, bob_client):
    take_queued_tasks()
    bobs_token = ApiToken.issue(bob, "bob's script")[1]
    attempts = CASES[name](world, bob)
    assert attempts
    before = snapshot(world.user)
    users = set(User.objects.values_list("username", flat=True))
    for attempt in attempts:
        response = send(attempt, bob_client, bobs_token)
        text = body(response)
        assert response.status_code in attempt.expect, (str(attempt), text[:300])
        assert not leaks(text, world, asked=str(attempt)), (str(attempt), leaks(text, world))
    assert snapshot(world.user) == before, name
    assert set(User.objects.values_list("username", flat=True)) == users
    # Nothing was queued on alice's behalf (a "run now", a mail, an embedding of hers).
    alice_ids = {str(world.task.pk), str(world.chat.pk)}
    assert not [job for job in take_queued_tasks() if alice_ids & job_arguments(job)]


def job_arguments(job: dict) -> set[str]:
    """A queued job's arguments, those in a list (a batch of ids) included."""
    flat = [part for arg in job["args"] for part in (arg if isinstance(arg, list) else [arg])]
    return set(map(str, flat))


def test_it_answers_bobs_browser_session_like_his_token(world, bob, bob_client):
    for attempt in CASES["api-session"](world, bob) + CASES["api-messages"](world, bob):
        response = bob_client.generic(
            attempt.method, attempt.path, attempt.data or "", content_type="application/json"
        )
        assert response.status_code == 404, attempt
        assert response.json() == {"error": "Not found."}
    assert bob_client.get(pk("api-transcript", world.chat.pk)).status_code == 404


def test_it_tells_bob_nothing_about_alices_agent_that_a_made_up_name_would_not(world, bob):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(bob, 'script')[1]}")

    def answer(agent: str) -> tuple[int, str]:
        response = client.post("/api/v1/sessions/", {"agent": agent}, "application/json")
        return response.status_code, response.json()["error"].replace(agent, "<name>")

    assert answer(secret("agent")) == answer("no-such-agent-anywhere")


def test_it_mails_a_reset_link_only_to_the_accounts_owner(world, bob_client):
    mail.outbox.clear()
    known = bob_client.post("/accounts/password_reset/", {"email": "alice@example.org"})
    unknown = bob_client.post("/accounts/password_reset/", {"email": "nobody@example.org"})
    assert (known.status_code, known["Location"]) == (unknown.status_code, unknown["Location"])
    assert [message.to for message in mail.outbox] == [["alice@example.org"]]


def test_it_cannot_be_fooled_by_the_control_attempts(world, alice_client):
    """The same requests by alice reach her rows: bob's 404s are not broken URLs."""
    assert alice_client.get(pk("chat", world.chat.key)).status_code == 200
    assert alice_client.get(pk("session-detail", world.archived.pk)).status_code == 200
    assert alice_client.get(pk("fact-edit", world.fact.pk)).status_code == 200
    assert alice_client.get(pk("task-row", world.task.pk), **HTMX).status_code == 200
    assert alice_client.get("/memory/files/view/", {"path": "MEMORY.md"}).status_code == 200
    page = alice_client.get("/memory/", {"q": "What is the vault code of the lake house?"})
    assert secret("vault") in page.content.decode()
    alices_token = Client(HTTP_AUTHORIZATION=f"Bearer {world.token_text}")
    assert alices_token.get(pk("api-session", world.chat.pk)).status_code == 200


# The admin ---------------------------------------------------------------------


def model_of(route: str) -> type | None:
    """The model of an admin route like admin/memory/fact/<path:object_id>/change/."""
    parts = route.split("/")
    if len(parts) < 4:
        return None
    try:
        return apps.get_model(parts[1], parts[2])
    except (LookupError, ValueError):
        return None


def admin_url(route: str, world: World) -> str:
    """A concrete URL for an admin route, naming alice's row where it takes one."""
    model = model_of(route)
    row = world.rows.get(model) if model is not None else None
    object_id = str(row.pk) if row is not None else str(world.user.pk)
    content_type = ContentType.objects.get_for_model(type(world.fact))
    if "(?P<app_label>" in route:
        return "/admin/memory/"
    if "(?P<url>" in route:
        return "/admin/no-such-page/"
    fills = {
        "<path:object_id>": object_id,
        "<id>": str(world.user.pk),
        "<path:content_type_id>": str(content_type.pk),
    }
    path = route
    for placeholder, value in fills.items():
        path = path.replace(placeholder, value)
    if route == "admin/r/<path:content_type_id>/<path:object_id>/":
        path = f"admin/r/{content_type.pk}/{world.fact.pk}/"
    assert "<" not in path, f"no isolation case for the admin URL {route}"
    return "/" + path


def test_it_sends_non_staff_to_the_admin_login_from_every_admin_url(world, bob_client):
    before = snapshot(world.user)
    for route in admin_routes():
        url = admin_url(route, world)
        for method in ("get", "post"):
            response = getattr(bob_client, method)(url, {"post": "yes", "owner": world.user.pk})
            text = body(response)
            if route == "admin/login/":
                # The form, saying bob is not authorised; a POST with his password fails.
                assert response.status_code == 200, url
            elif route == "admin/logout/":
                assert (response.status_code, response["Location"]) == (302, "/admin/")
            else:
                assert response.status_code == 302, (method, url)
                assert response["Location"].startswith("/admin/login/"), (method, url)
            assert not leaks(text, world, asked=url), (url, leaks(text, world))
            assert "alice" not in text.replace(url, ""), url
    assert snapshot(world.user) == before


@pytest.fixture
def staff_bob(bob) -> Client:
    """Bob as staff (not superuser) allowed to view, change and delete every owned model."""
    bob.is_staff = True
    bob.save()
    codenames = [
        f"{action}_{model._meta.model_name}"
        for model in OWNED_MODELS
        for action in ("view", "change", "delete", "add")
    ]
    bob.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return client_for(bob)


def admin_base(model: type[models.Model]) -> str:
    return f"/admin/{model._meta.app_label}/{model._meta.model_name}/"


def test_it_scopes_every_admin_of_owned_rows(db):
    for model in OWNED_MODELS:
        assert isinstance(admin.site._registry.get(model), OwnedAdmin), model


@pytest.mark.parametrize("model", OWNED_MODELS, ids=lambda model: model.__name__)
def test_it_shows_staff_only_their_own_rows_in_the_admin(model, world, staff_bob):
    before = snapshot(world.user)
    base = admin_base(model)
    row = world.rows[model]
    for url in (base, f"{base}?q={MARK}", f"{base}?owner__id__exact={world.user.pk}", "/admin/"):
        response = staff_bob.get(url)
        assert response.status_code == 200, url
        text = body(response)
        assert not leaks(text, world, asked=url), (url, leaks(text, world))
        # Not even her name, e.g. in the "by owner" filter.
        assert ">alice<" not in text, url
    for suffix in ("change/", "history/", "delete/", ""):
        url = f"{base}{row.pk}/{suffix}"
        for response in (staff_bob.get(url), staff_bob.post(url, {"post": "yes"})):
            text = body(response)
            assert not leaks(text, world, asked=url), (url, leaks(text, world))
            if model is Change and response.status_code == 403:
                continue  # nobody may edit the history: refused before any row is looked up
            # Django's answer for a row that does not exist: back to the admin index.
            assert response.status_code in (301, 302), url
            followed = body(staff_bob.get(response["Location"]))
            assert not leaks(followed, world, asked=url)
    assert snapshot(world.user) == before


def test_it_lets_staff_file_rows_only_under_themselves(world, staff_bob, bob):
    from memory.models import Fact

    response = staff_bob.post(
        admin_base(Fact) + "add/",
        {"owner": world.user.pk, "category": "planted", "key": "k", "value": "v", "source": "user"},
    )
    assert response.status_code == 200  # the form again, with an error on the owner
    mine = Fact.objects.create(owner=bob, category="mine", key="k", value="v")
    staff_bob.post(
        f"{admin_base(Fact)}{mine.pk}/change/",
        {"owner": world.user.pk, "category": "planted", "key": "k", "value": "v", "source": "user"},
    )
    assert not Fact.objects.filter(owner=world.user, category="planted").exists()
    assert Fact.objects.get(pk=mine.pk).owner == bob


def test_it_refuses_staff_the_owner_autocomplete_and_others_tables(world, staff_bob):
    autocomplete = staff_bob.get(
        "/admin/autocomplete/",
        {"app_label": "memory", "model_name": "fact", "field_name": "owner", "term": "ali"},
    )
    assert autocomplete.status_code == 403
    assert "alice" not in body(autocomplete)
    # Every other table (accounts, groups, the job queue's) is closed to him.
    others = [model for model in admin.site._registry if model not in OWNED_MODELS]
    assert User in others
    for model in others:
        assert staff_bob.get(admin_base(model)).status_code == 403, model
    assert staff_bob.get(f"/admin/auth/user/{world.user.pk}/password/").status_code == 403
