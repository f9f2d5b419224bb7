"""What the page tests send and read, and the project's URLs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.http import HttpResponse
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

# The header htmx sends: the view answers with a partial.
HTMX: dict[str, Any] = {"HTTP_HX_REQUEST": "true"}
XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def text(response: HttpResponse) -> str:
    return response.content.decode()


def uid(user: User) -> str:
    """The user's id as a password-reset link carries it."""
    return urlsafe_base64_encode(force_bytes(user.pk))


def walk(patterns: list, prefix: str = "") -> Iterator[tuple[str, URLPattern]]:
    """Every URL pattern under `patterns` with its whole route."""
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield prefix + str(pattern.pattern), pattern


def project_urls() -> dict[str, str]:
    """Route → URL name of every pattern outside the admin."""
    return {
        route: pattern.name or ""
        for route, pattern in walk(get_resolver().url_patterns)
        if not route.startswith("admin/")
    }


def client_for(user: User, **options: Any) -> Client:
    """A test client (with `options`) logged in as `user`, without a password."""
    client = Client(**options)
    client.force_login(user)
    return client


def session_cookie(client: Client) -> str:
    """The Cookie header of a logged-in client's session, as a browser sends it."""
    name = settings.SESSION_COOKIE_NAME
    return f"{name}={client.cookies[name].value}"
