"""The one LLM client: OpenAI chat completions over HTTP, streamed (SSE), with tools.

It talks to any OpenAI-compatible endpoint (OpenAI, Ollama, vLLM, a llama.cpp
server) and to the embedded local model, which `manage.py serve` starts as a
loopback service and announces through NEOTASK_LOCAL_LLM_URL / _KEY.
A message's whole path, end to end: docs/chat-runtime.md#the-turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
from django.conf import settings

from agent.outbound import Policy, Refused
from agent.transport import asyncio_transport

LOCAL_URL_VARIABLE = "NEOTASK_LOCAL_LLM_URL"
LOCAL_KEY_VARIABLE = "NEOTASK_LOCAL_LLM_KEY"
LOCAL_MODEL_LABEL = "embedded local model"
CONFIG_FILE = "config.toml"
CONFIG_LABEL = "the configured endpoint"

OnDelta = Callable[[str], Awaitable[None]]
AFTER_DONE_SECONDS = 0.5  # the most a stream's end is waited for after its [DONE]


@dataclass
class Usage:
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input + other.input,
            self.output + other.output,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "input": self.input,
            "output": self.output,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
        }

    @classmethod
    def from_openai(cls, usage: dict[str, Any] | None) -> Usage:
        """Provider usage fields; anything absent counts as zero."""
        if not isinstance(usage, dict):
            return cls()
        details = usage.get("prompt_tokens_details") or {}
        return cls(
            input=_count(usage.get("prompt_tokens")),
            output=_count(usage.get("completion_tokens")),
            cache_read=_count(details.get("cached_tokens") or usage.get("cache_read_input_tokens")),
            cache_write=_count(usage.get("cache_creation_input_tokens")),
        )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text, as the model wrote it

    def as_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass
class Completion:
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None


class LLMError(Exception):
    """The LLM call failed; `kind` names the cause, the message says what to do."""

    def __init__(
        self, kind: str, message: str, partial: Completion | None = None, status: int | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.partial = partial or Completion()
        self.status = status  # the HTTP status it answered, if it answered


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    api_key: str
    model: str
    context_window: int
    timeout: float
    label: str
    max_answer_tokens: int  # sent as max_tokens with every request
    where: str = CONFIG_FILE  # where a person fixes it, for error messages
    # agent.outbound's policy for a URL a person set; None: the operator's, not checked.
    policy: Policy | None = None
    # The embedded model to serve the request (agent.local_model.serving); "": as it is.
    local_model: str = ""

    @property
    def is_local(self) -> bool:
        return self.label == LOCAL_MODEL_LABEL


def configured_endpoint(fast: bool = False) -> Endpoint:
    """The endpoint from [llm] / NEOTASK_LLM_*, or the embedded local model."""
    llm = settings.NEOTASK["llm"]
    model = (llm["fast_model"] or llm["model"]) if fast else llm["model"]
    common = {
        "context_window": llm["context_window"],
        "timeout": llm["request_timeout"],
        "max_answer_tokens": llm["max_answer_tokens"],
    }
    if llm["base_url"]:
        return Endpoint(
            base_url=llm["base_url"].rstrip("/"),
            api_key=llm["api_key"],
            model=model,
            label=CONFIG_LABEL,  # every user reads its errors: not the URL (inside the network)
            **common,
        )
    from agent.local_model import default_model

    return Endpoint(
        base_url=os.environ.get(LOCAL_URL_VARIABLE, "").rstrip("/"),
        api_key=os.environ.get(LOCAL_KEY_VARIABLE, ""),
        model=model or "local",
        label=LOCAL_MODEL_LABEL,
        local_model=default_model(llm),
        **common,
    )


# One HTTP client per event loop and policy: building one costs milliseconds (it
# loads the CA certificates) and a shared one keeps connections to the endpoint
# alive. Each policy has its own pool, so that a connection one policy allowed
# is never reused under another.
_http_clients: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[Policy | None, httpx.AsyncClient]
] = weakref.WeakKeyDictionary()


def http_client(policy: Policy | None = None) -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    clients = _http_clients.setdefault(loop, {})
    client = clients.get(policy)
    if client is None or client.is_closed:
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
        client = clients[policy] = httpx.AsyncClient(transport=asyncio_transport(limits, policy))
    return client


class LLMClient:
    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    async def count_tokens(self, messages: list[dict[str, Any]]) -> int | None:
        """The prompt's tokens by the model's own tokenizer: the embedded llama.cpp
        server's /tokenize; None for other endpoints, or when it does not answer."""
        endpoint = self.endpoint
        from agent.local_model import served

        address = served()[0] if endpoint.is_local else ""  # where the model is now
        base_url = f"{address}/v1" if address else endpoint.base_url
        if not (endpoint.is_local and base_url):
            return None
        text = "\n".join(
            (m.get("content") or "") + json.dumps(m.get("tool_calls") or "") for m in messages
        )
        try:
            response = await http_client().post(
                base_url.removesuffix("/v1") + "/tokenize",
                json={"content": text},
                headers={"Authorization": f"Bearer {endpoint.api_key}"},
                timeout=2,
            )
            response.raise_for_status()
            return len(response.json()["tokens"]) + 4 * len(messages)
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None  # the model is not up: the caller estimates

    async def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        on_delta: OnDelta | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """One chat completion, streamed: text deltas go to `on_delta` as they come.

        At most `max_tokens` (default: the endpoint's max_answer_tokens) are
        written; an answer cut there ends with finish_reason "length"."""
        endpoint = self.endpoint
        if endpoint.is_local and endpoint.local_model:
            from agent.local_model import SwitchFailed, serving

            try:
                async with serving(endpoint.local_model) as address:
                    if address:  # the address of the model asked for, which may have moved
                        endpoint = replace(endpoint, base_url=f"{address}/v1")
                    return await self.request(endpoint, messages, tools, on_delta, max_tokens)
            except SwitchFailed as exc:
                raise LLMError("unavailable", str(exc)) from None
        return await self.request(endpoint, messages, tools, on_delta, max_tokens)

    async def request(
        self,
        endpoint: Endpoint,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        on_delta: OnDelta | None,
        max_tokens: int | None,
    ) -> Completion:
        if not endpoint.base_url:
            raise LLMError("not_configured", not_running_message(endpoint))
        body: dict[str, Any] = {
            "model": endpoint.model,
            "messages": as_sent(messages, endpoint),
            "stream": True,
            "stream_options": {"include_usage": True},
            # Without it a model may write until its window is full or the request times out.
            "max_tokens": max_tokens or endpoint.max_answer_tokens,
        }
        if tools:
            body["tools"] = tools
        headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
        completion = Completion()
        calls: dict[int, dict[str, str]] = {}
        try:
            async with http_client(endpoint.policy).stream(
                "POST",
                f"{endpoint.base_url}/chat/completions",
                json=body,
                headers=headers,
                timeout=httpx.Timeout(endpoint.timeout, connect=10),
            ) as response:
                if response.status_code != 200:
                    await response.aread()
                    error = http_error(endpoint, response)
                    error.status = response.status_code
                    raise error
                done = await read_events(response, completion, calls, on_delta)
        except Refused as exc:
            raise LLMError("refused", f"The LLM at {endpoint.label} is refused: {exc}.") from exc
        except httpx.ConnectError:
            raise LLMError("unavailable", not_running_message(endpoint)) from None
        except httpx.TimeoutException:
            completion.tool_calls = collect_calls(calls)
            raise LLMError(
                "timeout",
                f"The LLM at {endpoint.label} did not answer within {endpoint.timeout:g} s "
                "([llm] request_timeout).",
                completion,
            ) from None
        except (httpx.RemoteProtocolError, httpx.ReadError):
            done = False
        completion.tool_calls = collect_calls(calls)
        if not done:
            message = f"The answer from {endpoint.label} was cut off mid-stream."
            raise LLMError("interrupted", message, completion)
        return completion


def as_sent(messages: list[dict[str, Any]], endpoint: Endpoint) -> list[dict[str, Any]]:
    """The embedded model's template takes the prompt's system messages where they
    stand (agent.prompt.TurnPrompt.with_history); other servers get them as one."""
    return messages if endpoint.is_local else one_system_message(messages)


def one_system_message(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The system messages joined into one, first: some chat templates (Gemma's,
    older Mistral's) refuse a second or one after the conversation started, and a
    server behind an OpenAI-compatible API may use any of them. The instructions
    still come first, so a provider's prefix cache keeps them."""
    system = [m for m in messages if m.get("role") == "system"]
    if not system or (len(system) == 1 and messages[0] is system[0]):
        return messages
    joined = "\n\n".join(str(m.get("content") or "") for m in system)
    rest = [m for m in messages if m.get("role") != "system"]
    return [{"role": "system", "content": joined}, *rest]


async def read_events(
    response: httpx.Response,
    completion: Completion,
    calls: dict[int, dict[str, str]],
    on_delta: OnDelta | None,
) -> bool:
    """Fold the SSE stream into `completion`; True when it ended properly."""
    finished = False
    lines = response.aiter_lines()
    async for line in lines:
        if not line.startswith("data:"):
            continue  # comments, keep-alives, event names
        payload = line[5:].strip()
        if payload == "[DONE]":
            await read_to_the_end(lines)
            return True
        try:
            chunk = json.loads(payload)
        except ValueError:
            raise LLMError(
                "bad_response", "The LLM sent a malformed stream chunk.", completion
            ) from None
        if not isinstance(chunk, dict):
            continue
        if chunk.get("error"):
            message = f"The LLM reported an error: {chunk['error']}"
            raise LLMError("server_error", message, completion)
        if chunk.get("usage"):
            completion.usage = Usage.from_openai(chunk["usage"])
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if text:
                completion.content += text
                if on_delta:
                    await on_delta(text)
            for call in delta.get("tool_calls") or []:
                empty = {"id": "", "name": "", "arguments": ""}
                slot = calls.setdefault(call.get("index", len(calls)), empty)
                function = call.get("function") or {}
                slot["id"] = call.get("id") or slot["id"]
                slot["name"] += function.get("name") or ""
                slot["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                completion.finish_reason = choice["finish_reason"]
                finished = True
    # Some servers close the stream after the final chunk without [DONE].
    return finished


async def read_to_the_end(lines: AsyncIterator[str]) -> None:
    """What follows [DONE] (the end of the chunked body): a response read to its
    end leaves its connection to the pool, one left unread is closed, and every
    turn paid a new connection (TCP, and TLS where there is one) for it. A server
    that goes on after [DONE] gets a moment, then its connection is closed."""
    with contextlib.suppress(TimeoutError, httpx.HTTPError):
        async with asyncio.timeout(AFTER_DONE_SECONDS):
            async for _ in lines:
                pass


def collect_calls(calls: dict[int, dict[str, str]]) -> list[ToolCall]:
    return [
        ToolCall(id=slot["id"] or f"call_{index}", name=slot["name"], arguments=slot["arguments"])
        for index, slot in sorted(calls.items())
        if slot["name"]
    ]


def not_running_message(endpoint: Endpoint) -> str:
    if endpoint.is_local:
        from agent.local_model import last_failure

        if reason := last_failure():
            return (
                f"The embedded local model could not start: {reason} Alternatively, point "
                "[llm] base_url / NEOTASK_LLM_BASE_URL at an OpenAI-compatible endpoint."
            )
        return (
            "The embedded local model is not running. Start Neotask with `make run` (it starts "
            "the model), or point [llm] base_url / NEOTASK_LLM_BASE_URL at an OpenAI-compatible "
            "endpoint such as Ollama."
        )
    fix = (
        "[llm] base_url / NEOTASK_LLM_BASE_URL"
        if endpoint.where == CONFIG_FILE
        else f"its base URL on {endpoint.where}"
    )
    return f"Cannot reach the LLM at {endpoint.label}. Check that it is running, or fix {fix}."


def http_error(endpoint: Endpoint, response: httpx.Response) -> LLMError:
    status = response.status_code
    try:
        detail = response.json().get("error", {})
        detail = detail.get("message", "") if isinstance(detail, dict) else str(detail)
    except ValueError:
        detail = response.text[:200]
    suffix = f": {detail}" if detail else ""
    if status in (401, 403):
        return LLMError(
            "auth",
            f"The LLM at {endpoint.label} refused the API key ({status}){suffix}. "
            + (
                "Set [llm] api_key / NEOTASK_LLM_API_KEY."
                if endpoint.where == CONFIG_FILE
                else f"Check its API key on {endpoint.where}."
            ),
        )
    if status == 429:
        retry = response.headers.get("retry-after")
        wait = f" Try again in {retry} s." if retry else " Try again in a moment."
        message = f"The LLM at {endpoint.label} is rate limiting (429).{wait}"
        return LLMError("rate_limited", message)
    if status == 404:
        return LLMError(
            "bad_request",
            f"The LLM at {endpoint.label} answered 404{suffix}. Check "
            + (
                "[llm] model and base_url (it usually ends in /v1)."
                if endpoint.where == CONFIG_FILE
                else f"its model name and base URL (it usually ends in /v1) on {endpoint.where}."
            ),
        )
    if status >= 500:
        return LLMError("server_error", f"The LLM at {endpoint.label} failed ({status}){suffix}.")
    message = f"The LLM at {endpoint.label} rejected the request ({status}){suffix}."
    return LLMError("bad_request", message)
