"""What a request or a chat socket gets while the database is down or cannot
write (a full disk): 503, not 500 — the server is fine, the page can be tried again
— in the shape its client reads: a page, the JSON API's `{"error": …}`, the
OpenAI-compatible endpoint's `{"error": {"message": …}}`, a socket closed with
4503 (as when Redis is down: the chat page reconnects).

Django's 500 handler (`server_error`) is where an error raised outside a view
ends up too (a session read in a middleware), so the answer is decided there."""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

log = logging.getLogger(__name__)

# The errors of a database that is down, unreachable or cannot write; not those of
# a bug (IntegrityError, ProgrammingError: a 500).
DOWN = (OperationalError, InterfaceError)
UNAVAILABLE = "The database is unavailable or cannot write; try again in a moment."
FAILED = "The server failed; it was logged."
RETRY_AFTER = {"Retry-After": "30"}
CLOSE_CODE = 4503  # a websocket's 503 (daphne allows only 1000 and 3000-4999)
API_PATHS = ("/api/",)
OPENAI_PATHS = ("/v1/",)


def server_error(request: HttpRequest) -> HttpResponse:
    """Django's handler500: 503 for a database that is down, else 500; JSON for
    the APIs, a page for the rest (rendered without the database)."""
    down = isinstance(sys.exc_info()[1], DOWN)
    status, headers = (503, RETRY_AFTER) if down else (500, None)
    message = UNAVAILABLE if down else FAILED
    if request.path.startswith(API_PATHS):
        return JsonResponse({"error": message}, status=status, headers=headers)
    if request.path.startswith(OPENAI_PATHS):
        kind = "service_unavailable" if down else "server_error"
        body = {"error": {"message": message, "type": kind}}
        return JsonResponse(body, status=status, headers=headers)
    page = render_to_string("503.html" if down else "500.html")
    return HttpResponse(page, status=status, headers=headers)


class ClosedWhenDown:
    """Around the websocket stack: a database error while a socket opens (the
    session's user read before any consumer runs) or while it is open closes it
    with CLOSE_CODE instead of failing the handshake with an HTTP 500."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        accepted = False

        async def sending(message: dict[str, Any]) -> None:
            nonlocal accepted
            accepted = accepted or message["type"] == "websocket.accept"
            await send(message)

        try:
            await self.inner(scope, receive, sending)
        except DOWN as exc:
            log.warning("chat socket closed: the database is unavailable (%s)", exc)
            if not accepted:
                await send({"type": "websocket.accept"})
            await send({"type": "websocket.close", "code": CLOSE_CODE})
