"""The embedded model, for real: llama.cpp serving SmolLM2-135M on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.llm import LOCAL_MODEL_LABEL, Endpoint, LLMClient, LLMError
from agent.local_model import LocalModelError, bundled_model_path, model_path, start_server
from tests.support.processes import free_port

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_server():
    port = free_port()
    server = start_server(bundled_model_path(), port, "local-test-key-123456", 2048)
    yield f"http://127.0.0.1:{port}/v1"
    del server


def endpoint(url: str, key: str) -> Endpoint:
    return Endpoint(url, key, "local", 2048, 60.0, LOCAL_MODEL_LABEL, 512)


async def test_it_streams_an_answer_from_the_embedded_model(local_server):
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    client = LLMClient(endpoint(local_server, "local-test-key-123456"))
    completion = await client.stream(
        [{"role": "user", "content": "Say hello."}], on_delta=on_delta, max_tokens=24
    )
    assert completion.content.strip()
    assert "".join(deltas) == completion.content
    assert completion.usage.output > 0


async def test_it_stops_an_answer_at_max_answer_tokens(local_server):
    short = Endpoint(
        local_server, "local-test-key-123456", "local", 2048, 60.0, LOCAL_MODEL_LABEL, 4
    )
    prompt = [{"role": "user", "content": "Write a long story about a dragon and a knight."}]
    completion = await LLMClient(short).stream(prompt)
    assert completion.finish_reason == "length"
    assert completion.usage.output == 4


async def test_it_refuses_a_wrong_key(local_server):
    with pytest.raises(LLMError) as info:
        await LLMClient(endpoint(local_server, "wrong")).stream(
            [{"role": "user", "content": "hi"}], max_tokens=4
        )
    assert info.value.kind == "auth"


def test_it_explains_a_bad_model_path(tmp_path: Path):
    with pytest.raises(LocalModelError, match="no model file at"):
        model_path(str(tmp_path / "missing.gguf"))
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 a zip, not a model")
    with pytest.raises(LocalModelError, match="is not a GGUF model file"):
        model_path(str(not_gguf))
    assert model_path("") == bundled_model_path()


async def test_it_tells_the_chat_why_the_embedded_model_did_not_start(
    configure, monkeypatch, tmp_path
):
    from asgiref.sync import sync_to_async
    from django.core.management import CommandError, call_command

    from agent.llm import configured_endpoint

    monkeypatch.setenv("NEOTASK_LOCAL_LLM_KEY", "k" * 32)
    monkeypatch.delenv("NEOTASK_LOCAL_LLM_URL", raising=False)
    configure("llm", base_url="", local_model_path=str(tmp_path / "nope.gguf"))
    with pytest.raises(CommandError, match="no model file"):
        await sync_to_async(call_command)("local_llm", "--port", str(free_port()))
    with pytest.raises(LLMError) as info:
        await LLMClient(configured_endpoint()).stream([{"role": "user", "content": "hi"}])
    message = str(info.value)
    assert "could not start: [llm] local_model_path: no model file at" in message
    assert "NEOTASK_LLM_BASE_URL" in message


def test_it_counts_prompt_tokens_with_the_models_tokenizer(local_server):
    from asgiref.sync import async_to_sync

    from agent.prompt import prompt_tokens
    from memory.retrieval import estimate_tokens

    endpoint = Endpoint(
        local_server, "local-test-key-123456", "local", 2048, 60.0, LOCAL_MODEL_LABEL, 512
    )
    messages = [{"role": "user", "content": "The quick brown fox jumps over the lazy dog. " * 20}]
    counted = async_to_sync(prompt_tokens)(messages, endpoint)
    assert 180 <= counted <= 260  # ~10 tokens a sentence, counted by SmolLM2's tokenizer
    assert counted != estimate_tokens(messages[0]["content"])
    down = Endpoint("http://127.0.0.1:9/v1", "k", "local", 2048, 60.0, LOCAL_MODEL_LABEL, 512)
    assert async_to_sync(prompt_tokens)(messages, down) == estimate_tokens(messages[0]["content"])
