"""Single sign-on with an OpenID Connect provider: whom a provider's claims make
someone here ([oidc] in config.toml; neotask_site.oidc wires it into
mozilla-django-oidc).

A provider account is its ID token's issuer and subject (`sub`), which the
provider never gives to anyone else; a username can change hands. So an
account here is found by its `SignOnLink` (issuer, subject) at every sign-in.
The username (the `username_claim`'s value, NFKC-normalised so that a
fullwidth lookalike is the plain name) only chooses the account at the first one:
an account of that name, compared case-folded, that no subject of this
provider is linked to yet, or a new account (without a password). A provider
account with the name of an account already linked to another subject is
refused, never signed in to it. An account that has a password (made here,
not by a sign-in) is linked only with `link_existing_users`. Accounts are
never matched by email: a provider that does not verify addresses would hand
any account to whoever typed its address, so `username_claim = "email"` is
accepted only with `email_verified` true.

The groups named in `group_map` follow the provider's groups claim at every
sign-in; other groups are the administrator's and stay as they are.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any

import requests
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Group, User
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from core.config import comma_list, group_map
from core.models import SignOnLink

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
    issuer: str  # with `subject`, the provider account: what the account is linked to
    subject: str
    username: str  # NFKC-normalised; chooses the account at the first sign-in only
    email: str  # "" unless the provider verified it
    groups: frozenset[str]


def same_name(username: str) -> str:
    """What two usernames share when they name the same account: NFKC, case-folded
    (and NFKC again: case folding can undo it)."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", username).casefold())


def identity_from(claims: dict[str, Any], config: dict[str, Any]) -> Identity:
    """Who the claims say this is, or SignInRefused saying why they are not let in."""
    name = config["provider_name"]
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject or len(subject) > 255:
        raise SignInRefused(f"{name} did not say which of its accounts this is.")
    claim = config["username_claim"]
    username = claims.get(claim)
    if not isinstance(username, str) or not username:
        raise SignInRefused(
            f'Your {name} account has no "{claim}", which names your account here. '
            "Ask your administrator."
        )
    # A lookalike in compatibility characters (fullwidth, ligatures) is the same name.
    username = unicodedata.normalize("NFKC", username)
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
        issuer=config["issuer"].rstrip("/"),
        subject=subject,
        username=username,
        email=email if isinstance(email, str) and verified else "",
        groups=frozenset(groups),
    )


def sign_in(identity: Identity, config: dict[str, Any]) -> User:
    """The account of `identity`, found by its link, or linked at its first sign-in;
    updated from the claims. SignInRefused if it may not be used."""
    with transaction.atomic():
        user = linked_account(identity)
        if user is None:
            try:
                with transaction.atomic():
                    user = link(identity, config)
            except IntegrityError:
                # Two first sign-ins at once (two tabs): the other one linked it.
                user = linked_account(identity)
                if user is None:  # another provider account took the name meanwhile
                    raise SignInRefused(taken(identity, config)) from None
        if not user.is_active:
            raise SignInRefused(f'The account "{user.username}" is disabled here.')
        if identity.email and user.email != identity.email:
            user.email = identity.email
            user.save(update_fields=["email"])
        sync_groups(user, identity.groups, group_map(config["group_map"]))
    return user


def linked_account(identity: Identity) -> User | None:
    found = SignOnLink.objects.select_related("owner").filter(
        issuer=identity.issuer, subject=identity.subject
    )
    return next((row.owner for row in found), None)


def link(identity: Identity, config: dict[str, Any]) -> User:
    """The first sign-in of a provider account: linked to the account of its
    username, if no other account of this provider holds that account, or to a new one."""
    name = same_name(identity.username)
    # iexact narrows the search; the comparison that decides is same_name's. The
    # exact name first: accounts made before names were normalised may differ only so.
    candidates = User.objects.filter(username__iexact=identity.username)
    matching = [user for user in candidates if user.username == identity.username] or [
        user for user in candidates if same_name(user.username) == name
    ]
    if len(matching) > 1:
        raise SignInRefused(
            f'Several accounts here are named like "{identity.username}". '
            "Ask your administrator to link yours."
        )
    if not matching:
        user = User.objects.create(
            username=identity.username, email=identity.email, password=make_password(None)
        )
    else:
        user = matching[0]
        if SignOnLink.objects.filter(owner=user, issuer=identity.issuer).exists():
            raise SignInRefused(taken(identity, config))
        if user.has_usable_password() and not config["link_existing_users"]:
            raise SignInRefused(
                f'An account "{user.username}" with a password already exists here. '
                f"Log in with its password, or ask your administrator to link it to "
                f"{config['provider_name']}."
            )
    SignOnLink.objects.create(owner=user, issuer=identity.issuer, subject=identity.subject)
    return user


def taken(identity: Identity, config: dict[str, Any]) -> str:
    return (
        f'The account "{identity.username}" here belongs to another '
        f"{config['provider_name']} account, so you cannot sign in to it. "
        "If it is yours, ask your administrator."
    )


def sync_groups(user: User, provider_groups: frozenset[str], mapping: dict[str, str]) -> None:
    """Membership of the mapped Django groups as the provider says; the groups
    are created when first needed (their permissions are granted in the admin)."""
    wanted = {mapping[group] for group in provider_groups if group in mapping}
    for name in wanted:
        user.groups.add(Group.objects.get_or_create(name=name)[0])
    user.groups.remove(*user.groups.filter(name__in=set(mapping.values()) - wanted))
