"""The sessions and chats in the JSON API (/api/v1/sessions/, chats/, events/):
list, start, read, delete and rename them, post a message and wait for its
answer, on the shared framework (core.api: token or session auth, owner-scoped
lookups, JSON errors)."""

from __future__ import annotations

import uuid

from asgiref.sync import sync_to_async
from django.http import Http404, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.urls import reverse

from core.api import ApiError, ApiRequest, endpoint, int_param, json_body, paged, row_id
from core.ownership import get_owned_or_404
from memory.api import forgotten
from memory.forgetting import NothingToForget
from memory.models import Event
from memory.workspace import DEFAULT_AGENT, AgentNameError, check_agent_name
from sessions_app import chat, chat_deletion, runner, views
from sessions_app.commands import parse_command
from sessions_app.forms import ChatTitleForm
from sessions_app.models import Agent, Session

EVENTS_PER_PAGE = 100
MAX_EVENTS_PER_PAGE = 200


def session_id(pk: str) -> uuid.UUID:
    try:
        return uuid.UUID(pk)
    except ValueError:
        raise Http404 from None


def owned_session(request: ApiRequest, pk: str) -> Session:
    # run_chat_turn reads both in async code, where lazy loading is not allowed.
    sessions = Session.objects.select_related("agent", "owner")
    return get_owned_or_404(sessions, request.user, pk=session_id(pk))


def list_sessions(request: ApiRequest) -> HttpResponse:
    sessions = (
        Session.objects.owned_by(request.user)
        .select_related("agent")
        .order_by("-created_at", "-pk")
    )
    return paged(request, "sessions", sessions, lambda rows: [s.to_dict() for s in rows])


def start_session(request: ApiRequest) -> HttpResponse:
    name = json_body(request).get("agent", DEFAULT_AGENT)
    try:
        check_agent_name(name)
    except AgentNameError as exc:
        raise ApiError(400, str(exc)) from None
    if name == DEFAULT_AGENT:
        agent = Agent.objects.default_for(request.user)
    else:
        found = Agent.objects.owned_by(request.user).filter(name=name).first()
        if found is None:
            raise ApiError(400, f"You have no agent named {name!r}.")
        agent = found
    session = chat.start_chat(request.user, agent)
    location = reverse("api-session", args=[session.pk])
    return JsonResponse(session.to_dict(), status=201, headers={"Location": location})


def read_session(request: ApiRequest, pk: str) -> HttpResponse:
    """The session and its events after `?after=<event id>`, oldest first."""
    session = owned_session(request, pk)
    after = int_param(request, "after", default=0, minimum=0)
    limit = int_param(request, "limit", EVENTS_PER_PAGE, minimum=1, maximum=MAX_EVENTS_PER_PAGE)
    events = list(
        Event.objects.owned_by(request.user)
        .filter(session_id=str(session.pk), id__gt=after)
        .order_by("id")[: limit + 1]
    )
    more = len(events) > limit
    events = events[:limit]
    return JsonResponse(
        {
            "session": session.to_dict(),
            "events": [event.as_dict() for event in events],
            "next_after": events[-1].pk if more else None,
        }
    )


def delete_session(request: ApiRequest, pk: str) -> HttpResponse:
    """One session and all its events (memory.forgetting, through sessions_app.signals)."""
    owned_session(request, pk).delete()
    return HttpResponse(status=204)


def delete_chat(request: ApiRequest, key: str) -> HttpResponse:
    """Every session of the chat `key`, with all their events."""
    try:
        return forgotten(chat_deletion.delete_chat(request.user, key))
    except NothingToForget:
        raise Http404 from None
    except chat_deletion.ChatBusy as exc:
        raise ApiError(409, str(exc)) from None


def rename_chat(request: ApiRequest, key: str) -> HttpResponse:
    """`{"title": "..."}`: every session of the chat, as the chat header's form does."""
    title = json_body(request).get("title")
    if not isinstance(title, str):
        raise ApiError(400, 'Send the new title as a string: {"title": "..."}.')
    form = ChatTitleForm({"title": title})
    if not form.is_valid():
        raise ApiError(400, " ".join(str(error) for error in form.errors["title"]))
    try:
        session = chat.rename_chat(request.user, key, form.cleaned_data["title"])
    except chat.ChatError:
        raise Http404 from None
    return JsonResponse(session.to_dict())


def delete_event(request: ApiRequest, pk: str) -> HttpResponse:
    """One message (any event); the rest of its session stays."""
    try:
        return forgotten(chat_deletion.delete_message(request.user, row_id(pk)))
    except NothingToForget:
        raise Http404 from None
    except chat_deletion.ChatBusy as exc:
        raise ApiError(409, str(exc)) from None


def delete_turn(request: ApiRequest, pk: str) -> HttpResponse:
    """The turn of an event: the user's message and all the agent did in reply."""
    try:
        return forgotten(chat_deletion.delete_turn(request.user, row_id(pk)))
    except NothingToForget:
        raise Http404 from None
    except chat_deletion.ChatBusy as exc:
        raise ApiError(409, str(exc)) from None


def transcript(request: ApiRequest, pk: str) -> HttpResponseBase:
    """The chat page's download (sessions_app.transcripts), owner-scoped there too."""
    return views.session_transcript(request, session_id(pk))


async def post_message(request: ApiRequest, pk: str) -> HttpResponse:
    """One message, answered: waits for the turn (and any queued before it) in
    the event loop, holding no thread, however long the model takes."""
    session = await sync_to_async(owned_session)(request, pk)
    body = await sync_to_async(json_body)(request)
    if "text" not in body:
        raise ApiError(400, 'Send a JSON object like {"text": "Hello"}.')
    try:
        text = chat.check_message(body["text"])
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None
    if parse_command(text) is not None:
        raise ApiError(400, "Slash commands work in the chat page; the API sends messages only.")
    if session.status != Session.Status.ACTIVE:
        successor = await (
            Session.objects.owned_by(request.user)
            .filter(key=session.key, status=Session.Status.ACTIVE)
            .afirst()
        )
        raise ApiError(
            409,
            "This session is archived; post to the active session of its chat.",
            active_session=str(successor.pk) if successor else None,
        )
    # quotas.QuotaExceeded: a 429 (core.api.http_error), nothing stored
    outcome = await runner.submit(request.user, session.key, text, commands=False, wait=True)
    assert outcome is not None
    return JsonResponse(
        {
            "answer": outcome.answer,
            "status": outcome.status,
            "error": outcome.error,
            "usage": outcome.usage,
            "events": outcome.events,
            # Where the conversation continues: post the next message there.
            "session_id": outcome.session_id or str(session.pk),
            "session_changes": outcome.session_changes,
            "warnings": outcome.warnings,
        }
    )


sessions_view = endpoint(GET=list_sessions, POST=start_session)
session_view = endpoint(GET=read_session, DELETE=delete_session)
chat_view = endpoint(PATCH=rename_chat, DELETE=delete_chat)
event_view = endpoint(DELETE=delete_event)
turn_view = endpoint(DELETE=delete_turn)
transcript_view = endpoint(GET=transcript)
messages_view = endpoint(POST=post_message)
