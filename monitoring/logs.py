"""Logging: plain lines, or one JSON object a line (`[server] log_format =
"json"`), each carrying the request's id and, within a chat's turn, the chat's.

Every module logs with the standard library; in JSON mode structlog's
formatter renders the records (Django's, django-q2's and Neotask's alike), with
the ids bound in context variables (`bind_request`, `bind_chat`).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode

import structlog

if TYPE_CHECKING:  # the settings import this module before Django is set up
    from django.http import HttpRequest, HttpResponse

log = logging.getLogger("neotask.requests")

# An id the proxy gave the request (nginx: $request_id) is kept if it looks like one.
REQUEST_ID_HEADER = "X-Request-ID"
REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")

# Query parameters whose values are secrets (the first-run token, OAuth codes and
# states, keys): an access log shows them as REDACTED.
SECRET_PARAMETERS = frozenset(
    {
        "token",
        "key",
        "api_key",
        "apikey",
        "code",
        "state",
        "session_state",
        "access_token",
        "id_token",
        "refresh_token",
        "client_secret",
        "secret",
        "password",
    }
)
REDACTED = "REDACTED"
# The version whose access log (AccessLogGenerator) redact_daphne_access_log changes;
# pinned exactly in pyproject.toml (tests/test_patched_packages.py).
PATCHED_FOR = {"daphne": "4.2.3"}


def logging_config(log_format: str, verbose: bool = True) -> dict[str, Any]:
    """The LOGGING setting for `log_format` ("plain" or "json"). Plain lines are
    for a terminal: without `verbose` ([server] verbose) it shows only warnings
    and errors, not the job cluster's INFO lines about each task (loggers keep
    their levels: a test's capture still sees INFO records)."""
    formatters: dict[str, Any] = {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {
            "()": structlog.stdlib.ProcessorFormatter,
            "foreign_pre_chain": [
                structlog.contextvars.merge_contextvars,
                structlog.stdlib.add_log_level,
                structlog.stdlib.add_logger_name,
                structlog.stdlib.ExtraAdder(),
                structlog.processors.TimeStamper(fmt="iso", utc=True),
            ],
            "processors": [
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                structlog.processors.JSONRenderer(),
            ],
        },
    }
    quiet = log_format == "plain" and not verbose
    console = {
        "class": "logging.StreamHandler",
        "formatter": log_format,
        "level": "WARNING" if quiet else "NOTSET",
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {log_format: formatters[log_format]},
        "handlers": {"console": console},
        "root": {"handlers": ["console"], "level": "INFO"},
        "loggers": {
            "django.db.backends": {"level": "WARNING"},
            "httpx": {"level": "WARNING"},  # one line per LLM call is noise
            "mcp": {"level": "WARNING"},  # the MCP SDK logs every request and session
            # django-q2 adds a plain handler of its own to a logger without one.
            "django-q": {"handlers": ["console"], "level": "INFO", "propagate": False},
            # One line per request and per turn: what a JSON log is read for;
            # noise in a terminal.
            "neotask.requests": {"level": "INFO" if log_format == "json" else "WARNING"},
            "neotask.turns": {"level": "INFO" if log_format == "json" else "WARNING"},
        },
    }


def without_secrets(uri: str) -> str:
    """`uri` (a path and its query) with the values of secret parameters redacted."""
    path, mark, query = uri.partition("?")
    if not mark:
        return uri
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(name.lower() in SECRET_PARAMETERS for name, _ in pairs):
        return uri
    redacted = [
        (name, REDACTED if name.lower() in SECRET_PARAMETERS else value) for name, value in pairs
    ]
    return f"{path}?{urlencode(redacted)}"


def redact_daphne_access_log() -> None:
    """daphne's own access log (its plain lines, when it keeps one) shows each
    request's path and query: from now on without secrets' values."""
    from daphne.access import AccessLogGenerator

    write = AccessLogGenerator.__call__

    def redacting(self: Any, protocol: str, action: str, details: dict[str, Any]) -> None:
        if isinstance(details.get("path"), str):
            details = {**details, "path": without_secrets(details["path"])}
        write(self, protocol, action, details)

    AccessLogGenerator.__call__ = redacting


def request_id(request: HttpRequest) -> str:
    given = request.headers.get(REQUEST_ID_HEADER, "")
    return given if REQUEST_ID.fullmatch(given) else uuid.uuid4().hex


def bind_chat(owner_id: int, key: str, input_id: int) -> None:
    """The chat a turn runs in, on every line logged while it runs (its task's context)."""
    structlog.contextvars.bind_contextvars(user_id=owner_id, chat=key, input_id=input_id)


class RequestLogMiddleware:
    """Gives each request an id (the proxy's, or a new one), bound to every line
    logged while it is answered and sent back in X-Request-ID, and logs one
    line per request: method, path (without the query), status, duration."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.monotonic()
        structlog.contextvars.clear_contextvars()
        rid = request_id(request)
        structlog.contextvars.bind_contextvars(request_id=rid)
        response = self.get_response(request)
        response[REQUEST_ID_HEADER] = rid
        if not log.isEnabledFor(logging.INFO):
            return response
        user = getattr(request, "user", None)  # absent where WhiteNoise answered
        log.info(
            "request",
            extra={
                "method": request.method,
                "path": request.path,
                "status": response.status_code,
                "duration_ms": round((time.monotonic() - started) * 1000, 1),
                "user_id": user.pk if user is not None and user.is_authenticated else None,
            },
        )
        return response
