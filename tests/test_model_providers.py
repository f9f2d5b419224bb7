"""Models chosen in the UI (issue 27 part 2): providers the staff connects and
tests, keys sealed at rest, a picker per chat and a default per agent, the
first-run choice, and config.toml winning where it sets an endpoint. Two
scripted OpenAI-compatible servers stand for two providers."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group

from agent import providers
from agent.models import ModelProvider
from core.sealing import SealError, seal, unseal
from sessions_app import chat
from sessions_app.models import Agent, Session
from tests.support.chat_turns import converse
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.web import HTMX, client_for, text

SECRET = "sk-other-provider-0123456789"


@pytest.fixture
def other():
    """A second OpenAI-compatible server: "another provider"."""
    with ScriptedLLM(api_key=SECRET, models=("m-large", "m-small")) as server:
        yield server


@pytest.fixture
def staff_client(owner):
    return client_for(owner)


def add(client, server, **fields) -> ModelProvider:
    form = {
        "name": "Other",
        "base_url": server.url,
        "api_key": SECRET,
        "offered_models": "m-large\nm-small",
        "context_window": 4096,
        "enabled": "on",
        **fields,
    }
    response = client.post("/settings/models/add/", form)
    assert response.status_code == 302, text(response)
    return ModelProvider.objects.get(name=form["name"])


def answer(session: Session, message: str = "hello") -> None:
    async def ignore(frame):
        pass

    ended = async_to_sync(converse)(session, message, ignore)
    assert ended.status == "completed", ended.error


def test_a_key_is_sealed_at_rest_and_never_shown_again(staff_client, llm, other):
    provider = add(staff_client, other)
    assert SECRET not in provider.sealed_api_key and unseal(provider.sealed_api_key) == SECRET
    assert provider.api_key_hint == "…6789"
    for url in ("/settings/models/", f"/settings/models/{provider.pk}/"):
        page = text(staff_client.get(url))
        assert SECRET not in page and provider.sealed_api_key not in page and "…6789" in page
    # Saving the form again with the key field empty keeps the key.
    staff_client.post(
        f"/settings/models/{provider.pk}/",
        {
            "name": "Other",
            "base_url": other.url,
            "offered_models": "m-large",
            "enabled": "on",
            "context_window": 4096,
        },
    )
    provider.refresh_from_db()
    assert unseal(provider.sealed_api_key) == SECRET and provider.model_names == ["m-large"]


def test_a_key_sealed_under_another_secret_key_cannot_be_read(settings):
    sealed = seal(SECRET)
    settings.SECRET_KEY = "another-secret-key-" * 3
    with pytest.raises(SealError, match="secret key changed"):
        unseal(sealed)


def test_only_the_staff_reaches_the_models_pages(alice_client, staff_client, llm, other):
    provider = add(staff_client, other)
    for url in ("/settings/models/", "/settings/models/add/", f"/settings/models/{provider.pk}/"):
        assert alice_client.get(url).status_code == 403
    assert alice_client.post("/settings/models/test/", {"provider": provider.pk}).status_code == 403
    assert alice_client.post(f"/settings/models/{provider.pk}/delete/").status_code == 403
    assert alice_client.get("/setup/model/").status_code == 403
    assert ModelProvider.objects.filter(pk=provider.pk, tested_at=None).exists()
    assert "/settings/models/" not in text(alice_client.get("/agents/"))  # no nav link
    assert "/settings/models/" in text(staff_client.get("/agents/"))


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"base_url": "ftp://example.com/v1"}, "Enter an http:// or https:// URL"),
        ({"base_url": "not a url"}, "Enter an http:// or https:// URL"),
        ({"offered_models": "  \n "}, "Name at least one model"),
        ({"offered_models": "two words"}, "is not a model name"),
        ({"offered_models": "\n".join(f"m{i}" for i in range(51))}, "At most 50 models"),
        ({"context_window": 100}, "at least 512 tokens"),
        ({"context_window": "many"}, "Enter a whole number"),
        ({"name": ""}, "This field is required"),
    ],
)
def test_bad_provider_input_is_refused_and_nothing_is_saved(staff_client, fields, message):
    form = {
        "name": "Other",
        "base_url": "http://127.0.0.1:9/v1",
        "offered_models": "m",
        "context_window": 4096,
        **fields,
    }
    response = staff_client.post("/settings/models/add/", form)
    assert response.status_code == 400 and message in text(response)
    assert not ModelProvider.objects.exists()


def test_the_test_button_makes_a_one_token_request(staff_client, llm, other):
    provider = add(staff_client, other)
    other.script(Reply("OK"))
    response = staff_client.post("/settings/models/test/", {"provider": provider.pk}, **HTMX)
    assert "✓ Works: m-large answered in" in text(response)
    request = other.requests[-1]
    assert request["max_tokens"] == 1 and request["model"] == "m-large"
    provider.refresh_from_db()
    assert provider.test_passed and provider.tested_at is not None
    assert "✓" in text(staff_client.get("/settings/models/"))


def test_the_test_button_says_exactly_what_failed(staff_client, llm, other):
    provider = add(staff_client, other)
    form = {
        "name": "Other",
        "base_url": other.url,
        "offered_models": "m-large",
        "context_window": 4096,
    }

    def tried(**fields) -> str:
        return text(staff_client.post("/settings/models/test/", {**form, **fields}, **HTMX))

    wrong_key = tried(api_key="sk-wrong")
    assert "✗ Failed: HTTP 401: the API key was refused." in wrong_key
    # An empty key field on a saved provider's form tests with the stored key.
    other.script(Reply("OK"))
    assert "✓ Works" in tried(provider=provider.pk)
    closed = tried(base_url="http://127.0.0.1:9/v1", api_key="k")
    assert "nothing answers at its base URL (is it running?)" in closed
    # Its status, never its body (tests/security/test_outbound_policy.py).
    other.script(Reply(status=404, error="model m-large not found"))
    missing = tried(api_key=SECRET)
    assert "HTTP 404: check the model name and the base URL" in missing
    assert "not found" not in missing and "m-small" not in missing
    assert "Enter an http:// or https:// URL" in tried(base_url="javascript:alert(1)")
    provider.refresh_from_db()
    assert provider.tested_at is None  # form values are tried, not recorded


@pytest.mark.django_db(transaction=True)  # a turn runs on its own threads
def test_a_chat_switches_to_another_providers_model_and_keeps_it(staff_client, owner, llm, other):
    provider = add(staff_client, other)
    session = chat.start_chat(owner)
    page = text(staff_client.get(f"/chat/{session.key}/"))
    assert "scripted (default)" in page and "Other · m-small" in page
    assert llm.url not in page  # the picker names models, not where they are

    key = f"{provider.pk}:m-small"
    response = staff_client.post(f"/chat/{session.key}/model/", {"model": key}, **HTMX)
    assert response.status_code == 200 and "selected>Other · m-small" in text(response)
    other.script(Reply("from the other provider"))
    answer(Session.objects.get(pk=session.pk))
    assert [r["model"] for r in other.requests] == ["m-small"] and not llm.requests
    # A reset keeps the chat's choice.
    successor = Session.objects.get(pk=session.pk).continue_as()
    assert successor is not None and successor.model == key
    other.script(Reply("again"))
    answer(successor)
    assert len(other.requests) == 2 and not llm.requests
    # Back to the default: config.toml's endpoint answers.
    staff_client.post(f"/chat/{successor.key}/model/", {"model": ""})
    llm.script(Reply("from config"))
    answer(Session.objects.get(pk=successor.pk))
    assert len(llm.requests) == 1 and len(other.requests) == 2


@pytest.mark.django_db(transaction=True)  # a turn runs on its own threads
def test_a_user_chooses_only_the_models_offered_to_them(
    staff_client, alice, alice_client, llm, other
):
    provider = add(staff_client, other)
    team = Group.objects.create(name="team-a")
    provider.groups.add(team)
    session = chat.start_chat(alice)
    key = f"{provider.pk}:m-large"
    assert "Other · m-large" not in text(alice_client.get(f"/chat/{session.key}/"))
    refused = alice_client.post(f"/chat/{session.key}/model/", {"model": key}, **HTMX)
    assert "That model is not offered to you" in text(refused)
    for bad in ("999:m-large", f"{provider.pk}:m-nope", "x" * 400):
        alice_client.post(f"/chat/{session.key}/model/", {"model": bad})
    assert Session.objects.get(pk=session.pk).model == ""

    alice.groups.add(team)
    alice_client.post(f"/chat/{session.key}/model/", {"model": key})
    assert Session.objects.get(pk=session.pk).model == key
    # Once it is no longer offered (the provider switched off), the default answers.
    ModelProvider.objects.filter(pk=provider.pk).update(enabled=False)
    llm.script(Reply("the default"))
    answer(Session.objects.get(pk=session.pk))
    assert len(llm.requests) == 1 and not other.requests


def test_another_users_chat_cannot_be_switched(alice, bob_client, staff_client, llm, other):
    provider = add(staff_client, other)
    session = chat.start_chat(alice)
    response = bob_client.post(f"/chat/{session.key}/model/", {"model": f"{provider.pk}:m-large"})
    assert response.status_code == 404
    assert Session.objects.get(pk=session.pk).model == ""


@pytest.mark.django_db(transaction=True)  # a turn runs on its own threads
def test_an_agents_model_is_its_chats_default(staff_client, owner, llm, other):
    provider = add(staff_client, other)
    agent = Agent.objects.default_for(owner)
    key = f"{provider.pk}:m-large"
    response = staff_client.post(f"/agents/{agent.pk}/", {"system_prompt": "", "model": key})
    assert response.status_code == 302
    assert Agent.objects.get(pk=agent.pk).model == key
    session = chat.start_chat(owner)
    assert "Other · m-large (default)" in text(staff_client.get(f"/chat/{session.key}/"))
    other.script(Reply("agent's model"))
    answer(session)
    assert [r["model"] for r in other.requests] == ["m-large"] and not llm.requests
    bad = staff_client.post(f"/agents/{agent.pk}/", {"system_prompt": "", "model": "9:x"})
    assert bad.status_code == 400 and "not offered to you" in text(bad)


def test_config_toml_wins_where_it_sets_an_endpoint(staff_client, owner, configure, other):
    provider = add(staff_client, other, is_default="on")
    session = chat.start_chat(owner)
    configure("llm", base_url="", model="")
    assert providers.default_key() == f"{provider.pk}:m-large"
    assert providers.chat_endpoint(session).model == "m-large"
    page = text(staff_client.get("/settings/models/"))
    assert "Embedded" in page and "(config.toml wins)" not in page

    configure("llm", base_url="http://127.0.0.1:9/v1", model="from-config")
    assert providers.default_key() == providers.CONFIG
    endpoint = providers.chat_endpoint(session)
    assert endpoint.model == "from-config" and endpoint.base_url == "http://127.0.0.1:9/v1"
    page = text(staff_client.get("/settings/models/"))
    assert "set in config.toml" in page and "(config.toml wins)" in page
    assert "Embedded" not in page  # not started when config.toml names an endpoint


def test_one_default_provider_at_a_time(staff_client, llm, other):
    first = add(staff_client, other, is_default="on")
    second = add(staff_client, other, name="Second", is_default="on")
    assert list(ModelProvider.objects.filter(is_default=True)) == [second]
    first.refresh_from_db()
    assert not first.is_default


def test_ollama_is_found_when_it_answers(staff_client, monkeypatch, llm):
    with ScriptedLLM(api_key="", models=("llama3.2", "qwen2.5")) as ollama:
        monkeypatch.setattr(providers, "OLLAMA_URL", ollama.url)
        page = text(staff_client.get("/settings/models/"))
        assert f"Ollama answers at {ollama.url}" in page and "llama3.2, qwen2.5" in page
        prefilled = text(staff_client.get("/settings/models/add/", {"suggest": "ollama"}))
        assert f'value="{ollama.url}"' in prefilled and "llama3.2\nqwen2.5" in prefilled
        add(staff_client, ollama, name="Ollama", api_key="", offered_models="llama3.2")
        assert "Ollama answers at" not in text(staff_client.get("/settings/models/"))
    assert "Ollama answers at" not in text(staff_client.get("/settings/models/"))


def test_first_run_offers_the_embedded_model_or_a_connected_one(db, client, configure, other):
    configure("llm", base_url="", model="")
    response = client.post(
        "/setup/",
        {"username": "admin", "password1": "a-Good-passw0rd", "password2": "a-Good-passw0rd"},
    )
    assert response.status_code == 302 and response["Location"] == "/setup/model/"
    page = text(client.get("/setup/model/"))
    assert "Use the embedded model" in page and "Connect a model" in page
    other.script(Reply("OK"))
    form = {
        "name": "Other",
        "base_url": other.url,
        "api_key": SECRET,
        "offered_models": "m-large",
        "context_window": 8192,
        "is_default": "on",
        "enabled": "on",
    }
    assert "✓ Works" in text(client.post("/settings/models/test/", form, **HTMX))
    response = client.post("/setup/model/", form)
    assert response.status_code == 302 and response["Location"] == "/"
    provider = ModelProvider.objects.get()
    assert provider.is_default and providers.default_key() == f"{provider.pk}:m-large"
