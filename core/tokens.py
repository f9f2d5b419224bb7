"""The one check of a program's bearer token, for every door that takes one:
the JSON API (core.api.endpoint), /v1 (sessions_app.openai_views), /mcp
(agent.mcp.server, at the ASGI level: `asgi_authenticate`) and /metrics
(health.views). One challenge, one rule for 401 and 403, one place to read.

The tokens are not core's: personal API tokens are sessions_app's (ApiToken,
good for some of its APIs: the scope), the /metrics token is a setting read by
`health`. Both live above core, so each registers how to check its scope's
tokens (`register`, from its AppConfig.ready, as memory's provenance is told
chats' titles); core never imports them.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from functools import wraps
from inspect import iscoroutinefunction
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.models import User
from django.http import HttpRequest, JsonResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

CHALLENGE = 'Bearer realm="neotask"'
HINT = "Send 'Authorization: Bearer nt_…' (create a token at /settings/tokens/)."


@dataclass(frozen=True)
class Scope:
    """How a scope's tokens are checked: `check` maps a presented token to whom it
    stands for (an owner; True for /metrics' shared secret), or None if refused."""

    check: Callable[[str], Any]
    refusal: str  # the 401's message: which token this door takes, where to get one
    # A well-formed token that is wrong: 401 (ask again) where a person holds the
    # token, 403 for /metrics, whose one token is a setting (Prometheus can't re-ask).
    wrong_status: int = 401


scopes: dict[str, Scope] = {}


def register(name: str, scope: Scope) -> None:
    scopes[name] = scope


def token_refusal(door: str) -> str:
    """The 401's message of a door taking personal API tokens."""
    return (
        f"The API token is missing, malformed, wrong, revoked or expired, or not for {door}. {HINT}"
    )


class TokenRefused(Exception):
    """A request without a good token for its scope: 401 with the challenge, or 403."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status

    @property
    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": CHALLENGE} if self.status == 401 else {}


def authenticate(header: str | None, name: str) -> Any:
    """Whom the `Authorization: Bearer …` header stands for in scope `name`;
    TokenRefused if it is missing, not a bearer token, or refused."""
    scope = scopes[name]
    scheme, _, presented = (header or "").partition(" ")
    presented = presented.strip()
    if scheme.lower() != "bearer" or not presented:
        raise TokenRefused(401, scope.refusal)
    principal = scope.check(presented)
    if principal is None:
        status = scope.wrong_status
        raise TokenRefused(status, scope.refusal if status == 401 else "Wrong token.")
    return principal


def json_refusal(refused: TokenRefused) -> HttpResponseBase:
    return JsonResponse({"error": str(refused)}, status=refused.status, headers=refused.headers)


View = Callable[..., Any]


def token_required(
    name: str, answer: Callable[[TokenRefused], HttpResponseBase] = json_refusal
) -> Callable[[View], View]:
    """A view for programs with a token of scope `name` (no cookie: no CSRF, and a
    refusal in `answer`'s shape rather than the login page). A user token's owner
    becomes `request.user`; /metrics' secret names nobody."""

    def decorate(view: View) -> View:
        def let_in(request: HttpRequest) -> None:
            principal = authenticate(request.headers.get("Authorization"), name)
            if isinstance(principal, User):
                request.user = principal

        if iscoroutinefunction(view):

            @wraps(view)
            async def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                try:
                    await sync_to_async(let_in)(request)
                except TokenRefused as refused:
                    return answer(refused)
                return await view(request, *args, **kwargs)

        else:

            @wraps(view)
            def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                try:
                    let_in(request)
                except TokenRefused as refused:
                    return answer(refused)
                return view(request, *args, **kwargs)

        return csrf_exempt(login_not_required(checked))

    return decorate


async def asgi_authenticate(asgi_scope: MutableMapping[str, Any], name: str) -> Any:
    """`authenticate` for an ASGI application below Django (/mcp): the same check
    on the request's header, in a thread (it reads the database)."""
    header = dict(asgi_scope["headers"]).get(b"authorization", b"").decode("latin-1")
    return await database_sync_to_async(authenticate)(header, name)
