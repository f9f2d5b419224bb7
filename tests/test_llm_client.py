from __future__ import annotations

import socket
import ssl
import subprocess
from dataclasses import replace

import httpx
import pytest

from agent.llm import LOCAL_MODEL_LABEL, LLMClient, LLMError, Usage, configured_endpoint
from tests.support.scripted_llm import Reply, reply_with_tool

MESSAGES = [{"role": "user", "content": "Hi"}]


def client() -> LLMClient:
    return LLMClient(configured_endpoint())


async def test_it_streams_deltas_in_order(llm):
    llm.script(Reply(deltas=["Hel", "lo", ", wor", "ld"]))
    seen: list[str] = []

    async def on_delta(text: str) -> None:
        seen.append(text)

    completion = await client().stream(MESSAGES, on_delta=on_delta)
    assert seen == ["Hel", "lo", ", wor", "ld"]
    assert completion.content == "Hello, world"
    assert completion.finish_reason == "stop"
    request = llm.requests[0]
    assert request["stream"] is True
    assert request["model"] == "scripted"
    assert request["messages"] == MESSAGES


async def test_it_assembles_tool_calls_from_pieces(llm):
    llm.script(reply_with_tool("remember_fact", {"category": "pref", "key": "k", "value": "v"}))
    tools = [{"type": "function", "function": {"name": "remember_fact", "parameters": {}}}]
    completion = await client().stream(MESSAGES, tools=tools)
    [call] = completion.tool_calls
    assert call.name == "remember_fact"
    assert call.arguments == '{"category": "pref", "key": "k", "value": "v"}'
    assert call.id
    assert completion.finish_reason == "tool_calls"
    assert llm.requests[0]["tools"] == tools


async def test_it_reports_usage_with_cache_fields(llm):
    llm.script(
        Reply(
            text="ok",
            usage={
                "prompt_tokens": 120,
                "completion_tokens": 7,
                "prompt_tokens_details": {"cached_tokens": 100},
                "cache_creation_input_tokens": 12,
            },
        ),
        Reply(text="ok", usage=None),
    )
    assert (await client().stream(MESSAGES)).usage == Usage(120, 7, 100, 12)
    assert (await client().stream(MESSAGES)).usage == Usage(0, 0, 0, 0)


@pytest.mark.parametrize(
    ("reply", "kind", "words"),
    [
        (Reply(status=429, headers={"Retry-After": "7"}), "rate_limited", "Try again in 7 s"),
        (Reply(status=500, error="boom"), "server_error", "failed (500): boom"),
        (Reply(status=404, error="model nope"), "bad_request", "Check [llm] model"),
    ],
)
async def test_it_explains_http_errors(llm, reply, kind, words):
    llm.script(reply)
    with pytest.raises(LLMError) as info:
        await client().stream(MESSAGES)
    assert info.value.kind == kind
    assert words in str(info.value)


async def test_it_explains_a_refused_api_key(llm, configure):
    configure("llm", api_key="wrong")
    with pytest.raises(LLMError) as info:
        await client().stream(MESSAGES)
    assert info.value.kind == "auth"
    assert "NEOTASK_LLM_API_KEY" in str(info.value)


async def test_it_explains_an_endpoint_that_is_down(configure):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    configure("llm", base_url=f"http://127.0.0.1:{port}/v1")
    with pytest.raises(LLMError) as info:
        await client().stream(MESSAGES)
    assert info.value.kind == "unavailable"
    # Every user reads it: it names the setting, not the URL (issue 40, L10).
    assert "[llm] base_url" in str(info.value) and f"127.0.0.1:{port}" not in str(info.value)


async def test_it_times_out_a_stalled_stream(llm, configure):
    configure("llm", request_timeout=1.0)
    llm.script(Reply(deltas=["first", "late"], delay=1.6))
    with pytest.raises(LLMError) as info:
        await client().stream(MESSAGES)
    assert info.value.kind == "timeout"
    assert "within 1 s" in str(info.value)


async def test_it_keeps_the_partial_answer_of_a_cut_stream(llm):
    llm.script(Reply(deltas=["Once ", "upon ", "a ", "time"], cut_after=2))
    seen: list[str] = []

    async def on_delta(text: str) -> None:
        seen.append(text)

    with pytest.raises(LLMError) as info:
        await client().stream(MESSAGES, on_delta=on_delta)
    assert info.value.kind == "interrupted"
    assert info.value.partial.content == "Once upon "
    assert seen == ["Once ", "upon "]


async def test_it_rejects_a_malformed_chunk(llm):
    llm.script(Reply(raw=["data: {not json", "data: [DONE]"]))
    with pytest.raises(LLMError) as info:
        await client().stream(MESSAGES)
    assert info.value.kind == "bad_response"


async def test_it_ignores_comments_and_accepts_a_stream_without_done(llm):
    final = '{"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}'
    llm.script(Reply(raw=[": keep-alive", "event: message", f"data: {final}"]))
    assert (await client().stream(MESSAGES)).content == "hi"


async def test_it_says_what_to_configure_without_any_endpoint(configure, monkeypatch):
    monkeypatch.delenv("NEOTASK_LOCAL_LLM_URL", raising=False)
    configure("llm", base_url="")
    endpoint = configured_endpoint()
    assert endpoint.is_local
    with pytest.raises(LLMError) as info:
        await LLMClient(endpoint).stream(MESSAGES)
    assert info.value.kind == "not_configured"
    assert "make run" in str(info.value) and "base_url" in str(info.value)


async def test_it_answers_turn_after_turn_on_one_connection(llm, monkeypatch):
    accepted = []
    accept = llm.server.process_request
    monkeypatch.setattr(
        llm.server, "process_request", lambda *args: (accepted.append(1), accept(*args))
    )
    for text in ("One", "Two", "Three"):
        llm.script(Reply(text=text))
        assert (await client().stream(MESSAGES)).content == text
    assert len(accepted) == 1  # read to its end, each response left the connection open


def test_it_uses_the_fast_model_when_asked(configure):
    configure("llm", base_url="http://x/v1", model="big", fast_model="small")
    assert configured_endpoint().model == "big"
    assert configured_endpoint(fast=True).model == "small"
    configure("llm", fast_model="")
    assert configured_endpoint(fast=True).model == "big"


def test_its_connections_run_on_asyncio_streams():
    # agent.transport replaces the pool httpx builds: should httpx rename it,
    # the client would quietly fall back to anyio (slower, not wrong).
    from agent.transport import AsyncioBackend, asyncio_transport

    transport = asyncio_transport(httpx.Limits())
    assert isinstance(transport._pool._network_backend, AsyncioBackend)


@pytest.fixture
def tls_llm(llm, configure, tmp_path):
    """The scripted LLM behind TLS, with a certificate of its own; returns the
    certificate's file."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    llm.server.socket = context.wrap_socket(llm.server.socket, server_side=True)
    configure("llm", base_url=llm.url.replace("http://", "https://"))
    return cert


async def test_it_streams_over_tls(llm, tls_llm, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_llm))  # trusted by this test's client
    llm.script(Reply(deltas=["Sealed ", "and ", "sent"]))
    seen: list[str] = []

    async def on_delta(text: str) -> None:
        seen.append(text)

    completion = await client().stream(MESSAGES, on_delta=on_delta)
    assert (seen, completion.content) == (["Sealed ", "and ", "sent"], "Sealed and sent")


async def test_it_refuses_a_server_it_does_not_trust(llm, tls_llm):
    llm.script(Reply(text="Never sent"))
    with pytest.raises(LLMError) as info:
        await client().stream(MESSAGES)
    assert info.value.kind == "unavailable"
    assert llm.requests == []


async def test_it_sends_other_servers_one_system_message_and_the_embedded_model_two(llm):
    prompt = [
        {"role": "system", "content": "Instructions."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "system", "content": "Context."},
        {"role": "user", "content": "again"},
    ]
    llm.script(Reply("ok"), Reply("ok"))
    await client().stream(prompt)
    # Some chat templates (Gemma's, older Mistral's) refuse a second system message,
    # or one after the conversation started.
    assert llm.requests[0]["messages"] == [
        {"role": "system", "content": "Instructions.\n\nContext."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "again"},
    ]
    embedded = replace(configured_endpoint(), label=LOCAL_MODEL_LABEL)
    await LLMClient(embedded).stream(prompt)
    assert llm.requests[1]["messages"] == prompt  # its template keeps the prefix cacheable
