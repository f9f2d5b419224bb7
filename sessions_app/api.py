"""The JSON API under /api/v1/ for programs (other channels, scripts).

Every view is built by `endpoint`, which gives them one behaviour: a personal
API token (`Authorization: Bearer nt_…`, no CSRF: no cookie is involved) or
the browser session (CSRF as usual), owner-scoped lookups, and JSON errors.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from inspect import iscoroutinefunction
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import RequestDataTooBig
from django.core.paginator import InvalidPage, Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.middleware.csrf import CsrfViewMiddleware
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt

from core import unavailable
from core.forms import HistoryFilterForm
from core.history import Actor
from core.models import Change
from core.ownership import Owner, get_owned_or_404
from memory import forgetting as memory_forgetting
from memory.files.paths import MemoryPathError, NotFound
from memory.forgetting import Forgotten, NothingToForget
from memory.models import Event, Fact
from memory.provenance import provenance_of
from memory.workspace import DEFAULT_AGENT, AgentNameError, check_agent_name
from sessions_app import chat, chat_deletion, quotas, runner, views
from sessions_app.commands import parse_command
from sessions_app.forms import ChatTitleForm
from sessions_app.models import Agent, Api, ApiToken, Session

log = logging.getLogger(__name__)

SESSIONS_PER_PAGE = 50
EVENTS_PER_PAGE = 100
MAX_EVENTS_PER_PAGE = 200
AUTH_HINT = "Send 'Authorization: Bearer nt_…' (create a token at /settings/tokens/)."
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="neotask"'}

# A method's view: sync, or async (a chat turn waits in the event loop).
Handler = Callable[..., Any]


class ApiRequest(HttpRequest):
    """A handler's request as the type checker should see it: `endpoint` has
    authenticated it, so its user is a token's owner or the signed-in user."""

    user: Owner


class ApiError(Exception):
    """Ends a request with `{"error": message, **extra}` and `status`."""

    def __init__(
        self,
        status: int,
        message: str,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers
        self.extra = extra

    def response(self) -> JsonResponse:
        body = {"error": str(self), **self.extra}
        return JsonResponse(body, status=self.status, headers=self.headers)


def endpoint(**handlers: Handler) -> Handler:
    """One API view dispatching on the method to `handlers` (GET=..., POST=...).

    The view is async when a handler is (a chat turn waits in the event loop,
    not in a thread); sync handlers then run in Django's thread as usual."""
    allowed = ", ".join(handlers)

    def handler_for(request: HttpRequest) -> Handler:
        handler = handlers.get(request.method or "")
        if handler is None:
            raise ApiError(405, f"Use {allowed}.", headers={"Allow": allowed})
        return handler

    if not any(iscoroutinefunction(handler) for handler in handlers.values()):

        def view(request: HttpRequest, **kwargs: Any) -> HttpResponseBase:
            with api_errors() as failed:
                handler = handler_for(request)
                authenticate(request)
                return handler(request, **kwargs)
            return failed.response

    else:

        async def view(request: HttpRequest, **kwargs: Any) -> HttpResponseBase:  # type: ignore[misc]
            with api_errors() as failed:
                handler = handler_for(request)
                await sync_to_async(authenticate)(request)
                if iscoroutinefunction(handler):
                    return await handler(request, **kwargs)
                return await sync_to_async(handler)(request, **kwargs)
            return failed.response

    # csrf_exempt: checked in `authenticate`, and only for the browser session;
    # login_not_required: programs get a JSON 401, not the login page.
    return csrf_exempt(login_not_required(view))


class Failure:
    response: HttpResponseBase


@contextmanager
def api_errors() -> Iterator[Failure]:
    """Turns the errors a handler raises into the API's JSON answers."""
    failed = Failure()
    try:
        yield failed
    except Http404:
        # The same answer for someone else's row and a missing one.
        failed.response = ApiError(404, "Not found.").response()
    except ApiError as exc:
        failed.response = exc.response()
    except unavailable.DOWN:  # down, or cannot write (a full disk): try again later
        log.warning("API request answered 503: the database failed", exc_info=True)
        failed.response = ApiError(503, unavailable.UNAVAILABLE, unavailable.RETRY_AFTER).response()
    except Exception:  # a program reads JSON, never Django's error page
        log.exception("API request failed")
        failed.response = ApiError(500, unavailable.FAILED).response()


def csrf_refused(request: HttpRequest) -> bool:
    """Django's CSRF check, as for a view that is not exempt."""

    def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse()

    return CsrfViewMiddleware(view).process_view(request, view, (), {}) is not None


def token_owner(header: str, api: Api) -> Owner | None:
    """The owner of the API token in an `Authorization: Bearer nt_…` header, if it is
    good for `api`; None if it is missing, malformed, wrong, revoked, expired or for
    other APIs. The one check of every program's token: this API's, /v1/'s
    (sessions_app.openai_views) and /mcp's (sessions_app.mcp_server)."""
    scheme, _, presented = header.partition(" ")
    token = ApiToken.authenticate(presented.strip(), api) if scheme.lower() == "bearer" else None
    return token.owner if token is not None else None


def authenticate(request: HttpRequest) -> None:
    header = request.headers.get("Authorization")
    if header is not None:
        owner = token_owner(header, Api.JSON)
        if owner is None:
            raise ApiError(
                401,
                "The API token is missing, malformed, wrong, revoked or expired, or not "
                f"for /api/v1. {AUTH_HINT}",
                headers=CHALLENGE,
            )
        request.user = owner
        return
    if not request.user.is_authenticated:
        raise ApiError(401, AUTH_HINT, headers=CHALLENGE)
    # A browser session is a cookie, which other sites' forms also send.
    if csrf_refused(request):
        raise ApiError(403, "CSRF check failed: send the X-CSRFToken header, or use an API token.")


def json_body(request: HttpRequest) -> dict[str, Any]:
    try:
        raw = request.body
    except RequestDataTooBig:
        raise ApiError(400, "The request body is too large.") from None
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise ApiError(400, "The request body is not valid JSON.") from None
    except RecursionError:  # e.g. "[[[[…": not a ValueError
        raise ApiError(400, "The request body's JSON is nested too deeply.") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return body


def int_param(
    request: HttpRequest, name: str, default: int, minimum: int, maximum: int | None = None
) -> int:
    raw = request.GET.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f"from {minimum} to {maximum}" if maximum is not None else f"≥ {minimum}"
        raise ApiError(400, f"'{name}' must be an integer {bounds}.")
    return value


def session_id(pk: str) -> uuid.UUID:
    try:
        return uuid.UUID(pk)
    except ValueError:
        raise Http404 from None


def owned_session(request: ApiRequest, pk: str) -> Session:
    # run_chat_turn reads both in async code, where lazy loading is not allowed.
    sessions = Session.objects.select_related("agent", "owner")
    return get_owned_or_404(sessions, request.user, pk=session_id(pk))


def paged(
    request: ApiRequest,
    name: str,
    rows: Any,
    as_dicts: Callable[[list[Any]], list[dict[str, Any]]],
    per_page: int = SESSIONS_PER_PAGE,
) -> JsonResponse:
    """A list endpoint's answer: a page of `rows` (?page=N) and where the next is."""
    paginator = Paginator(rows, per_page)
    try:
        page = paginator.page(request.GET.get("page", 1))
    except InvalidPage as exc:
        raise ApiError(400, f"Bad 'page': {exc}.") from None
    return JsonResponse(
        {
            name: as_dicts(list(page)),
            "page": page.number,
            "pages": paginator.num_pages,
            "count": paginator.count,
            "next_page": page.next_page_number() if page.has_next() else None,
        }
    )


def list_sessions(request: ApiRequest) -> HttpResponse:
    sessions = (
        Session.objects.owned_by(request.user)
        .select_related("agent")
        .order_by("-created_at", "-pk")
    )
    return paged(request, "sessions", sessions, lambda rows: [s.to_dict() for s in rows])


def fact_dicts(facts: list[Fact]) -> list[dict[str, Any]]:
    told = provenance_of(facts)
    return [
        {
            **fact.to_dict(),
            "provenance": (
                {"text": told[fact.pk].text, "url": told[fact.pk].url} if fact.pk in told else None
            ),
        }
        for fact in facts
    ]


def list_facts(request: ApiRequest) -> HttpResponse:
    """The owner's facts, each with where its value came from."""
    facts = Fact.objects.owned_by(request.user).select_related("origin_event")
    return paged(request, "facts", facts, fact_dicts)


def change_dicts(changes: list[Change]) -> list[dict[str, Any]]:
    return [
        {
            "id": change.pk,
            "at": change.at.isoformat(),
            "actor": {"kind": change.actor_kind, "label": change.actor_label},
            "subject": {
                "kind": change.subject_kind,
                "id": change.subject_id,
                "label": change.subject_label,
            },
            "action": change.action,
            "old": change.old_value,
            "new": change.new_value,
        }
        for change in changes
    ]


def list_history(request: ApiRequest) -> HttpResponse:
    """The owner's history of changes, newest first, filtered as the History page
    filters it (?subject=, ?actor=, ?q=)."""
    form = HistoryFilterForm(request.GET)
    if not form.is_valid():
        problems = "; ".join(
            f"'{name}': {' '.join(str(error) for error in errors)}"
            for name, errors in form.errors.items()
        )
        raise ApiError(400, f"Bad filter: {problems}")
    data = form.cleaned_data
    changes = Change.objects.owned_by(request.user).matching(
        data["subject"], data["actor"], data["q"]
    )
    return paged(request, "changes", changes, change_dicts)


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


def forgotten(report: Forgotten) -> JsonResponse:
    return JsonResponse({"deleted": report.as_dict()})


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


def row_id(pk: str) -> int:
    """A numeric id from the URL; anything else names nothing (404)."""
    if not pk.isascii() or not pk.isdigit() or len(pk) > 18:
        raise Http404
    return int(pk)


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


def delete_fact(request: ApiRequest, pk: str) -> HttpResponse:
    fact = get_owned_or_404(Fact, request.user, pk=row_id(pk))
    facts = Fact.objects.filter(pk=fact.pk)
    return forgotten(memory_forgetting.forget_facts(request.user, facts, Actor.user(request.user)))


def delete_memory_file(request: ApiRequest) -> HttpResponse:
    """`?path=memory/notes.md[&agent=main]`: the file on disk and its chunks."""
    agent = request.GET.get("agent", DEFAULT_AGENT)
    path = request.GET.get("path", "")
    try:
        check_agent_name(agent)
    except AgentNameError as exc:
        raise ApiError(400, str(exc)) from None
    if not path:
        raise ApiError(400, "Name the file: ?path=memory/notes.md (and &agent=, default main).")
    try:
        actor = Actor.user(request.user)
        return forgotten(memory_forgetting.forget_memory_file(request.user, agent, path, actor))
    except NotFound:
        raise Http404 from None
    except MemoryPathError as exc:
        raise ApiError(400, str(exc)) from None


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
    try:
        outcome = await runner.submit(request.user, session.key, text, commands=False, wait=True)
    except quotas.QuotaExceeded as exc:  # not stored: the client may send it again later
        raise ApiError(
            429,
            str(exc),
            headers={"Retry-After": str(exc.retry_after)},
            limit=exc.limit,
            retry_after=exc.retry_after,
        ) from None
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
facts_view = endpoint(GET=list_facts)
fact_view = endpoint(DELETE=delete_fact)
history_view = endpoint(GET=list_history)
memory_file_view = endpoint(DELETE=delete_memory_file)
transcript_view = endpoint(GET=transcript)
messages_view = endpoint(POST=post_message)
