"""XSS payloads in everything a user, the model or a tool can name: every page that
shows them (the chat and its partials, sessions, memory search, files, facts,
macros, tasks, terminal prefixes, API tokens, the admin) shows them as text.

Pages are parsed (html.parser), not grepped: a payload that became markup would
show up as a <script>, an on* attribute or a javascript: URL, and the payload must
be visible as text, so a page that simply omits it does not pass by accident."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agent.models import ApprovalRequest, TerminalAllowedPrefix
from memory import recording
from memory.files import indexing
from memory.files.search import forget_chunk_indexes
from memory.models import Fact, Macro
from memory.workspace import workspace_dir
from scheduler.models import ScheduledTask
from sessions_app import chat
from sessions_app.broadcast import render_event
from sessions_app.models import Agent, ApiToken, Session
from tests.support.embeddings import CountingEmbed
from tests.support.records import OWNED_MODELS
from tests.support.web import client_for

PAYLOADS = [
    '<script>alert("xss1")</script>',
    '"><img src=x onerror=alert("xss2")>',
    "'><svg/onload=alert('xss3')>",
    '[xss4](javascript:alert(1)) <a href="javascript:alert(1)">xss4</a>',
    '</textarea></title><iframe src="javascript:alert(1)">xss5',
]
# (<svg> is left to the on* check: the admin draws its icons inline.)
ACTIVE_TAGS = {"script", "img", "iframe", "object", "embed", "frame", "base", "link"}
URL_ATTRIBUTES = {"href", "src", "action", "formaction", "data", "xlink:href"}


class Page(HTMLParser):
    """The elements of a page and the text a reader sees (entities decoded)."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.script_text: list[str] = []
        self.in_script = False
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {name: value or "" for name, value in attrs}))
        self.in_script = tag in ("script", "style")

    def handle_endtag(self, tag: str) -> None:
        self.in_script = False

    def handle_data(self, data: str) -> None:
        (self.script_text if self.in_script else self.text).append(data)


def marker(payload: str) -> str:
    return next(word for word in ("xss1", "xss2", "xss3", "xss4", "xss5") if word in payload)


def assert_inert(html: str, payload: str, shown: bool = True) -> None:
    """No element, attribute or URL came from `payload`; and, if `shown`, the page
    shows it as text (or as a form field's value)."""
    page = Page(html)
    for tag, attrs in page.elements:
        events = [name for name in attrs if name.startswith("on")]
        assert not events, f"<{tag}> has {events}"
        for name in URL_ATTRIBUTES & attrs.keys():
            scheme = attrs[name].strip().lower().replace("\t", "").replace("\n", "")
            assert not scheme.startswith(("javascript:", "data:", "vbscript:")), (tag, attrs)
        if tag in ACTIVE_TAGS:
            # Only the app's and the admin's own (same-origin files, Django's json_script):
            # an injected one has no source, or "x".
            source = attrs.get("src") or attrs.get("href") or ""
            own = source.startswith("/") and marker(payload) not in source
            assert own or attrs.get("type") == "application/json", (tag, attrs)
    assert marker(payload) not in "".join(page.script_text)
    if shown:
        values = [attrs.get("value", "") for _, attrs in page.elements]
        visible = "".join(page.text) + "".join(values)
        assert marker(payload) in visible, "the payload is not on the page at all"


@pytest.fixture(params=PAYLOADS, ids=["script", "img-onerror", "svg-onload", "js-link", "iframe"])
def payload(request) -> str:
    return request.param


@pytest.fixture
def client(owner) -> Client:
    return client_for(owner, raise_request_exception=False)


@pytest.fixture
def stored(owner, payload, settings, tmp_path, monkeypatch) -> Iterator[dict[str, object]]:
    """The payload in every field that a page shows."""
    settings.DATA_DIR = tmp_path / "data"
    monkeypatch.setattr(indexing, "embed_texts", CountingEmbed())
    forget_chunk_indexes()
    agent = Agent.objects.default_for(owner)
    Agent.objects.filter(pk=agent.pk).update(system_prompt=payload)
    session = chat.start_chat(owner)
    Session.objects.filter(pk=session.pk).update(title=payload)
    idle = chat.start_chat(owner)
    Session.objects.filter(pk=idle.pk).update(
        title=payload, last_activity_at=timezone.now() - timedelta(days=90)
    )
    sid = str(session.pk)
    events = [
        recording.record(owner, sid, "user_message", {"content": payload}),
        recording.record(owner, sid, "assistant_response", {"content": payload}),
        recording.record(owner, sid, "tool_call", {"name": payload, "arguments": payload}),
        recording.record(owner, sid, "tool_result", {"name": payload, "content": payload}),
        recording.record(
            owner,
            sid,
            "recall",
            {"content": payload, "items": [{"date": payload, "text": payload, "source": payload}]},
        ),
        recording.record(owner, sid, "compaction", {"content": payload, "summarised": payload}),
        recording.record(owner, sid, "error", {"content": payload}),
    ]
    fact = Fact.objects.create(owner=owner, category=payload, key=payload, value=payload)
    Macro.objects.create(
        owner=owner, trigger_tool=payload, next_tool=payload, next_args={"x": payload}
    )
    TerminalAllowedPrefix.objects.create(owner=owner, prefix=payload)
    ApiToken.issue(owner, payload)
    ApprovalRequest.objects.create(owner=owner, session_id=sid, command=payload, prefix=payload)
    task = ScheduledTask.objects.create(
        owner=owner,
        name=payload,
        cron_expr="0 9 * * *",
        original_schedule=payload,
        prompt=payload,
        agent=agent,
        next_run_at=timezone.now(),
    )
    workspace = workspace_dir(owner.pk, "main")
    path = "memory/" + payload.replace("/", "_") + ".md"
    (workspace / "memory").mkdir(parents=True)
    Path(workspace, path).write_text(f"# {payload}\n\n{payload}\n")
    indexing.index_workspace(owner, "main")
    yield {"session": session, "events": events, "fact": fact, "task": task, "path": path}
    forget_chunk_indexes()


def pages(stored: dict, payload: str) -> list[tuple[str, dict[str, str], int, bool]]:
    """(url, headers, the status expected, whether the payload must be visible there)."""
    session = stored["session"]
    htmx = {"HX-Request": "true"}
    file_query = urlencode({"path": stored["path"]})
    return [
        (f"/chat/{session.key}/", {}, 200, True),
        (f"/chat/{session.key}/events/", htmx, 200, True),
        (f"/chat/sidebar/?{urlencode({'current': payload})}", htmx, 200, True),
        ("/sessions/", {}, 200, True),
        (f"/sessions/{session.pk}/", {}, 200, True),
        ("/sessions/cleanup/", {}, 200, True),
        (f"/memory/?{urlencode({'q': payload})}", {}, 200, True),
        (f"/memory/?{urlencode({'q': payload})}", htmx, 200, True),
        ("/memory/files/", {}, 200, True),
        (f"/memory/files/view/?{file_query}", {}, 200, True),
        (f"/memory/files/delete/?{file_query}", {}, 200, True),
        (f"/memory/files/view/?{urlencode({'path': payload})}", {}, 404, False),
        ("/memory/facts/", {}, 200, True),
        (f"/memory/facts/?{urlencode({'q': payload})}", htmx, 200, False),
        (f"/memory/facts/{stored['fact'].pk}/edit/", {}, 200, True),
        (f"/memory/facts/{stored['fact'].pk}/", htmx, 200, True),
        ("/memory/macros/", {}, 200, True),
        ("/tasks/", {}, 200, True),
        (f"/tasks/preview/?{urlencode({'schedule': payload})}", htmx, 200, True),
        (f"/tasks/{stored['task'].pk}/delete/", {}, 200, True),
        ("/settings/terminal/", {}, 200, True),
        ("/settings/tokens/", {}, 200, True),
        (f"/chat/{payload}/", {}, 404, False),
    ]


def test_every_page_shows_the_payload_as_text(client, stored, payload):
    for url, headers, status, shown in pages(stored, payload):
        response = client.get(url, headers=headers)
        assert response.status_code == status, (url, response.status_code)
        assert_inert(response.content.decode(), payload, shown=shown)


def test_every_stored_event_is_rendered_inert_for_the_websocket(owner, stored, payload):
    # The html the consumer sends with each event frame.
    for event in stored["events"]:
        assert_inert(render_event(event), payload)


def test_the_form_pages_show_a_refused_payload_as_text(client, stored, payload):
    answers = [
        client.post("/memory/facts/", {"category": "", "key": payload, "value": payload}),
        client.post("/tasks/", {"name": payload, "schedule": payload, "prompt": payload}),
        client.post("/settings/tokens/", {"name": payload * 10}),
        client.post(
            "/memory/files/view/", {"path": stored["path"], "sha256": "stale", "text": payload}
        ),
        client.post("/memory/files/new/", {"name": "../" + payload}, follow=True),
    ]
    for response in answers:
        assert response.status_code in (200, 409), response.status_code
        assert_inert(response.content.decode(), payload)


@pytest.mark.parametrize("model", [*OWNED_MODELS], ids=lambda model: model.__name__)
def test_the_admin_shows_the_payload_as_text(client, stored, payload, model):
    meta = model._meta
    changelist = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
    response = client.get(changelist, {"q": payload})
    assert response.status_code == 200
    assert_inert(response.content.decode(), payload, shown=False)
    for row in model.objects.all()[:3]:
        change = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[row.pk])
        response = client.get(change)
        assert response.status_code == 200, change
        assert_inert(response.content.decode(), payload, shown=False)
