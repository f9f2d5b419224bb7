"""Single sign-on wired into mozilla-django-oidc: its code flow (state, nonce,
PKCE, the token exchange, the ID token's signature) with the provider's
endpoints from its discovery document, the [oidc] settings of config.toml, and
Neotask's rules for who gets in (neotask_site.single_sign_on). Anything that
goes wrong at the provider is a page saying so, never a 500.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlencode

import jwt
import requests
from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.views import LoginView
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.views.generic import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
    OIDCLogoutView,
)

from core.forms import ThrottledAuthenticationForm
from core.ownership import Owner
from neotask_site.single_sign_on import (
    ProviderUnavailable,
    SignInRefused,
    discover,
    enabled,
    identity_from,
    sign_in,
)

logger = logging.getLogger(__name__)


def oidc_config() -> dict[str, Any]:
    return settings.NEOTASK["oidc"]


def oidc_setting(name: str, *default: Any) -> Any:
    """mozilla-django-oidc's settings, from config.toml's [oidc] where they are Neotask's."""
    config = oidc_config()
    derived = {
        "OIDC_RP_CLIENT_ID": config["client_id"],
        "OIDC_RP_CLIENT_SECRET": config["client_secret"],
        "OIDC_RP_SCOPES": config["scopes"],
        "OIDC_RP_SIGN_ALGO": "RS256",  # every OpenID provider must offer it
        "OIDC_TIMEOUT": config["timeout_seconds"],
        "OIDC_USE_PKCE": True,
        "OIDC_STORE_ID_TOKEN": True,  # the hint of the provider's logout
        "OIDC_OP_LOGOUT_URL_METHOD": "neotask_site.oidc.provider_logout_url",
    }
    return derived[name] if name in derived else import_from_settings(name, *default)


class OIDCBackend(OIDCAuthenticationBackend):
    """Signs in whom the provider's callback names; answers nothing else (a
    password, a session of another backend)."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The endpoints are read at sign-in (discovery), not from settings.
        self.UserModel = Owner

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> Owner | None:
        if request is None or "nonce" not in kwargs or not enabled(oidc_config()):
            return None  # not the callback's call
        document = discover(oidc_config())
        self.OIDC_OP_TOKEN_ENDPOINT = document["token_endpoint"]
        self.OIDC_OP_USER_ENDPOINT = document["userinfo_endpoint"]
        self.OIDC_OP_JWKS_ENDPOINT = document["jwks_uri"]
        self.OIDC_RP_CLIENT_ID = oidc_setting("OIDC_RP_CLIENT_ID")
        self.OIDC_RP_CLIENT_SECRET = oidc_setting("OIDC_RP_CLIENT_SECRET")
        self.OIDC_RP_SIGN_ALGO = oidc_setting("OIDC_RP_SIGN_ALGO")
        self.OIDC_RP_IDP_SIGN_KEY = None
        return super().authenticate(request, **kwargs)

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        # Only a token signed with the agreed algorithm, by a named key, reaches
        # the library: an unsigned one ("alg": "none") or one signed with the
        # client secret (HS256) is refused here (the library failed on one
        # without a key id with a 500).
        header = jwt.get_unverified_header(token)  # a malformed token: InvalidTokenError
        if header.get("alg") != self.OIDC_RP_SIGN_ALGO:
            raise SignInRefused(
                f"The provider's ID token is signed with {header.get('alg')!r}, "
                f"not {self.OIDC_RP_SIGN_ALGO}: it is not accepted."
            )
        if not isinstance(header.get("kid"), str):
            raise SignInRefused("The provider's ID token does not name its signing key.")
        return super().verify_token(token, **kwargs)

    def get_or_create_user(
        self, access_token: str, id_token: str, payload: dict[str, Any]
    ) -> Owner:
        # The library checks the token's signature, expiry and nonce; not whose it is.
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise SignInRefused("The provider's ID token was issued to another application.")
        if str(payload.get("iss", "")).rstrip("/") != oidc_config()["issuer"].rstrip("/"):
            raise SignInRefused("The ID token was issued by another provider.")
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if userinfo.get("sub") != payload.get("sub"):
            raise SignInRefused("The provider's user info is about someone else.")
        # Some providers put the groups in the ID token only (Azure AD).
        return sign_in(identity_from({**payload, **userinfo}, oidc_config()), oidc_config())

    # Django's rule (an inactive account's session ends), not the library's.
    get_user = ModelBackend.get_user
    user_can_authenticate = ModelBackend.user_can_authenticate


def problem_page(request: HttpRequest, title: str, message: str, status: int) -> HttpResponse:
    context = {"title": title, "message": message, "provider_name": oidc_config()["provider_name"]}
    return render(request, "registration/sign_in_problem.html", context, status=status)


def unavailable_page(request: HttpRequest, message: str) -> HttpResponse:
    return problem_page(request, "The sign-in service is not available", message, 503)


def refused_page(request: HttpRequest, message: str) -> HttpResponse:
    return problem_page(request, "Sign-in refused", message, 403)


@method_decorator(login_not_required, name="dispatch")
class SignInStart(OIDCAuthenticationRequestView):
    """ "Sign in with ...": the browser goes to the provider, if it answers."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, **kwargs: Any) -> None:
        View.__init__(self, **kwargs)  # the endpoint is read at each sign-in

    def get(self, request: HttpRequest) -> HttpResponse:
        config = oidc_config()
        if not enabled(config):
            raise Http404("Single sign-on is not configured.")
        try:
            document = discover(config)
        except ProviderUnavailable as down:
            logger.warning("single sign-on: %s (%s)", down, down.__cause__)
            return unavailable_page(request, str(down))
        self.OIDC_OP_AUTH_ENDPOINT = document["authorization_endpoint"]
        self.OIDC_RP_CLIENT_ID = config["client_id"]
        return super().get(request)


@method_decorator(login_not_required, name="dispatch")
class SignInCallback(OIDCAuthenticationCallbackView):
    """Where the provider sends the browser back: signed in, or a page saying why not."""

    get_settings = staticmethod(oidc_setting)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not enabled(oidc_config()):
            raise Http404("Single sign-on is not configured.")
        try:
            return super().get(request)
        except SignInRefused as refused:
            return refused_page(request, str(refused))
        except ProviderUnavailable as down:
            logger.warning("single sign-on: %s (%s)", down, down.__cause__)
            return unavailable_page(request, str(down))
        except requests.RequestException as exc:
            logger.warning("single sign-on: the provider failed the code exchange: %s", exc)
            return unavailable_page(
                request, f"{oidc_config()['provider_name']} did not complete the sign-in."
            )
        except (jwt.InvalidTokenError, SuspiciousOperation) as exc:
            logger.warning("single sign-on: a bad ID token: %s", exc)
            return refused_page(request, "The provider's ID token is not valid.")

    def login_failure(self) -> HttpResponse:
        # The provider's own reason (e.g. the person cancelled), else a stale link.
        reason = self.request.GET.get("error_description") or self.request.GET.get("error")
        return refused_page(
            self.request,
            f"The sign-in did not complete: {reason}."
            if reason
            else "The sign-in did not complete (it may have been started in another "
            "window, or taken too long). Try again.",
        )


@method_decorator(login_not_required, name="dispatch")
class LogOut(OIDCLogoutView):
    """Logs out here, and at the provider too after a single sign-on."""

    get_settings = staticmethod(oidc_setting)


def provider_logout_url(request: HttpRequest) -> str:
    """The provider's end-session URL for a session it signed in (back to the
    login page afterwards); the login page otherwise, or when it is down."""
    login_page = reverse("login")
    id_token = request.session.get("oidc_id_token")
    if not id_token or not enabled(oidc_config()):
        return login_page
    try:
        end_session = discover(oidc_config()).get("end_session_endpoint")
    except ProviderUnavailable as down:
        logger.warning("single sign-on: logged out here only: %s", down)
        return login_page
    if not isinstance(end_session, str):
        return login_page
    query = {
        "id_token_hint": id_token,
        "client_id": oidc_config()["client_id"],
        "post_logout_redirect_uri": request.build_absolute_uri(login_page),
    }
    return f"{end_session}?{urlencode(query)}"


class SignIn(LoginView):
    """The login page: the provider's button, the password form unless switched off."""

    authentication_form = ThrottledAuthenticationForm

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        config = oidc_config()
        return super().get_context_data(
            single_sign_on=config["provider_name"] if enabled(config) else "",
            local_login=config["local_login"],
            **kwargs,
        )
