"""/v1/models and /v1/chat/completions: the chat they reach, the prompt the model
gets, streaming, a tool call handed to the client and back, errors, isolation."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import HttpCommunicator
from django.test import Client

from memory import recording
from memory.models import Event, Fact
from neotask_site.asgi import application
from sessions_app import chat
from sessions_app.models import Agent, ApiToken, ChatInput, Session
from tests.support.scripted_llm import Reply, reply_with_tool

PATH = "/v1/chat/completions"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def alice_token(alice) -> str:
    return ApiToken.issue(alice, "open-webui")[1]


@pytest.fixture
def bob_token(bob) -> str:
    return ApiToken.issue(bob, "script")[1]


def hashed_key(first: str, agent: str = "main") -> str:
    return f"agent:{agent}:openai:{hashlib.sha256(first.encode()).hexdigest()[:16]}"


def post(client: Client, body: Any, **headers: str) -> Any:
    raw = body if isinstance(body, str) else json.dumps(body)
    return client.post(PATH, raw, content_type="application/json", headers=headers)


def events_of(owner, key: str) -> list[Event]:
    session = Session.objects.active(owner, key)
    assert session is not None
    return list(Event.objects.filter(session_id=str(session.pk)).order_by("id"))


def assert_openai_error(response, status: int, message: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert message in error["message"]
    return error


def test_it_lists_the_owners_agents_as_models(alice, bob, alice_token):
    Agent.objects.create(owner=alice, name="writer")
    Agent.objects.create(owner=bob, name="spy")
    body = Client(headers=bearer(alice_token)).get("/v1/models").json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["neotask/main", "neotask/writer"]
    assert {m["object"] for m in body["data"]} == {"model"}


@pytest.mark.parametrize("header", [None, "Bearer nt_abc_wrong", "Basic YWxpY2U6eA=="])
def test_it_refuses_a_missing_or_bad_token_in_openais_shape(alice_client, header):
    # alice's session cookie is sent too: only a token authenticates here.
    headers = {"Authorization": header} if header else {}
    for response in (
        alice_client.get("/v1/models", headers=headers),
        post(alice_client, {"model": "neotask/main", "messages": []}, **headers),
    ):
        error = assert_openai_error(response, 401, "API token")
        assert error["code"] == "invalid_api_key"
        assert response["WWW-Authenticate"].startswith("Bearer")
    assert not Session.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_it_answers_in_a_chat_keyed_by_the_first_message_with_memory_and_the_clients_system(
    alice, alice_token, llm
):
    Fact.objects.create(owner=alice, category="travel", key="home", value="Porto")
    api = Client(headers=bearer(alice_token))
    llm.script(Reply(text="Lisbon is lovely.", usage={"prompt_tokens": 40, "completion_tokens": 4}))
    system = {"role": "system", "content": "Answer like a pirate."}
    first = {"role": "user", "content": " Where to? "}
    response = post(api, {"model": "neotask/main", "messages": [system, first]})

    assert response.status_code == 200, response.content
    key = hashed_key("Where to?")
    assert response["X-Neotask-Chat"] == key
    body = response.json()
    assert body["object"] == "chat.completion" and body["model"] == "neotask/main"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Lisbon is lovely."}
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 40, "completion_tokens": 4, "total_tokens": 44}
    sent = llm.requests[-1]["messages"]
    # Neotask's prompt (with the user's facts), the client's system message kept after it.
    assert sent[0]["role"] == "system"
    assert "travel/home: Porto" in sent[0]["content"]
    assert sent[0]["content"].endswith("Answer like a pirate.")
    assert sent[-1] == {"role": "user", "content": "Where to?"}
    stored = events_of(alice, key)
    assert [(e.event_type, e.text) for e in stored] == [
        ("user_message", "Where to?"),
        ("assistant_response", "Lisbon is lovely."),
    ]

    # The client resends the conversation: the same chat, its history from Neotask.
    llm.script(Reply(text="Take the train."))
    reply = {"role": "assistant", "content": "Lisbon is lovely. (as the client saw it)"}
    follow = {"role": "user", "content": "How do I get there?"}
    response = post(api, {"model": "neotask/main", "messages": [system, first, reply, follow]})
    assert response.json()["choices"][0]["message"]["content"] == "Take the train."
    assert response["X-Neotask-Chat"] == key
    assert [m["content"] for m in llm.requests[-1]["messages"][1:]] == [
        "Where to?",
        "Lisbon is lovely.",
        "How do I get there?",
    ]
    assert Session.objects.filter(owner=alice).count() == 1
    assert len(events_of(alice, key)) == 4
    assert not ChatInput.objects.exists()  # read, then forgotten


@pytest.mark.django_db(transaction=True)
def test_it_picks_a_chat_by_header_or_user_field(alice, alice_token, llm):
    web = chat.start_chat(alice)
    api = Client(headers=bearer(alice_token))
    llm.script(Reply(text="In the web chat."), Reply(text="In a named chat."))
    hello = {"model": "neotask/main", "messages": [{"role": "user", "content": "Hello"}]}
    response = post(api, hello, **{"X-Neotask-Chat": web.key})
    assert response["X-Neotask-Chat"] == web.key
    assert [e.text for e in events_of(alice, web.key)] == ["Hello", "In the web chat."]
    response = post(api, {**hello, "user": "notes-2026"})
    assert response["X-Neotask-Chat"] == "agent:main:openai:notes-2026"
    assert events_of(alice, "agent:main:openai:notes-2026")[-1].text == "In a named chat."


@pytest.mark.django_db(transaction=True)
async def test_it_streams_the_answer_as_server_sent_events(alice, alice_token, llm):
    usage = {"prompt_tokens": 9, "completion_tokens": 4}
    # Paced: deltas that arrive together go out as one frame.
    llm.script(Reply(text="One two three four.", usage=usage, delay=0.05))
    body = {
        "model": "neotask/main",
        "messages": [{"role": "user", "content": "Count"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    # The ASGI application, as a server runs it (AsyncClient skips its per-request
    # thread context, which the stream's turn must not share).
    headers = [(b"host", b"127.0.0.1:8000"), (b"authorization", f"Bearer {alice_token}".encode())]
    headers.append((b"content-type", b"application/json"))
    post = HttpCommunicator(application, "POST", PATH, headers=headers)
    await post.send_input({"type": "http.request", "body": json.dumps(body).encode()})
    start = await post.receive_output(timeout=20)
    assert start["status"] == 200
    sent = {name.lower(): value for name, value in start["headers"]}
    assert sent[b"content-type"] == b"text/event-stream"
    assert sent[b"x-neotask-chat"] == hashed_key("Count").encode()
    parts = [await post.receive_output(timeout=20)]
    while parts[-1].get("more_body"):
        parts.append(await post.receive_output(timeout=20))
    raw = b"".join(part.get("body", b"") for part in parts).decode()
    lines = [line.removeprefix("data: ") for line in raw.split("\n\n") if line]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    texts = [c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]]
    assert len([t for t in texts if t]) > 1  # streamed in pieces, not sent at the end
    assert "".join(texts) == "One two three four."
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}
    stored = await sync_to_async(events_of)(alice, hashed_key("Count"))
    assert [e.text for e in stored] == ["Count", "One two three four."]


@pytest.mark.django_db(transaction=True)
async def test_it_finishes_and_stores_a_streamed_turn_whose_client_went_away(
    alice, alice_token, llm
):
    hold = threading.Event()
    llm.script(Reply(text="Still stored.", hold=hold))
    body = {
        "model": "neotask/main",
        "messages": [{"role": "user", "content": "Bye"}],
        "stream": True,
    }
    headers = [(b"host", b"127.0.0.1:8000"), (b"authorization", f"Bearer {alice_token}".encode())]
    post = HttpCommunicator(application, "POST", PATH, headers=headers)
    await post.send_input({"type": "http.request", "body": json.dumps(body).encode()})
    assert (await post.receive_output(timeout=20))["status"] == 200
    first = await post.receive_output(timeout=20)
    assert b'"role": "assistant"' in first["body"]
    await post.send_input({"type": "http.disconnect"})
    hold.set()
    key = hashed_key("Bye")
    for _ in range(100):
        stored = await sync_to_async(events_of)(alice, key)
        if len(stored) == 2:
            break
        await asyncio.sleep(0.1)
    assert [e.text for e in stored] == ["Bye", "Still stored."]


@pytest.mark.django_db(transaction=True)
def test_it_hands_a_client_tool_call_to_the_client_and_goes_on_from_its_result(
    alice, bob, alice_token, bob_token, llm, alice_client
):
    api = Client(headers=bearer(alice_token))
    asked = [{"role": "user", "content": "Weather in Oslo?"}]
    body = {"model": "neotask/main", "messages": asked, "tools": [WEATHER]}
    llm.script(reply_with_tool("get_weather", {"city": "Oslo"}))
    response = post(api, body)

    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    # Only the client's tools: Neotask's own stay server-side.
    assert [t["function"]["name"] for t in llm.requests[-1]["tools"]] == ["get_weather"]

    # Somebody else cannot answer it, nor can a call that is not waiting.
    result = {"role": "tool", "tool_call_id": call["id"], "content": "Sunny, 21 °C"}
    called = {"role": "assistant", "content": None, "tool_calls": [call]}
    follow_up = {**body, "messages": [*asked, called, result]}
    assert_openai_error(post(Client(headers=bearer(bob_token)), follow_up), 400, "not waiting")
    wrong = {**result, "tool_call_id": "call_made_up"}
    assert_openai_error(post(api, {**follow_up, "messages": [*asked, called, wrong]}), 400, "not")
    assert not Session.objects.filter(owner=bob).exists()

    llm.script(Reply(text="It is sunny in Oslo."))
    response = post(api, follow_up)
    choice = response.json()["choices"][0]
    assert choice["message"]["content"] == "It is sunny in Oslo."
    assert choice["finish_reason"] == "stop"
    sent = llm.requests[-1]["messages"]
    assert sent[-2]["tool_calls"][0]["id"] == call["id"]
    assert sent[-1] == {"role": "tool", "tool_call_id": call["id"], "content": "Sunny, 21 °C"}
    stored = events_of(alice, hashed_key("Weather in Oslo?"))
    assert [e.event_type for e in stored] == [
        "user_message",
        "assistant_response",
        "tool_call",
        "tool_result",
        "assistant_response",
    ]
    assert stored[0].data["turn_usage"]["input"] == 40  # both rounds' usage, with its message
    page = alice_client.get(f"/chat/{hashed_key('Weather in Oslo?')}/").content.decode()
    assert "<code>get_weather</code> (run by the client)" in page and "Sunny, 21 °C" in page


@pytest.mark.django_db(transaction=True)
def test_it_hands_over_a_client_tool_call_the_model_wrote_as_text(alice_token, llm):
    # As the embedded Qwen writes calls; an argument the tool does not take stays text.
    llm.script(
        Reply(text='{"name": "get_weather", "arguments": {"city": "Oslo"}}'),
        Reply(text='{"name": "get_weather", "arguments": {"town": "Oslo"}}'),
    )
    api = Client(headers=bearer(alice_token))
    for first in ("Weather?", "Weather, again?"):
        body = {"model": "neotask/main", "messages": [{"role": "user", "content": first}]}
        response = post(api, {**body, "tools": [WEATHER]}).json()
        choice = response["choices"][0]
        if first == "Weather?":
            assert choice["finish_reason"] == "tool_calls"
            assert choice["message"]["tool_calls"][0]["function"] == {
                "name": "get_weather",
                "arguments": '{"city": "Oslo"}',
            }
        else:
            assert choice["finish_reason"] == "stop"
            assert choice["message"]["content"].startswith('{"name": "get_weather"')


@pytest.mark.django_db(transaction=True)
def test_it_mixes_neotasks_tools_in_only_when_configured(alice_token, llm, configure):
    configure("llm", mix_client_tools=True)
    llm.script(Reply(text="Fine."))
    body = {"model": "neotask/main", "messages": [{"role": "user", "content": "Hi"}]}
    post(Client(headers=bearer(alice_token)), {**body, "tools": [WEATHER]})
    offered = [t["function"]["name"] for t in llm.requests[-1]["tools"]]
    assert "get_weather" in offered and "remember_fact" in offered


@pytest.mark.django_db(transaction=True)
def test_it_never_reaches_another_users_chat(alice, bob_token, llm):
    web = chat.start_chat(alice)
    recording.record(alice, str(web.pk), "user_message", {"content": "alice's secret plans"})
    named = Session.start(alice, Agent.objects.default_for(alice), "openai", "diary")
    bob = Client(headers=bearer(bob_token))
    hello = {"model": "neotask/main", "messages": [{"role": "user", "content": "Hello"}]}
    for key in (web.key, named.key):
        for response in (
            post(bob, hello, **{"X-Neotask-Chat": key}),
            post(bob, {**hello, "user": key}),
        ):
            error = assert_openai_error(response, 404, "no such chat")
            assert error["code"] == "chat_not_found"
    assert llm.requests == []
    assert not ChatInput.objects.exists()
    assert Event.objects.filter(owner=alice).count() == 1
    # The same name is bob's own chat, not alice's.
    llm.script(Reply(text="Hi Bob."))
    response = post(bob, {**hello, "user": "diary"})
    assert response.json()["choices"][0]["message"]["content"] == "Hi Bob."
    assert Event.objects.filter(session_id=str(named.pk)).count() == 0
    assert Agent.objects.filter(owner=alice, name="secret").count() == 0
    Agent.objects.create(owner=alice, name="secret")
    response = post(bob, {**hello, "model": "neotask/secret"})
    assert assert_openai_error(response, 404, "does not exist")["code"] == "model_not_found"


@pytest.mark.parametrize(
    ("raw", "status", "message"),
    [
        ("{not json", 400, "not valid JSON"),
        ('["Hi"]', 400, "JSON object"),
        ({"model": "neotask/main"}, 400, "'messages'"),
        ({"model": "neotask/main", "messages": []}, 400, "'messages'"),
        ({"messages": [{"role": "user", "content": "Hi"}]}, 400, "Name a model"),
        ({"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]}, 404, "gpt-4o"),
        ({"model": "neotask/main", "messages": [{"role": "wizard", "content": "Hi"}]}, 400, "role"),
        ({"model": "neotask/main", "messages": ["Hi"]}, 400, "must be an object"),
        (
            {"model": "neotask/main", "messages": [{"role": "assistant", "content": "Hi"}]},
            400,
            "at least one user message",
        ),
        (
            {
                "model": "neotask/main",
                "messages": [
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello"},
                ],
            },
            400,
            "last message",
        ),
        ({"model": "neotask/main", "messages": [{"role": "user", "content": "  "}]}, 400, "empty"),
        (
            {
                "model": "neotask/main",
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
                ],
            },
            400,
            "only text",
        ),
        (
            {
                "model": "neotask/main",
                "messages": [{"role": "user", "content": "Hi"}],
                "tools": [{}],
            },
            400,
            "tools[0]",
        ),
        (
            {
                "model": "neotask/main",
                "messages": [{"role": "user", "content": "Hi"}],
                "user": "a b",
            },
            400,
            "chat name",
        ),
        (
            {
                "model": "neotask/main",
                "messages": [{"role": "user", "content": "Hi"}],
                "stream": "yes",
            },
            400,
            "'stream'",
        ),
        (
            {
                "model": "neotask/main",
                "messages": [
                    {"role": "user", "content": "Hi"},
                    {"role": "tool", "tool_call_id": "call_1", "content": "42"},
                ],
            },
            400,
            "not waiting",
        ),
        (
            {
                "model": "neotask/main",
                "messages": [
                    {"role": "system", "content": "Be\x00 brief"},
                    {"role": "user", "content": "Hi"},
                ],
            },
            400,
            "NUL",
        ),
        (
            {
                "model": "neotask/main",
                "messages": [
                    {"role": "system", "content": "x" * 300_000},
                    {"role": "user", "content": "Hi"},
                ],
            },
            400,
            "256 KB",
        ),
    ],
)
def test_it_refuses_bad_requests_without_writing_anything(alice_token, llm, raw, status, message):
    response = post(Client(headers=bearer(alice_token)), raw)
    assert_openai_error(response, status, message)
    assert not Session.objects.exists() and not ChatInput.objects.exists()
    assert llm.requests == []


def test_it_answers_other_methods_and_paths_in_openais_shape(alice_token):
    api = Client(headers=bearer(alice_token))
    assert_openai_error(api.get(PATH), 405, "Use POST")
    assert_openai_error(api.post("/v1/models"), 405, "Use GET")
    assert_openai_error(api.post("/v1/embeddings"), 404, "/v1/chat/completions only")


@pytest.mark.django_db(transaction=True)
def test_it_reports_a_failed_turn_as_a_server_error_not_to_retry(alice, alice_token, llm):
    llm.script(Reply(status=500, error="the model fell over"))
    body = {"model": "neotask/main", "messages": [{"role": "user", "content": "Hi"}]}
    response = post(Client(headers=bearer(alice_token)), body)
    assert assert_openai_error(response, 502, "")["type"] == "server_error"
    assert response["x-should-retry"] == "false"
    assert events_of(alice, hashed_key("Hi"))[-1].event_type == "error"


@pytest.mark.django_db(transaction=True)
async def test_it_answers_429_with_retry_after_when_the_quota_refuses(
    alice, alice_token, llm, configure
):
    configure("quotas", messages_per_minute=1)
    llm.script(Reply(text="Fine."))
    api = Client(headers=bearer(alice_token))
    first = {"model": "neotask/main", "messages": [{"role": "user", "content": "One"}]}
    assert (await sync_to_async(post)(api, first)).status_code == 200
    second = {**first, "messages": [{"role": "user", "content": "Two"}]}
    response = await sync_to_async(post)(api, second)
    assert assert_openai_error(response, 429, "this minute")["code"] == "messages_per_minute"
    assert 1 <= int(response["Retry-After"]) <= 60
    # Streamed: refused before a byte of the stream, so a real 429 too.
    headers = [(b"host", b"127.0.0.1:8000"), (b"authorization", f"Bearer {alice_token}".encode())]
    stream = HttpCommunicator(application, "POST", PATH, headers=headers)
    body = {**second, "stream": True}
    await stream.send_input({"type": "http.request", "body": json.dumps(body).encode()})
    start = await stream.receive_output(timeout=20)
    assert start["status"] == 429
    assert b"retry-after" in {name.lower() for name, _ in start["headers"]}
    # Nothing of the refused inputs was stored (their chat may exist, empty).
    assert await sync_to_async(events_of)(alice, hashed_key("Two")) == []
    assert await ChatInput.objects.filter(text="Two").acount() == 0
