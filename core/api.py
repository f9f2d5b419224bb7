"""The JSON API's framework under /api/v1/ for programs (other channels, scripts);
each app declares its resources in its own `api.py` (sessions_app, memory,
importers; core.history_api) and sessions_app.urls routes them.

Every view is built by `endpoint`, which gives them one behaviour: a personal
API token (`Authorization: Bearer nt_…`, no CSRF: no cookie is involved; checked
by core.tokens) or the browser session (CSRF as usual), owner-scoped lookups,
and JSON errors (`http_error`: the one mapping of errors to HTTP answers, which
/v1 renders in OpenAI's shape).
"""

from __future__ import annotations

import json
import logging
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
from django.views.decorators.csrf import csrf_exempt

from core import tokens, unavailable
from core.ownership import Owner

log = logging.getLogger(__name__)

PER_PAGE = 50
SCOPE = "api"  # the token scope of /api/v1 (sessions_app.models.Api.JSON)

# A method's view: sync, or async (a chat turn waits in the event loop).
Handler = Callable[..., Any]


class ApiRequest(HttpRequest):
    """A handler's request as the type checker should see it: `endpoint` (or
    core.tokens.token_required) has authenticated it, so its user is a token's
    owner or the signed-in user."""

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


class TooManyRequests(Exception):
    """A request refused for now, having stored nothing (sessions_app.quotas):
    which `limit`, and in how many seconds the sender may try again."""

    def __init__(self, message: str, limit: str, retry_after: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.retry_after = retry_after


def http_error(exc: BaseException) -> ApiError:
    """The one mapping of errors to HTTP answers (status, message, headers and the
    body's extra fields), for the JSON API and /v1 alike."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, tokens.TokenRefused):
        return ApiError(exc.status, str(exc), headers=exc.headers)
    if isinstance(exc, Http404):  # the same answer for someone else's row and a missing one
        return ApiError(404, "Not found.")
    if isinstance(exc, TooManyRequests):  # nothing stored: the client may send it again later
        wait = max(1, exc.retry_after)
        headers = {"Retry-After": str(wait)}
        return ApiError(429, str(exc), headers=headers, limit=exc.limit, retry_after=wait)
    if isinstance(exc, unavailable.DOWN):  # down, or cannot write (a full disk): later
        log.warning("API request answered 503: the database failed", exc_info=exc)
        return ApiError(503, unavailable.UNAVAILABLE, unavailable.RETRY_AFTER)
    log.error("API request failed", exc_info=exc)  # a program reads JSON, never Django's page
    return ApiError(500, unavailable.FAILED)


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
    except Exception as exc:
        failed.response = http_error(exc).response()


def csrf_refused(request: HttpRequest) -> bool:
    """Django's CSRF check, as for a view that is not exempt."""

    def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse()

    return CsrfViewMiddleware(view).process_view(request, view, (), {}) is not None


def authenticate(request: HttpRequest) -> None:
    header = request.headers.get("Authorization")
    if header is not None:
        request.user = tokens.authenticate(header, SCOPE)
        return
    if not request.user.is_authenticated:
        raise tokens.TokenRefused(401, tokens.HINT)
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


def row_id(pk: str) -> int:
    """A numeric id from the URL; anything else names nothing (404)."""
    if not pk.isascii() or not pk.isdigit() or len(pk) > 18:
        raise Http404
    return int(pk)


def paged(
    request: ApiRequest,
    name: str,
    rows: Any,
    as_dicts: Callable[[list[Any]], list[dict[str, Any]]],
    per_page: int = PER_PAGE,
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
