"""Neotask as an OpenAI-compatible server (/v1/models, /v1/chat/completions):
a request checked and mapped to an input of a Neotask chat, and the chat's
answer shaped as OpenAI's responses and stream chunks. The views are
sessions_app.openai_views.

- The model `neotask/<agent>` picks the agent (GET /v1/models lists them).
- The chat: the `X-Neotask-Chat` header, else the request's `user` field, names it.
  A full key (`agent:main:web:…`) picks one of the token owner's chats; a name
  (letters, digits, '.', '_', '-') picks or starts `agent:<agent>:openai:<name>`.
  Without either, the chat is `agent:<agent>:openai:<hash of the first user
  message>`: a client that resends its whole conversation each time stays in one chat.
- Neotask keeps the conversation, so only the new input is taken from the
  messages: the last user message, or the results (`role: tool`) of the tool
  calls the chat handed to the client. The client's system messages join that
  turn's prompt; memory is recalled as for a web turn.
- The client's `tools` are offered to the model; a call of one ends the turn with
  `finish_reason: "tool_calls"`, and the client's next request brings the results.
- Errors have OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from django.db import IntegrityError, transaction
from django.http import JsonResponse
from pydantic import BaseModel, Field, StrictBool, StrictStr, ValidationError

from agent.client_tools import ClientTurn, pending_client_calls
from agent.frames import Outcome
from core.api import http_error
from core.ownership import Owner
from memory.models import EventType
from memory.workspace import DEFAULT_AGENT
from sessions_app import chat
from sessions_app.keys import SessionKey, SessionKeyError, is_part
from sessions_app.models import Agent, ChatInput, Session

CHANNEL = "openai"  # the channel part of the chats this endpoint starts
MODEL_PREFIX = "neotask/"
CHAT_HEADER = "X-Neotask-Chat"
HASH_LENGTH = 16  # hex digits of the first message's hash in a chat's key
TOOL_NAME = r"^[A-Za-z0-9_-]{1,64}$"  # OpenAI's rule for function names
MAX_TOOLS = 128  # OpenAI's limit
SYSTEM_ROLES = ("system", "developer")
MAX_CLIENT_BYTES = 256 * 1024  # what a request adds to its input: system, tools, results
Role = Literal["system", "developer", "user", "assistant", "tool"]
ROLES = get_args(Role)


class OpenAIError(Exception):
    """A request refused, answered in OpenAI's error shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.type, self.param, self.code = status, type, param, code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        error = {"message": str(self), "type": self.type, "param": self.param, "code": self.code}
        return {"error": error}

    def response(self) -> JsonResponse:
        return JsonResponse(self.body(), status=self.status, headers=self.headers)


# core.api.http_error's statuses as OpenAI's error types and codes.
OPENAI_KINDS = {
    401: ("invalid_request_error", "invalid_api_key"),
    429: ("rate_limit_exceeded", None),  # the code: which limit
}


def openai_error(exc: BaseException) -> OpenAIError:
    """Any error as the client gets it: the one mapping (core.api.http_error:
    the token's 401, the quota's 429, …) in OpenAI's shape."""
    if isinstance(exc, OpenAIError):
        return exc
    error = http_error(exc)
    default = ("server_error" if error.status >= 500 else "invalid_request_error", None)
    type, code = OPENAI_KINDS.get(error.status, default)
    code = error.extra.get("limit", code)
    return OpenAIError(error.status, str(error), type=type, code=code, headers=error.headers)


def model_id(agent: str) -> str:
    return f"{MODEL_PREFIX}{agent}"


def model_list(owner: Owner) -> dict[str, Any]:
    """GET /v1/models: one model per agent of the owner; `main` always (a GET
    creates no row: its agent is made when a chat first uses it)."""
    created = dict(Agent.objects.owned_by(owner).values_list("name", "created_at"))
    names = sorted({DEFAULT_AGENT, *created})
    return {
        "object": "list",
        "data": [
            {
                "id": model_id(name),
                "object": "model",
                "created": int(created[name].timestamp()) if name in created else 0,
                "owned_by": "neotask",
            }
            for name in names
        ],
    }


# The request, declared once: what pydantic refuses becomes OpenAI's error with
# the message `refusal` gives for where it is.


class TextPart(BaseModel):
    type: Literal["text"]
    text: Any = None


class Message(BaseModel):
    role: Role
    content: StrictStr | list[TextPart] | None = None
    tool_call_id: Any = None  # checked on the results at the end (`tool_results`)

    def text(self) -> str:
        """The message's text, its text parts joined."""
        if isinstance(self.content, list):
            return "".join(str(part.text or "") for part in self.content)
        return self.content or ""


class Function(BaseModel):
    name: Annotated[StrictStr, Field(pattern=TOOL_NAME)]
    parameters: dict[str, Any] = {"type": "object", "properties": {}}
    description: Any = None  # only a string is kept


class Tool(BaseModel):
    type: Literal["function"]
    function: Function

    def described(self) -> dict[str, Any]:
        """The tool as OpenAI describes functions; only the parts the model reads."""
        described = {"name": self.function.name, "parameters": self.function.parameters}
        if isinstance(self.function.description, str):
            described["description"] = self.function.description
        return {"type": "function", "function": described}


class CompletionBody(BaseModel):
    """A /v1/chat/completions body (unknown fields are ignored)."""

    model: Annotated[StrictStr, Field(min_length=1)]
    messages: Annotated[list[Message], Field(min_length=1)]
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = None
    stream: StrictBool = False
    stream_options: Any = None
    user: StrictStr | None = None


FIELD_REFUSALS = {
    "model": "Name a model, e.g. 'neotask/main'.",
    "messages": "'messages' must be a non-empty array.",
    "tools": f"'tools' must be an array of at most {MAX_TOOLS}.",
    "stream": "'stream' must be true or false.",
    "user": "'user' must be a string.",
}


def refusal(error: Any) -> OpenAIError:
    """The first thing pydantic found wrong, said as the client is told it."""
    field, *rest = error["loc"]
    if not rest:
        return OpenAIError(400, FIELD_REFUSALS[field], param=field)
    where, inside = f"{field}[{rest[0]}]", rest[1:]
    if field == "tools":
        if inside[:2] == ["function", "parameters"]:
            return OpenAIError(400, f"{where}.function.parameters must be an object.", param=field)
        return OpenAIError(
            400,
            f"{where} must be {{'type': 'function', 'function': {{'name': …}}}} "
            "with a name of 1-64 letters, digits, '_' or '-'.",
            param=where,
        )
    if not inside:
        return OpenAIError(400, f"{where} must be an object.", param=where)
    if inside[0] == "role":
        message = f"{where}.role must be one of {', '.join(ROLES)}."
        return OpenAIError(400, message, param=f"{where}.role")
    if isinstance(error["input"], list):  # content
        return OpenAIError(400, f"{where}.content: only text parts are supported.", param=where)
    return OpenAIError(400, f"{where}.content must be a string or text parts.", param=where)


@dataclass(frozen=True)
class CompletionRequest:
    """A checked /v1/chat/completions request, ready to queue in its chat."""

    model: str
    key: str  # the chat
    text: str  # the new user message; "" when the input is tool results
    client: ClientTurn
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with the usage

    def input_fields(self) -> dict[str, Any]:
        """The ChatInput (sessions_app.runner.queue) this request becomes."""
        kind = ChatInput.Kind.TOOL_RESULTS if self.client.results else ChatInput.Kind.MESSAGE
        return {"kind": kind, "text": self.text, "client": self.client.as_json(), "awaited": True}


def parse_request(owner: Owner, body: dict[str, Any], chat_name: str | None) -> CompletionRequest:
    """Check `body` and find (or start) its chat; OpenAIError says what is wrong,
    with nothing written."""
    try:
        asked = CompletionBody.model_validate(body)
    except ValidationError as exc:
        error = exc.errors()[0]
        if error["loc"][0] != "model":  # a model that does not exist is named first
            find_agent(owner, body["model"])
        raise refusal(error) from None
    agent = find_agent(owner, asked.model)
    messages = asked.messages
    system = "\n\n".join(message.text() for message in messages if message.role in SYSTEM_ROLES)
    tools = tuple(tool.described() for tool in asked.tools or ())
    options = asked.stream_options or {}
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    first = next((message.text() for message in messages if message.role == "user"), None)
    if first is None:
        raise OpenAIError(400, "Send at least one user message.", param="messages")
    text = ""
    results: tuple[dict[str, str], ...] = ()
    if messages[-1].role == "user":
        text = check_text(messages[-1].text(), len(messages) - 1)
    elif messages[-1].role == "tool":
        results = tool_results(messages)
    else:
        last = "The last message must be the user's or a tool's result."
        raise OpenAIError(400, last, param="messages")
    client = ClientTurn(system=system, tools=tools, results=results)
    check_storable(client)
    # Results go to a chat that handed out calls: none is started for them.
    source = CHAT_HEADER if chat_name is not None else "user"
    key = chat_key(owner, agent, chat_name or asked.user, first, start=not results, source=source)
    if results:
        check_results(owner, key, results)
    return CompletionRequest(asked.model, key, text, client, asked.stream, include_usage)


def find_agent(owner: Owner, model: str) -> Agent:
    name = model.removeprefix(MODEL_PREFIX)
    if model.startswith(MODEL_PREFIX):
        if name == DEFAULT_AGENT:
            return Agent.objects.default_for(owner)
        agent = Agent.objects.owned_by(owner).filter(name=name).first()
        if agent is not None:
            return agent
    raise OpenAIError(
        404,
        f"The model {model!r} does not exist: use neotask/<agent>, as GET /v1/models lists.",
        param="model",
        code="model_not_found",
    )


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings(item)


def check_storable(client: ClientTurn) -> None:
    """What the client sent is stored with its input (ChatInput.client): PostgreSQL
    refuses NUL and lone surrogates, and a message's size limit holds for it all."""
    for text in strings(client.as_json()):
        if "\x00" in text:
            raise OpenAIError(400, "The request cannot contain NUL characters.")
        try:
            text.encode()
        except UnicodeEncodeError:
            raise OpenAIError(400, "The request is not valid Unicode (a lone surrogate).") from None
    size = len(json.dumps(client.as_json(), ensure_ascii=False).encode())
    if size > MAX_CLIENT_BYTES:
        raise OpenAIError(
            400,
            f"The system messages, tools and tool results are longer than "
            f"{MAX_CLIENT_BYTES // 1024} KB together.",
        )


def check_text(content: str, index: int) -> str:
    try:
        return chat.check_message(content)
    except ValueError as exc:
        raise OpenAIError(400, str(exc), param=f"messages[{index}].content") from None


def tool_results(messages: list[Message]) -> tuple[dict[str, str], ...]:
    """The `role: tool` messages at the end: the results of the calls handed out."""
    results = []
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role != "tool":
            break
        call_id = message.tool_call_id
        if not isinstance(call_id, str) or not call_id:
            where = f"messages[{index}].tool_call_id"
            unnamed = f"{where} must name the call this is the result of."
            raise OpenAIError(400, unnamed, param=where)
        results.append({"tool_call_id": call_id, "content": message.text()})
    return tuple(reversed(results))


def chat_key(
    owner: Owner,
    agent: Agent,
    name: str | None,
    first_message: str,
    *,
    start: bool = True,
    source: str = "user",
) -> str:
    """The chat a request goes to, with `start` started if it is new (see the module's doc)."""
    if name is not None and ":" in name:
        try:
            parsed = str(SessionKey.parse(name))
        except SessionKeyError:
            parsed = ""
        session = Session.objects.active(owner, parsed) if parsed else None
        if session is None:  # malformed, unknown or someone else's: the same answer
            raise OpenAIError(404, "There is no such chat.", param=source, code="chat_not_found")
        if session.agent_id != agent.pk:
            raise OpenAIError(
                400, f"The chat {name!r} is not a chat of the model's agent.", param="model"
            )
        return session.key
    if name is not None and not is_part(name):
        raise OpenAIError(
            400,
            f"A chat name ({CHAT_HEADER} or 'user') is a chat's key or 1-64 letters, digits, "
            "'.', '_' or '-', starting with a letter or digit.",
            param=source,
        )
    chat_id = name or hashlib.sha256(first_message.strip().encode()).hexdigest()[:HASH_LENGTH]
    named = str(SessionKey(agent=agent.name, channel=CHANNEL, chat=chat_id))
    if start and Session.objects.active(owner, named) is None:
        try:
            with transaction.atomic():
                Session.start(owner, agent, CHANNEL, chat_id)
        except IntegrityError:  # another request started it a moment ago
            pass
    return named


def check_results(owner: Owner, key: str, results: tuple[dict[str, str], ...]) -> None:
    session = Session.objects.active(owner, key)
    pending = pending_client_calls(owner, str(session.pk))[1] if session is not None else {}
    for result in results:
        if result["tool_call_id"] not in pending:
            raise OpenAIError(
                400,
                f"The tool call {result['tool_call_id']!r} is not waiting for a result in "
                "this chat.",
                param="messages",
            )


# Answers


def completion_id() -> str:
    return f"chatcmpl-{secrets.token_hex(12)}"


def handed_calls(outcome: Outcome) -> list[dict[str, Any]]:
    """The tool calls the turn handed to the client, as OpenAI sends them."""
    return [
        {
            "id": event["data"]["id"],
            "type": "function",
            "function": {"name": event["data"]["name"], "arguments": event["data"]["arguments"]},
        }
        for event in outcome.events
        if event["event_type"] == EventType.TOOL_CALL and event["data"].get("client")
    ]


def finish_reason(outcome: Outcome, calls: list[dict[str, Any]]) -> str:
    if calls:
        return "tool_calls"
    return "length" if outcome.status == "max_iterations" else "stop"


def openai_usage(outcome: Outcome) -> dict[str, int]:
    prompt, answer = outcome.usage.get("input", 0), outcome.usage.get("output", 0)
    return {"prompt_tokens": prompt, "completion_tokens": answer, "total_tokens": prompt + answer}


def failure(outcome: Outcome) -> OpenAIError | None:
    """A turn that failed (the model, the server) as the error the client gets.
    x-should-retry: the message is stored; the openai package would send it again."""
    if outcome.status != "error":
        return None
    return OpenAIError(
        502,
        outcome.error or "The turn failed.",
        type="server_error",
        code="turn_failed",
        headers={"x-should-retry": "false"},
    )


def completion(request: CompletionRequest, outcome: Outcome) -> dict[str, Any]:
    """A non-streaming answer."""
    calls = handed_calls(outcome)
    message: dict[str, Any] = {"role": "assistant", "content": outcome.answer or outcome.error}
    if calls:
        message["tool_calls"] = calls
        message["content"] = outcome.answer or None
    return {
        "id": completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason(outcome, calls),
                "logprobs": None,
            }
        ],
        "usage": openai_usage(outcome),
    }


@dataclass
class Chunks:
    """The chunks of one streamed answer, all with the same id."""

    request: CompletionRequest
    id: str = ""
    created: int = 0

    def __post_init__(self) -> None:
        self.id, self.created = completion_id(), int(time.time())

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.request.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    def start(self) -> dict[str, Any]:
        return self.chunk({"role": "assistant", "content": ""})

    def text(self, text: str) -> dict[str, Any]:
        return self.chunk({"content": text})

    def end(self, outcome: Outcome, streamed: str) -> list[dict[str, Any]]:
        """What follows the streamed text: what of the answer did not stream (the
        channel layer may drop frames), the tool calls, the finish, the usage."""
        chunks = []
        answer = outcome.answer or ("" if outcome.status == "completed" else outcome.error or "")
        if answer and not streamed.endswith(answer):
            missing = answer[len(streamed) :] if answer.startswith(streamed) else answer
            chunks.append(self.text(missing))
        calls = handed_calls(outcome)
        if calls:
            indexed = [{"index": index, **call} for index, call in enumerate(calls)]
            chunks.append(self.chunk({"tool_calls": indexed}))
        chunks.append(self.chunk({}, finish_reason(outcome, calls)))
        if self.request.include_usage:
            usage = {**self.chunk({}), "choices": [], "usage": openai_usage(outcome)}
            chunks.append(usage)
        return chunks
