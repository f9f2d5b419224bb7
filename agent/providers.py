"""Which model answers: the choices a person has, and the endpoint behind each.

A choice is a short key kept on a chat (Session.model) and an agent
(Agent.model):
  ""                 no choice: the chat falls back to its agent's, the agent to the site's
  "embedded:<name>"  an embedded model installed here (agent.local_model.installed_models);
                     "embedded" alone (kept by earlier versions): the default embedded one
  "config"           [llm] base_url / model in config.toml or NEOTASK_LLM_*
  "<provider id>:<model>"   a model of a ModelProvider the admins connected

The site's default is config.toml's endpoint where it sets one (config wins),
else the provider marked default, else the embedded model. A choice that is no
longer offered to its owner (provider deleted, disabled, group left) falls
back to the default rather than failing the turn.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Protocol

import httpx
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db.models import Q

from agent.llm import Endpoint, LLMClient, LLMError, configured_endpoint
from agent.local_model import default_model, installed_models
from agent.models import ModelProvider
from agent.outbound import Refused, policy_of
from core.ownership import Owner
from core.sealing import SealError, unseal

EMBEDDED = "embedded"
CONFIG = "config"
OLLAMA_URL = "http://localhost:11434/v1"  # where Ollama listens unless told otherwise


@dataclass(frozen=True)
class Choice:
    key: str
    label: str  # "Ollama · llama3.2"
    group: str  # the provider's name, for the picker's <optgroup>


def config_sets_endpoint() -> bool:
    return bool(settings.NEOTASK["llm"]["base_url"])


def config_label() -> str:
    """For the staff's pages: the model and where it is."""
    llm = settings.NEOTASK["llm"]
    return f"{llm['model'] or 'default model'} at {llm['base_url']}"


def config_model_label() -> str:
    """For everyone's picker: the model, not where it is (a URL inside the network)."""
    return settings.NEOTASK["llm"]["model"] or "the configured model"


def embedded_key(name: str) -> str:
    return f"{EMBEDDED}:{name}"


def offered(owner: Owner) -> list[Choice]:
    """The models `owner` may choose, each once, in the picker's order: those that
    can answer now. The embedded ones are those installed (`manage.py local_llm`
    loads the one a turn asks for); none when config.toml names an endpoint, as
    the embedded model is then not started."""
    if config_sets_endpoint():
        choices = [Choice(CONFIG, config_model_label(), "config.toml")]
    else:
        choices = [
            Choice(embedded_key(model.name), model.title, "Embedded")
            for model in installed_models(settings.NEOTASK["llm"])
        ]
    for provider in providers_for(owner):
        for name in provider.model_names:
            choices.append(
                Choice(f"{provider.pk}:{name}", f"{provider.name} · {name}", provider.name)
            )
    return choices


def providers_for(owner: Owner) -> list[ModelProvider]:
    """The enabled providers offered to `owner`: those naming no group, or one of theirs."""
    providers = ModelProvider.objects.filter(enabled=True)
    if owner.is_superuser:
        return list(providers)
    return list(
        providers.filter(Q(groups__isnull=True) | Q(groups__in=owner.groups.all())).distinct()
    )


def default_key() -> str:
    if config_sets_endpoint():
        return CONFIG
    provider = ModelProvider.objects.filter(is_default=True, enabled=True).first()
    if provider is not None and provider.model_names:
        return f"{provider.pk}:{provider.model_names[0]}"
    return embedded_key(default_model(settings.NEOTASK["llm"]))


def is_embedded(key: str) -> bool:
    return key == EMBEDDED or key.startswith(f"{EMBEDDED}:")


def effective_key(owner: Owner, *keys: str) -> str:
    """The first of `keys` (chat's, agent's) that `owner` may still use, else the default."""
    keys = tuple(
        embedded_key(default_model(settings.NEOTASK["llm"])) if key == EMBEDDED else key
        for key in keys
    )
    allowed = {choice.key for choice in offered(owner)} if any(keys) else set()
    for key in keys:
        if key and key in allowed:
            return key
    return default_key()


class ChatAgent(Protocol):
    @property
    def model(self) -> str: ...


class Chat(Protocol):
    """What chat_endpoint reads of a chat: a sessions_app Session, named by its
    shape because sessions_app sits above agent (docs/architecture.md#floors)."""

    @property
    def owner(self) -> Owner: ...

    @property
    def model(self) -> str: ...

    @property
    def agent(self) -> ChatAgent: ...


def chat_endpoint(session: Chat, fast: bool = False) -> Endpoint:
    """The endpoint that answers in `session` (a sessions_app Session); `fast`:
    config.toml's fast_model where the chat uses config.toml's endpoint."""
    key = effective_key(session.owner, session.model, session.agent.model)
    return endpoint_for(key, fast=fast)


def default_endpoint(fast: bool = False) -> Endpoint:
    """For work that belongs to no chat (consolidation): the site's default."""
    return endpoint_for(default_key(), fast=fast)


def endpoint_for(key: str, fast: bool = False) -> Endpoint:
    provider_id, _, model = key.partition(":")
    if provider_id.isdigit():
        provider = (
            ModelProvider.objects.select_related("url_set_by").filter(pk=int(provider_id)).first()
        )
        if provider is not None and model in provider.model_names:
            return provider_endpoint(provider, model)
    # config.toml's endpoint, or the embedded model where it sets none.
    endpoint = configured_endpoint(fast=fast)
    if provider_id == EMBEDDED and model and endpoint.is_local:
        return replace(endpoint, local_model=model)
    return endpoint


def provider_endpoint(provider: ModelProvider, model: str, api_key: str | None = None) -> Endpoint:
    """`api_key` given: a key being tested before it is saved. Its URL is reached
    as the outbound policy lets the one who set it (agent.outbound)."""
    llm = settings.NEOTASK["llm"]
    if api_key is None:
        try:
            api_key = unseal(provider.sealed_api_key)
        except SealError:
            api_key = ""  # the endpoint then refuses it (401), and the message says why
    return Endpoint(
        base_url=provider.base_url.rstrip("/"),
        api_key=api_key,
        model=model,
        context_window=provider.context_window,
        timeout=llm["request_timeout"],
        label=provider.name,  # chats' errors name it, not its URL (inside the network)
        max_answer_tokens=min(llm["max_answer_tokens"], provider.context_window // 2),
        where="the Models page",
        policy=policy_of(provider.url_set_by),
    )


@dataclass(frozen=True)
class Trial:
    passed: bool
    message: str


def try_endpoint(endpoint: Endpoint) -> Trial:
    """One one-token chat completion: does the endpoint answer with this model and key?
    What it answered is told by its status only, never its body: the Test button
    must not read a page off a server for whoever presses it."""
    started = time.monotonic()
    try:
        async_to_sync(LLMClient(endpoint).stream)(
            [{"role": "user", "content": "Say OK."}], max_tokens=1
        )
    except LLMError as exc:
        return Trial(False, what_failed(exc, endpoint))
    elapsed = (time.monotonic() - started) * 1000
    return Trial(True, f"{endpoint.model} answered in {elapsed:,.0f} ms.")


STATUS_HINTS = {
    401: "the API key was refused",
    403: "the API key was refused",
    404: "check the model name and the base URL (it usually ends in /v1)",
    429: "it is rate limiting; try again in a moment",
}


def what_failed(error: LLMError, endpoint: Endpoint) -> str:
    if isinstance(error.__cause__, Refused):
        return f"refused: {error.__cause__}."
    if error.status is not None:
        hint = STATUS_HINTS.get(error.status) or (
            "the server failed" if error.status >= 500 else "it rejected the request"
        )
        return f"HTTP {error.status}: {hint}."
    if error.kind == "unavailable":
        return "nothing answers at its base URL (is it running?)."
    if error.kind == "timeout":
        return f"no answer within {endpoint.timeout:g} s."
    return "it answered, but not as an OpenAI-compatible endpoint."


def listed_models(base_url: str, api_key: str = "", timeout: float = 2.0) -> list[str] | None:
    """The models an OpenAI-compatible endpoint lists at /models; None when it does not answer."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(f"{base_url.rstrip('/')}/models", headers=headers, timeout=timeout)
        response.raise_for_status()
        data = response.json().get("data") or []
        return sorted(str(item["id"]) for item in data if isinstance(item, dict) and "id" in item)
    except (httpx.HTTPError, ValueError, KeyError, AttributeError):
        return None


def detect_ollama() -> list[str] | None:
    """Ollama's models when it answers at localhost:11434 and nobody connected it yet."""
    if ModelProvider.objects.filter(base_url__startswith=OLLAMA_URL.removesuffix("/v1")).exists():
        return None
    return listed_models(OLLAMA_URL, timeout=0.5)
