from __future__ import annotations

import json
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.testing import HttpCommunicator
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from memory import recording
from memory.models import Event
from neotask_site.asgi import application
from sessions_app import chat
from sessions_app.models import Agent, ApiToken, Session, hash_secret
from sessions_app.transcripts import event_record
from sessions_app.turns import rollover
from tests.support.scripted_llm import Reply
from tests.support.web import client_for


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def alice_token(alice) -> str:
    return ApiToken.issue(alice, "script")[1]


@pytest.fixture
def api(alice_token) -> Client:
    """A program: no cookie, only alice's token."""
    return Client(headers=bearer(alice_token))


@pytest.fixture
def secret_session(alice) -> Session:
    """A chat of alice's with her secret in it."""
    session = chat.start_chat(alice)
    recording.record(alice, str(session.pk), "user_message", {"content": "alice's secret plans"})
    return session


def endpoints(session: Session) -> list[tuple[str, str]]:
    base = f"/api/v1/sessions/{session.pk}/"
    return [
        ("get", base),
        ("delete", base),
        ("get", f"{base}transcript.jsonl"),
        ("post", f"{base}messages"),
    ]


def post_json(client: Client, path: str, body: object, **extra) -> object:
    return client.post(path, json.dumps(body), content_type="application/json", **extra)


# Authentication


def test_it_lists_sessions_with_a_token_newest_first(alice, bob, api):
    older = chat.start_chat(alice)
    Session.objects.filter(pk=older.pk).update(created_at=timezone.now() - timedelta(days=1))
    newer = chat.start_chat(alice)
    chat.start_chat(bob)
    body = api.get("/api/v1/sessions/").json()
    assert [s["id"] for s in body["sessions"]] == [str(newer.pk), str(older.pk)]
    assert body["count"] == 2 and body["next_page"] is None
    first = body["sessions"][0]
    assert first["key"] == newer.key and first["agent"] == "main" and first["status"] == "active"
    assert first["tokens"] == {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0}
    assert {"title", "created_at", "last_activity_at"} <= first.keys()


def test_it_accepts_the_browser_session(alice, alice_client, secret_session):
    body = alice_client.get("/api/v1/sessions/").json()
    assert [s["id"] for s in body["sessions"]] == [str(secret_session.pk)]
    assert alice_client.get(f"/api/v1/sessions/{secret_session.pk}/").status_code == 200


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Bearer nt_unknown_secret",
        "Bearer not-a-token",
        "Bearer ",
        "Basic YWxpY2U6YWxpY2UtcGFzc3dvcmQ=",
    ],
)
def test_it_refuses_missing_and_bad_tokens(header, secret_session):
    client = Client(headers={"Authorization": header} if header else {})
    for method, path in [("get", "/api/v1/sessions/"), *endpoints(secret_session)]:
        response = getattr(client, method)(path)
        assert response.status_code == 401, (method, path)
        assert "error" in response.json()
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert b"secret plans" not in response.content
    assert Session.objects.filter(pk=secret_session.pk).exists()


def test_it_refuses_a_token_with_the_right_prefix_and_a_wrong_secret(alice, alice_token):
    forged = alice_token[:-4] + "AAAA"
    assert Client(headers=bearer(forged)).get("/api/v1/sessions/").status_code == 401


def test_it_refuses_a_revoked_token_and_a_token_of_an_inactive_user(alice, alice_token, api):
    token = ApiToken.objects.get(owner=alice)
    token.revoke()
    assert api.get("/api/v1/sessions/").status_code == 401
    second = ApiToken.issue(alice, "second")[1]
    User.objects.filter(pk=alice.pk).update(is_active=False)
    assert Client(headers=bearer(second)).get("/api/v1/sessions/").status_code == 401


def test_it_prefers_a_bad_token_over_a_good_session_cookie(alice_client):
    response = alice_client.get("/api/v1/sessions/", headers=bearer("nt_abc_wrong"))
    assert response.status_code == 401


def test_it_stores_only_a_hash_of_the_token_secret(alice):
    token, full = ApiToken.issue(alice, "backup")
    scheme, prefix, secret = full.split("_", 2)
    assert scheme == "nt" and prefix == token.prefix and len(secret) >= 40
    row = ApiToken.objects.filter(pk=token.pk).values().get()
    assert row["secret_hash"] == hash_secret(secret)
    assert not any(secret in str(value) for value in row.values())
    assert secret not in str(token) and token.masked == f"nt_{prefix}_…"


def test_it_notes_when_a_token_was_last_used_at_most_once_a_minute(alice, api):
    assert ApiToken.objects.get(owner=alice).last_used_at is None
    api.get("/api/v1/sessions/")
    first = ApiToken.objects.get(owner=alice).last_used_at
    assert first is not None
    api.get("/api/v1/sessions/")
    assert ApiToken.objects.get(owner=alice).last_used_at == first
    ApiToken.objects.filter(owner=alice).update(last_used_at=first - timedelta(seconds=61))
    api.get("/api/v1/sessions/")
    assert ApiToken.objects.get(owner=alice).last_used_at > first


def test_it_checks_csrf_for_the_browser_session_but_not_for_tokens(alice, alice_token):
    browser = client_for(alice, enforce_csrf_checks=True)
    response = post_json(browser, "/api/v1/sessions/", {})
    assert response.status_code == 403 and "CSRF" in response.json()["error"]
    browser.get("/settings/tokens/")  # sets the CSRF cookie, as any page does
    csrf = browser.cookies["csrftoken"].value
    assert post_json(browser, "/api/v1/sessions/", {}, HTTP_X_CSRFTOKEN=csrf).status_code == 201
    program = Client(enforce_csrf_checks=True, headers=bearer(alice_token))
    assert post_json(program, "/api/v1/sessions/", {}).status_code == 201


# Ownership and errors


def test_it_answers_404_for_another_users_session_on_every_endpoint(bob, secret_session):
    bobs_token = ApiToken.issue(bob, "bob's script")[1]
    bob_browser = client_for(bob)
    for client in (Client(headers=bearer(bobs_token)), bob_browser):
        for method, path in endpoints(secret_session):
            response = getattr(client, method)(path)
            assert response.status_code == 404, (method, path)
            assert response.json() == {"error": "Not found."}
        assert client.get("/api/v1/sessions/").json()["sessions"] == []
    assert Session.objects.filter(pk=secret_session.pk).exists()
    assert Event.objects.filter(session_id=str(secret_session.pk)).count() == 1


@pytest.mark.parametrize("pk", ["not-a-uuid", "00000000-0000-0000-0000-000000000000"])
def test_it_answers_404_in_json_for_unknown_sessions(api, pk):
    response = api.get(f"/api/v1/sessions/{pk}/")
    assert response.status_code == 404 and response.json() == {"error": "Not found."}


def test_it_answers_405_for_wrong_methods(api, secret_session):
    response = api.put("/api/v1/sessions/")
    assert response.status_code == 405 and response["Allow"] == "GET, POST"
    assert api.post(f"/api/v1/sessions/{secret_session.pk}/").status_code == 405
    assert api.get(f"/api/v1/sessions/{secret_session.pk}/messages").status_code == 405
    assert api.delete(f"/api/v1/sessions/{secret_session.pk}/transcript.jsonl").status_code == 405


# Sessions


def test_it_describes_a_session_in_its_stable_fields(alice, api):
    old = chat.start_chat(alice)
    session = rollover(old, "/new")
    Session.objects.filter(pk=session.pk).update(
        title="Trip", compaction_count=2, input_tokens=100, output_tokens=20
    )
    session.refresh_from_db()
    body = api.get(f"/api/v1/sessions/{session.pk}/").json()["session"]
    assert list(body.items()) == [
        ("id", str(session.pk)),
        ("key", session.key),
        ("title", "Trip"),
        ("status", "active"),
        ("agent", "main"),
        ("tokens", {"input": 100, "output": 20, "cache_read": 0, "cache_write": 0}),
        ("compaction_count", 2),
        ("continues_from", str(old.pk)),
        ("created_at", session.created_at.isoformat()),
        ("last_activity_at", session.last_activity_at.isoformat()),
    ]
    assert api.get("/api/v1/sessions/").json()["sessions"][0] == body


def test_it_paginates_sessions_fifty_a_page(alice, api):
    agent = Agent.objects.default_for(alice)
    Session.objects.bulk_create(
        Session(owner=alice, agent=agent, key=f"agent:main:web:c{i}", channel="web", chat=f"c{i}")
        for i in range(51)
    )
    first = api.get("/api/v1/sessions/").json()
    assert len(first["sessions"]) == 50
    assert (first["page"], first["pages"], first["count"], first["next_page"]) == (1, 2, 51, 2)
    second = api.get("/api/v1/sessions/?page=2").json()
    assert len(second["sessions"]) == 1 and second["next_page"] is None
    seen = {s["id"] for s in first["sessions"] + second["sessions"]}
    assert len(seen) == 51
    for page in ("3", "0", "x"):
        response = api.get(f"/api/v1/sessions/?page={page}")
        assert response.status_code == 400 and "page" in response.json()["error"]


def test_it_starts_a_session_for_an_agent(alice, api):
    response = post_json(api, "/api/v1/sessions/", {})
    assert response.status_code == 201
    body = response.json()
    session = Session.objects.get(pk=body["id"], owner=alice)
    assert response["Location"] == f"/api/v1/sessions/{session.pk}/"
    assert body["agent"] == "main" and session.channel == "web"
    Agent.objects.create(owner=alice, name="research")
    body = post_json(api, "/api/v1/sessions/", {"agent": "research"}).json()
    assert body["agent"] == "research" and body["key"].startswith("agent:research:web:")
    empty = api.post("/api/v1/sessions/", "", content_type="application/json")
    assert empty.status_code == 201


def test_it_starts_sessions_only_for_the_users_own_agents(alice, bob, api):
    Agent.objects.create(owner=bob, name="bobs-agent")
    for body in ({"agent": "bobs-agent"}, {"agent": 7}, ["main"]):
        response = post_json(api, "/api/v1/sessions/", body)
        assert response.status_code == 400, body
        assert "error" in response.json()
    assert not Session.objects.filter(owner=alice).exists()


def test_it_reads_a_session_with_its_events_in_pages(alice, api):
    session = chat.start_chat(alice)
    events = [
        recording.record(alice, str(session.pk), "user_message", {"content": f"message {i}"})
        for i in range(5)
    ]
    body = api.get(f"/api/v1/sessions/{session.pk}/?limit=2").json()
    assert body["session"]["id"] == str(session.pk)
    assert body["events"] == [events[0].as_dict(), events[1].as_dict()]
    assert body["next_after"] == events[1].pk
    body = api.get(f"/api/v1/sessions/{session.pk}/?after={events[1].pk}&limit=2").json()
    assert [e["text"] for e in body["events"]] == ["message 2", "message 3"]
    body = api.get(f"/api/v1/sessions/{session.pk}/?after={events[3].pk}").json()
    assert [e["id"] for e in body["events"]] == [events[4].pk]
    assert body["next_after"] is None
    for query in ("limit=0", "limit=201", "limit=x", "after=-1", "after=x"):
        response = api.get(f"/api/v1/sessions/{session.pk}/?{query}")
        assert response.status_code == 400, query


def test_it_deletes_a_session_and_its_events(alice, api, secret_session):
    other = chat.start_chat(alice)
    response = api.delete(f"/api/v1/sessions/{secret_session.pk}/")
    assert response.status_code == 204
    assert not Session.objects.filter(pk=secret_session.pk).exists()
    assert not Event.objects.filter(session_id=str(secret_session.pk)).exists()
    assert Session.objects.filter(pk=other.pk).exists()
    assert api.delete(f"/api/v1/sessions/{secret_session.pk}/").status_code == 404


def patch_json(client: Client, path: str, body: object) -> object:
    return client.patch(path, json.dumps(body), content_type="application/json")


def test_it_renames_a_chat_and_all_its_sessions(alice, bob, api, secret_session):
    archived = Session.objects.create(
        owner=alice, agent=secret_session.agent, key=secret_session.key, status="archived"
    )
    bobs = chat.start_chat(bob)
    response = patch_json(api, f"/api/v1/chats/{secret_session.key}/", {"title": "  Trip plans "})
    assert response.status_code == 200
    assert response.json()["title"] == "Trip plans"
    titles = Session.objects.filter(pk__in=[secret_session.pk, archived.pk]).values_list("title")
    assert {title for (title,) in titles} == {"Trip plans"}
    # Bob's chat is not alice's to name, and an unknown key names nothing.
    assert patch_json(api, f"/api/v1/chats/{bobs.key}/", {"title": "Mine"}).status_code == 404
    assert patch_json(api, "/api/v1/chats/agent:main:web:nope/", {"title": "x"}).status_code == 404
    bobs.refresh_from_db()
    assert bobs.title != "Mine"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({}, "Send the new title as a string"),
        ({"title": 5}, "Send the new title as a string"),
        ({"title": "   "}, "Give the chat a title."),
        ({"title": "x" * 1000}, "A title can have at most"),
    ],
)
def test_it_refuses_bad_chat_titles(api, secret_session, body, error):
    response = patch_json(api, f"/api/v1/chats/{secret_session.key}/", body)
    assert response.status_code == 400
    assert error in response.json()["error"]
    secret_session.refresh_from_db()
    assert secret_session.title == ""


def test_it_downloads_the_transcript_as_jsonl(alice, alice_client, api, secret_session):
    recording.record(alice, str(secret_session.pk), "assistant_response", {"content": "Olá — fine"})
    stored = Event.objects.filter(session_id=str(secret_session.pk)).order_by("id")
    for client in (api, alice_client):
        response = client.get(f"/api/v1/sessions/{secret_session.pk}/transcript.jsonl")
        assert response.status_code == 200
        assert response["Content-Type"].startswith("application/jsonl")
        assert f'filename="{secret_session.pk}.jsonl"' in response["Content-Disposition"]
        lines = b"".join(response.streaming_content).decode().splitlines()
        assert [json.loads(line) for line in lines] == [event_record(e) for e in stored]
        assert "Olá — fine" in lines[1]


# Messages


@pytest.mark.django_db(transaction=True)
def test_it_posts_a_message_and_answers_with_the_turn(alice, api, llm):
    session = chat.start_chat(alice)
    llm.script(Reply(text="Lisbon is lovely.", usage={"prompt_tokens": 40, "completion_tokens": 4}))
    response = post_json(api, f"/api/v1/sessions/{session.pk}/messages", {"text": " Where to? "})
    assert response.status_code == 200
    body = response.json()
    assert body["answer"] == "Lisbon is lovely."
    assert body["status"] == "completed" and body["error"] is None
    assert body["usage"] == {"input": 40, "output": 4, "cache_read": 0, "cache_write": 0}
    stored = Event.objects.filter(session_id=str(session.pk)).order_by("id")
    assert body["events"] == [e.as_dict() for e in stored]
    assert [e["event_type"] for e in body["events"]] == ["user_message", "assistant_response"]
    assert body["events"][0]["data"]["content"] == "Where to?"
    session.refresh_from_db()
    assert (session.input_tokens, session.output_tokens) == (40, 4)
    assert session.title == "Where to?"
    assert llm.requests[-1]["messages"][-1]["content"] == "Where to?"
    assert body["session_id"] == str(session.pk) and body["session_changes"] == []


@pytest.mark.django_db(transaction=True)
def test_it_answers_in_the_next_session_after_a_daily_reset(
    alice, api, secret_session, llm, configure
):
    configure("sessions", daily_reset_hour=4, idle_minutes=0)
    two_days_ago = timezone.now() - timedelta(days=2)
    Session.objects.filter(pk=secret_session.pk).update(last_activity_at=two_days_ago)
    llm.script(Reply(text="Good morning."))
    response = post_json(api, f"/api/v1/sessions/{secret_session.pk}/messages", {"text": "Hi"})
    body = response.json()
    fresh = Session.objects.get(owner=alice, key=secret_session.key, status=Session.Status.ACTIVE)
    assert fresh.pk != secret_session.pk and body["answer"] == "Good morning."
    assert body["session_id"] == str(fresh.pk)
    assert body["session_changes"] == [
        {"session_id": str(fresh.pk), "reason": "daily reset at 04:00"}
    ]
    assert {e["session_id"] for e in body["events"]} == {str(fresh.pk)}


@pytest.mark.django_db(transaction=True)
async def test_it_runs_a_turn_and_streams_a_transcript_under_asgi(alice, alice_token, llm):
    session = await sync_to_async(chat.start_chat)(alice)
    llm.script(Reply(text="Served."))
    headers = [(b"host", b"127.0.0.1:8000"), (b"authorization", f"Bearer {alice_token}".encode())]
    base = f"/api/v1/sessions/{session.pk}/"
    body = json.dumps({"text": "Hi"}).encode()
    post = HttpCommunicator(application, "POST", f"{base}messages", body=body, headers=headers)
    response = await post.get_response(timeout=10)
    assert response["status"] == 200
    assert json.loads(response["body"])["answer"] == "Served."
    get = HttpCommunicator(application, "GET", f"{base}transcript.jsonl", headers=headers)
    await get.send_input({"type": "http.request", "body": b""})
    assert (await get.receive_output(timeout=10))["status"] == 200
    # Read by hand: get_response() expects a body in the last, empty message of a stream.
    chunks = [await get.receive_output(timeout=10)]
    while chunks[-1].get("more_body"):
        chunks.append(await get.receive_output(timeout=10))
    lines = b"".join(chunk.get("body", b"") for chunk in chunks).splitlines()
    assert [json.loads(line)["content"] for line in lines] == ["Hi", "Served."]


@pytest.mark.django_db(transaction=True)
def test_it_posts_a_message_with_the_browser_session(alice, alice_client, llm):
    session = chat.start_chat(alice)
    llm.script(Reply(text="Hi."))
    response = post_json(alice_client, f"/api/v1/sessions/{session.pk}/messages", {"text": "Hi"})
    assert response.status_code == 200 and response.json()["answer"] == "Hi."


@pytest.mark.django_db(transaction=True)
def test_it_reports_a_failed_turn(alice, api, llm):
    session = chat.start_chat(alice)
    llm.script(Reply(status=500, error="the model fell over"))
    body = post_json(api, f"/api/v1/sessions/{session.pk}/messages", {"text": "Hi"}).json()
    assert body["status"] == "error" and body["error"]
    assert body["events"][-1]["event_type"] == "error"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{not json", "not valid JSON"),
        ('["Hi"]', "JSON object"),
        ("{}", '{"text": "Hello"}'),
        ('{"text": 42}', "must be a string"),
        ('{"text": "   "}', "empty"),
        (json.dumps({"text": "x" * (chat.MAX_MESSAGE_BYTES + 1)}), "longer than"),
        ('{"text": "/new"}', "Slash commands"),
    ],
)
def test_it_refuses_bad_messages(api, secret_session, llm, raw, message):
    path = f"/api/v1/sessions/{secret_session.pk}/messages"
    response = api.post(path, raw, content_type="application/json")
    assert response.status_code == 400
    assert message in response.json()["error"]
    assert llm.requests == []


def test_it_refuses_messages_to_an_archived_session(alice, api, secret_session):
    fresh = rollover(secret_session, "/new")
    response = post_json(api, f"/api/v1/sessions/{secret_session.pk}/messages", {"text": "Hi"})
    assert response.status_code == 409
    assert response.json()["active_session"] == str(fresh.pk)


# The token page


def test_it_creates_a_token_and_shows_its_secret_once(alice, alice_client):
    response = alice_client.post("/settings/tokens/", {"name": "backup"}, HTTP_HX_REQUEST="true")
    content = response.content.decode()
    token = ApiToken.objects.get(owner=alice)
    assert token.name == "backup"
    shown = content.split('id="new-token">')[1].split("<")[0]
    assert shown.startswith(f"nt_{token.prefix}_")
    assert "<html" not in content  # a partial for htmx
    assert Client(headers=bearer(shown)).get("/api/v1/sessions/").status_code == 200
    page = alice_client.get("/settings/tokens/").content.decode()
    assert "backup" in page and token.masked in page and shown not in page


def test_it_refuses_a_token_without_a_name(alice, alice_client):
    response = alice_client.post("/settings/tokens/", {"name": ""})
    assert response.status_code == 200 and "required" in response.content.decode()
    assert not ApiToken.objects.exists()


def test_it_revokes_a_token_in_place(alice, alice_client, alice_token):
    token = ApiToken.objects.get(owner=alice)
    response = alice_client.post(f"/settings/tokens/{token.pk}/revoke/", HTTP_HX_REQUEST="true")
    content = response.content.decode()
    assert content.strip().startswith(f'<tr id="token-{token.pk}"') and "Revoked" in content
    token.refresh_from_db()
    assert token.is_revoked
    assert Client(headers=bearer(alice_token)).get("/api/v1/sessions/").status_code == 401
    response = alice_client.post(f"/settings/tokens/{token.pk}/revoke/")
    assert response["Location"] == "/settings/tokens/"
    assert alice_client.get(f"/settings/tokens/{token.pk}/revoke/").status_code == 405


def test_it_shows_and_revokes_only_the_users_own_tokens(alice, bob_client):
    token = ApiToken.issue(alice, "alice's deploy key")[0]
    assert "deploy key" not in bob_client.get("/settings/tokens/").content.decode()
    assert bob_client.post(f"/settings/tokens/{token.pk}/revoke/").status_code == 404
    token.refresh_from_db()
    assert not token.is_revoked


def test_it_links_the_token_page_from_the_nav(alice_client):
    assert 'href="/settings/tokens/"' in alice_client.get("/sessions/").content.decode()
