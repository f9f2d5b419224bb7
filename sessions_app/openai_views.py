"""/v1/models and /v1/chat/completions: Neotask for OpenAI-compatible clients
(sessions_app.openai_compat holds the rules). Only API tokens authenticate here:
no cookie is involved, so there is no CSRF to check."""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from agent.frames import Outcome
from core.api import ApiError, ApiRequest, TooManyRequests, json_body
from core.ownership import Owner
from core.tokens import TokenRefused, token_required
from sessions_app import runner
from sessions_app.broadcast import ChatFrames
from sessions_app.models import Api, ChatInput
from sessions_app.openai_compat import (
    CHAT_HEADER,
    Chunks,
    CompletionRequest,
    OpenAIError,
    completion,
    failure,
    model_list,
    openai_error,
    parse_request,
)

FRAME_WAIT = 1.0  # seconds between looks at the turn while no frame comes
LAST_FRAMES = 0.5  # after the turn ended: how long its last frames may still take


def allow(request: HttpRequest, method: str) -> None:
    if request.method != method:
        raise OpenAIError(405, f"Use {method}.", headers={"Allow": method})


def refused(exc: TokenRefused) -> HttpResponseBase:
    return openai_error(exc).response()


@token_required(Api.OPENAI, refused)
async def models(request: ApiRequest) -> HttpResponseBase:
    try:
        allow(request, "GET")
        return JsonResponse(await sync_to_async(model_list)(request.user))
    except OpenAIError as exc:
        return exc.response()


@csrf_exempt
@login_not_required
def unknown(request: HttpRequest, rest: str) -> HttpResponseBase:
    """Any other path under /v1/: a client probing for an endpoint gets OpenAI's
    error shape, not the HTML 404 page."""
    return OpenAIError(
        404,
        "Neotask serves /v1/models and /v1/chat/completions only.",
        code="unknown_url",
    ).response()


def read_request(request: ApiRequest) -> CompletionRequest:
    allow(request, "POST")
    try:
        body = json_body(request)
    except ApiError as exc:
        raise OpenAIError(exc.status, str(exc)) from None
    return parse_request(request.user, body, request.headers.get(CHAT_HEADER))


@token_required(Api.OPENAI, refused)
async def chat_completions(request: ApiRequest) -> HttpResponseBase:
    owner = request.user
    try:
        asked = await sync_to_async(read_request)(request)
        if asked.stream:
            return await stream(owner, asked)
        try:
            outcome = await runner.queue(owner, asked.key, asked.input_fields(), wait=True)
        except TooManyRequests as exc:
            raise openai_error(exc) from None
        assert outcome is not None
        refused = failure(outcome)
        if refused is not None:
            raise refused
        return JsonResponse(completion(asked, outcome), headers={CHAT_HEADER: asked.key})
    except OpenAIError as exc:
        return exc.response()


async def stream(owner: Owner, asked: CompletionRequest) -> HttpResponseBase:
    """The answer as server-sent events: the chat's frames, received as its tabs
    receive them (the turn may run in another process), from the input's start."""
    frames = ChatFrames(owner.pk, asked.key)
    await frames.__aenter__()  # before the input is stored: none of its frames is missed
    try:
        stored: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def learn(item: ChatInput) -> None:
            if not stored.done():
                stored.set_result(item.pk)

        task = in_background(
            runner.queue(
                owner,
                asked.key,
                asked.input_fields(),
                wait=True,
                stored=learn,
            )
        )
        either: list[asyncio.Future[Any]] = [task, stored]
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if not stored.done():  # refused before it was stored
            try:
                task.result()
            except TooManyRequests as exc:
                raise openai_error(exc) from None
    except BaseException:
        await frames.__aexit__(None, None, None)
        raise
    events = sse(frames, task, stored.result(), Chunks(asked))
    response = StreamingHttpResponse(events, content_type="text/event-stream")
    response.headers[CHAT_HEADER] = asked.key
    response.headers["Cache-Control"] = "no-cache"
    return response


def in_background(coroutine: Any) -> asyncio.Task[Outcome | None]:
    """The input's run, in a task that outlives the request if the client goes (the
    turn is stored all the same), with a fresh context: a copy of the request's
    would tie the turn's database calls to the request's thread-sensitive context."""
    task = asyncio.create_task(coroutine, context=contextvars.Context())
    runner.BACKGROUND.add(task)
    task.add_done_callback(runner.BACKGROUND.discard)
    return task


def data(payload: dict[str, Any] | str) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {text}\n\n".encode()


async def sse(
    frames: ChatFrames, task: asyncio.Task[Outcome | None], input_id: int, chunks: Chunks
) -> AsyncIterator[bytes]:
    try:
        yield data(chunks.start())
        streamed, ours = "", False
        while True:
            message = await frames.next(LAST_FRAMES if task.done() else FRAME_WAIT)
            if message is None:
                if task.done():
                    break
                continue
            frame = message.get("frame", {})
            if frame.get("type") == "started":
                ours = frame["input_id"] == input_id
            elif ours and frame.get("type") == "delta":
                streamed += frame["text"]
                yield data(chunks.text(frame["text"]))
            elif ours and frame.get("type") == "done":
                break
        outcome = await asyncio.shield(task)
        assert outcome is not None
        refused = failure(outcome)
        if refused is not None:
            yield data(refused.body())
        else:
            for chunk in chunks.end(outcome, streamed):
                yield data(chunk)
        yield data("[DONE]")
    finally:
        await frames.__aexit__(None, None, None)
