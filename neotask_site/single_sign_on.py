"""Single sign-on with an OpenID Connect provider: whom a provider's claims make
someone here ([oidc] in config.toml; neotask_site.oidc wires it into
mozilla-django-oidc).

The account is the one whose username is the `username_claim`'s value: created
at the first sign-in (without a password), found again at the next. An account
that has a password (made here, not by a sign-in) is taken over only with
`link_existing_users`. Accounts are never matched by email: a provider that does
not verify addresses would hand any account to whoever typed its address, so
`username_claim = "email"` is accepted only with `email_verified` true.

The groups named in `group_map` follow the provider's groups claim at every
sign-in; other groups are the administrator's and stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Group, User
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.db import transaction

from neotask_site.config import comma_list, group_map

DISCOVERY_PATH = "/.well-known/openid-configuration"
ENDPOINTS = ("authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri")


class SignInRefused(Exception):
    """The provider signed someone in whom Neotask does not let in; the message
    is for them."""


class ProviderUnavailable(Exception):
    """The provider did not answer, or not as a provider does; the message is
    for the person signing in."""


def enabled(config: dict[str, Any]) -> bool:
    return bool(config["issuer"])


def discover(config: dict[str, Any]) -> dict[str, Any]:
    """The provider's discovery document, fetched at each step of a sign-in: a
    provider that is down is found before the browser is sent to it."""
    issuer = config["issuer"].rstrip("/")
    name = config["provider_name"]
    try:
        response = requests.get(issuer + DISCOVERY_PATH, timeout=config["timeout_seconds"])
        response.raise_for_status()
        document = response.json()
    except requests.RequestException as exc:
        raise ProviderUnavailable(
            f"{name} is not answering. Try again in a while; if it lasts, tell your administrator."
        ) from exc
    except ValueError as exc:
        raise ProviderUnavailable(f"{name} did not answer with its configuration.") from exc
    if not isinstance(document, dict) or str(document.get("issuer", "")).rstrip("/") != issuer:
        raise ProviderUnavailable(f"{name} answered as another issuer than the configured one.")
    if missing := [key for key in ENDPOINTS if not isinstance(document.get(key), str)]:
        raise ProviderUnavailable(f"{name} does not publish its {', '.join(missing)}.")
    return document


@dataclass(frozen=True)
class Identity:
    username: str
    email: str  # "" unless the provider verified it
    groups: frozenset[str]


def identity_from(claims: dict[str, Any], config: dict[str, Any]) -> Identity:
    """Who the claims say this is, or SignInRefused saying why they are not let in."""
    name = config["provider_name"]
    claim = config["username_claim"]
    username = claims.get(claim)
    if not isinstance(username, str) or not username:
        raise SignInRefused(
            f'Your {name} account has no "{claim}", which names your account here. '
            "Ask your administrator."
        )
    verified = claims.get("email_verified") is True
    if claim == "email" and not verified:
        raise SignInRefused(f"Your {name} account's email address is not verified.")
    try:
        UnicodeUsernameValidator()(username)
        if len(username) > User._meta.get_field("username").max_length:  # type: ignore[operator]
            raise ValidationError("too long")
    except ValidationError:
        raise SignInRefused(
            f'Your {name} "{claim}" ({username!r}) cannot be a username here: at most '
            "150 letters, digits and @ . + - _"
        ) from None
    groups = claims.get(config["groups_claim"], [])
    if isinstance(groups, str):
        groups = [groups]
    if not isinstance(groups, list) or not all(isinstance(group, str) for group in groups):
        raise SignInRefused(f'Your {name} account\'s "{config["groups_claim"]}" is not a list.')
    allowed = set(comma_list(config["allowed_groups"]))
    if allowed and not allowed.intersection(groups):
        raise SignInRefused(
            f"Your {name} account is not in a group allowed to use Neotask. Ask your administrator."
        )
    email = claims.get("email")
    return Identity(
        username=username,
        email=email if isinstance(email, str) and verified else "",
        groups=frozenset(groups),
    )


def sign_in(identity: Identity, config: dict[str, Any]) -> User:
    """The account of `identity`, made or updated; SignInRefused if it may not be used."""
    with transaction.atomic():
        # get_or_create: two first sign-ins at once (two tabs) make one account.
        user, created = User.objects.get_or_create(
            username=identity.username,
            defaults={"email": identity.email, "password": make_password(None)},
        )
        if not created and user.has_usable_password() and not config["link_existing_users"]:
            raise SignInRefused(
                f'An account "{identity.username}" with a password already exists here. '
                f"Log in with its password, or ask your administrator to link it to "
                f"{config['provider_name']}."
            )
        if not user.is_active:
            raise SignInRefused(f'The account "{identity.username}" is disabled here.')
        if identity.email and user.email != identity.email:
            user.email = identity.email
            user.save(update_fields=["email"])
        sync_groups(user, identity.groups, group_map(config["group_map"]))
    return user


def sync_groups(user: User, provider_groups: frozenset[str], mapping: dict[str, str]) -> None:
    """Membership of the mapped Django groups as the provider says; the groups
    are created when first needed (their permissions are granted in the admin)."""
    wanted = {mapping[group] for group in provider_groups if group in mapping}
    for name in wanted:
        user.groups.add(Group.objects.get_or_create(name=name)[0])
    user.groups.remove(*user.groups.filter(name__in=set(mapping.values()) - wanted))
