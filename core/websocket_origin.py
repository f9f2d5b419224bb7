"""The Origin check, as Django's CSRF check makes it for a form: the page must
come from this site — the scheme, host and port it was reached at — or from one
of CSRF_TRUSTED_ORIGINS. The chat's websocket needs it; /mcp (which Django's
middleware never sees) asks it of any request that carries an Origin, and checks
its Host as Django does for every page, against DNS rebinding. (Channels'
AllowedHostsOriginValidator compares the host name alone: a page at
http://evil:8000 passed for a site at https://evil.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest
from django.utils.http import is_same_domain


class HandshakeRequest(HttpRequest):
    """The websocket handshake as Django sees a request: its Host checked against
    ALLOWED_HOSTS, its scheme from SECURE_PROXY_SSL_HEADER behind the proxy."""

    def __init__(self, scope: Mapping[str, Any]) -> None:
        super().__init__()
        host, port = scope.get("server") or ("", 0)
        self.META.update(SERVER_NAME=str(host), SERVER_PORT=str(port))
        for name, value in scope.get("headers", []):
            key = "HTTP_" + name.decode("latin1").upper().replace("-", "_")
            self.META.setdefault(key, value.decode("latin1"))
        self.secure_socket = scope.get("scheme") in ("wss", "https")

    def _get_scheme(self) -> str:
        return "https" if self.secure_socket else "http"


def same_origin(scope: Mapping[str, Any]) -> bool:
    request = HandshakeRequest(scope)
    origin = request.META.get("HTTP_ORIGIN")
    if origin is None:
        return False
    try:
        if origin == f"{request.scheme}://{request.get_host()}":
            return True
    except DisallowedHost:
        pass
    return trusted(origin)


def known_host(scope: Mapping[str, Any]) -> bool:
    """The Host header names one of ALLOWED_HOSTS."""
    try:
        HandshakeRequest(scope).get_host()
    except DisallowedHost:
        return False
    return True


def from_another_site(scope: Mapping[str, Any]) -> bool:
    """An HTTP request a page of another site sent: its Origin is not this site's.
    (Programs send none; browsers send one with every POST.)"""
    has_origin = any(name == b"origin" for name, _ in scope.get("headers", []))
    return has_origin and not same_origin(scope)


def trusted(origin: str) -> bool:
    """In CSRF_TRUSTED_ORIGINS, exactly or as `scheme://*.domain`."""
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    try:
        given = urlsplit(origin)
    except ValueError:
        return False
    for pattern in settings.CSRF_TRUSTED_ORIGINS:
        if "*" in pattern:
            scheme, netloc = urlsplit(pattern)[:2]
            if given.scheme == scheme and is_same_domain(given.netloc, netloc.lstrip("*")):
                return True
    return False


class SameOriginValidator:
    """ASGI middleware: a websocket from another origin is refused at the handshake."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        if not same_origin(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
