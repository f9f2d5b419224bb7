"""The chat header's model picker tells the truth (issue 42): each model that can
answer now, once — the embedded ones installed (the bundled SmolLM2 always, a
fetched one once verified) and the connected providers' — the default marked,
and "Connect a model…" for the staff. Choosing another embedded model has the
one embedded model server (`manage.py local_llm`) load it: a turn asks through
the data dir's files (agent.local_model.serving), played here by a test thread
and two scripted servers; tests/test_embedded_switch.py runs the real one."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group
from django.utils import timezone

from agent import local_model
from agent.llm import LOCAL_KEY_VARIABLE, LOCAL_URL_VARIABLE
from agent.models import ModelProvider
from agent.prompt import fixed_prefix
from memory.models import Fact
from sessions_app import chat
from sessions_app.models import Session
from tests.support.chat_turns import converse
from tests.support.embedded import QWEN, FakeModelServer, fetched
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.web import HTMX, client_for, text


@pytest.fixture
def embedded(configure, settings) -> Path:
    """The embedded profile: no endpoint in config.toml, Qwen 0.5B the configured model."""
    configure("llm", base_url="", local_model=QWEN, local_model_path="")
    return Path(settings.DATA_DIR)


def options(page: str) -> list[tuple[str, str]]:
    select = re.search(r'<select[^>]*id="chat-model".*?</select>', page, re.S)
    assert select is not None
    found = re.findall(r'<option value="([^"]*)"[^>]*>([^<]*)</option>', select.group(0))
    return [(value, label.strip()) for value, label in found]


def test_the_picker_lists_each_model_that_can_answer_once_the_default_marked(
    embedded, alice, alice_client
):
    session = chat.start_chat(alice)
    # Qwen is configured but not fetched: SmolLM2 answers, and is the default.
    assert options(text(alice_client.get(f"/chat/{session.key}/"))) == [
        ("", "SmolLM2-135M (default)")
    ]
    fetched(embedded)
    page = text(alice_client.get(f"/chat/{session.key}/"))
    assert options(page) == [
        ("", "Qwen2.5-Coder-0.5B (default)"),
        ("embedded:smollm2", "SmolLM2-135M"),
    ]
    assert "Default:" not in page and "1.5B" not in page  # not fetched: not offered
    # Connecting a model is the staff's: others get no link to a page they cannot open.
    assert "Connect a model" not in page


def test_the_staff_sees_connected_providers_and_a_link_to_connect_one(embedded, owner):
    fetched(embedded)
    with ScriptedLLM(models=("m-large",)) as other:
        ModelProvider.objects.create(
            name="Other", base_url=other.url, offered_models="m-large", enabled=True
        )
        session = chat.start_chat(owner)
        page = text(client_for(owner).get(f"/chat/{session.key}/"))
    labels = [label for _, label in options(page)]
    assert labels == ["Qwen2.5-Coder-0.5B (default)", "SmolLM2-135M", "Other · m-large"]
    assert len(set(labels)) == len(labels)
    assert 'href="/settings/models/">Connect a model…</a>' in page


def test_a_model_not_offered_gets_a_clear_error_and_changes_nothing(embedded, alice, owner):
    fetched(embedded)
    provider = ModelProvider.objects.create(
        name="Team", base_url="http://127.0.0.1:9/v1", offered_models="m", enabled=True
    )
    provider.groups.add(Group.objects.create(name="not-alice"))  # another group's provider
    session = chat.start_chat(alice)
    client = client_for(alice)
    for bad in ("embedded:nope", "embedded:qwen2.5-coder-1.5b", f"{provider.pk}:m", "x" * 300):
        refused = client.post(f"/chat/{session.key}/model/", {"model": bad}, **HTMX)
        assert refused.status_code == 200
        assert "That model is not offered to you" in text(refused), bad
    assert Session.objects.get(pk=session.pk).model == ""
    # The default's own key is the default: stored as "" (it follows the default).
    client.post(f"/chat/{session.key}/model/", {"model": f"embedded:{QWEN}"}, **HTMX)
    assert Session.objects.get(pk=session.pk).model == ""
    chosen = client.post(f"/chat/{session.key}/model/", {"model": "embedded:smollm2"}, **HTMX)
    assert 'value="embedded:smollm2" selected>SmolLM2-135M' in text(chosen)
    assert Session.objects.get(pk=session.pk).model == "embedded:smollm2"


@pytest.fixture
def model_server(
    embedded, monkeypatch
) -> Iterator[tuple[FakeModelServer, ScriptedLLM, ScriptedLLM]]:
    fetched(embedded)
    with ScriptedLLM(api_key="k" * 20) as qwen, ScriptedLLM(api_key="k" * 20) as smol:
        monkeypatch.setenv(LOCAL_KEY_VARIABLE, "k" * 20)
        monkeypatch.setenv(LOCAL_URL_VARIABLE, qwen.url)  # as `serve` sets it at the start
        server = FakeModelServer(embedded, {QWEN: qwen, "smollm2": smol}, QWEN)
        yield server, qwen, smol
        server.stop.set()


def answer(session: Session) -> None:
    async def ignore(frame):
        pass

    ended = async_to_sync(converse)(session, "hello", ignore)
    assert ended.status == "completed", ended.error


@pytest.mark.django_db(transaction=True)  # a turn runs on its own threads
def test_choosing_another_embedded_model_switches_the_next_turn_without_a_restart(
    model_server, alice
):
    server, qwen, smol = model_server
    session = chat.start_chat(alice)
    qwen.script(Reply("from qwen"))
    answer(session)
    assert len(qwen.requests) == 1 and server.loads == [QWEN]

    client_for(alice).post(f"/chat/{session.key}/model/", {"model": "embedded:smollm2"})
    smol.script(Reply("from smollm2"))
    answer(Session.objects.get(pk=session.pk))
    assert server.loads == [QWEN, "smollm2"]  # asked for, and loaded in place of Qwen
    assert len(smol.requests) == 1 and len(qwen.requests) == 1

    # Another chat on the default: Qwen is loaded again for it.
    other = chat.start_chat(alice)
    qwen.script(Reply("qwen again"))
    answer(other)
    assert server.loads == [QWEN, "smollm2", QWEN] and len(qwen.requests) == 2


def test_a_switch_waits_for_the_answer_on_the_loaded_model(model_server):
    """Two chats on two embedded models: the second's switch waits until the
    first's answer is over, so a model is never stopped mid-answer."""
    server, _, _ = model_server

    async def both() -> list[str]:
        said: list[str] = []
        released = asyncio.Event()

        async def on_qwen() -> None:
            async with local_model.serving(QWEN):
                said.append("qwen answering")
                await released.wait()
                await asyncio.sleep(0.3)  # a switch asked meanwhile must not go ahead
                said.append(f"qwen done, loaded {server.loads[-1]}")

        async def on_smollm2() -> None:
            await asyncio.sleep(0.1)
            released.set()
            async with local_model.serving("smollm2"):
                said.append("smollm2 answering")

        await asyncio.gather(on_qwen(), on_smollm2())
        return said

    assert async_to_sync(both)() == [
        "qwen answering",
        f"qwen done, loaded {QWEN}",
        "smollm2 answering",
    ]
    assert server.loads == [QWEN, "smollm2"]


@pytest.mark.django_db(transaction=True)
def test_every_turn_starts_with_the_same_fixed_prefix_what_changes_comes_after(model_server, alice):
    """llama.cpp reuses a cached prompt only from its first token: the instructions
    and the tools' schemas come first, the same in every turn and as the model
    server warms them (fixed_prefix); the earlier exchange next, as the last turn
    sent it; the time, facts and memory only just before the new question."""
    _, qwen, _ = model_server
    session = chat.start_chat(alice)
    qwen.script(Reply("one"))
    answer(session)
    Fact.objects.create(owner=alice, category="personal", key="city", value="Porto")
    qwen.script(Reply("two"))
    answer(Session.objects.get(pk=session.pk))
    first, second = qwen.requests
    messages, tools = fixed_prefix()
    assert first["messages"][0] == second["messages"][0] == messages[0]
    assert first["tools"][: len(tools)] == second["tools"][: len(tools)] == tools
    assert [m["role"] for m in first["messages"]] == ["system", "system", "user"]
    roles = [m["role"] for m in second["messages"]]
    assert roles == ["system", "user", "assistant", "system", "user"]
    assert second["messages"][1] == first["messages"][2]  # the first question, unchanged
    assert second["messages"][2]["content"] == "one"
    assert "Porto" not in json.dumps(first) and "Porto" in second["messages"][3]["content"]
    year = str(timezone.localtime().year)  # the time, which changes, comes after too
    assert year not in first["messages"][0]["content"] and year in second["messages"][3]["content"]
