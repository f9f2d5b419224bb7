"""Login throttling: after repeated failures an account from one address, an
account from anywhere, or an address is refused for a while, whatever the
password (login page and admin alike). A wrong current password on a
password-change page counts as a failed login of the account: guessing it
there is no cheaper.

Anyone may type anyone's username, so a lock the guesser sets by themselves
is kept to their own address: five failures lock the account from that
address only. The account's own limit (30 from anywhere) still stops guessing
spread over many addresses, and an attempt refused by the throttle is not
counted again, so one address adds at most five to it: locking someone out
from everywhere takes six addresses (IPv6: /64 networks) within the window.

The same gate refuses every password while they are switched off ([oidc]
local_login = false: single sign-on only), on the admin's login page too.

Counted in the cache, which is Redis on the team profile: every web process
sees the same counts. The address is the client's (core.client_address:
X-Forwarded-For only from NEOTASK_TRUSTED_PROXIES).
"""

from __future__ import annotations

import hashlib
import ipaddress
from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from core.client_address import client_address

WINDOW_SECONDS = 15 * 60
PER_ACCOUNT_AND_ADDRESS = 5  # guessing one account's password from one address
PER_ACCOUNT = 30  # guessing it from many addresses
PER_ADDRESS = 20  # trying many accounts from one address
REFUSED = (
    "Too many failed logins for this account or from this address. Wait 15 minutes, then try again."
)
PASSWORDS_OFF = "Passwords are switched off here: sign in with the button above."
REFUSED_CHANGE = (
    "Too many wrong passwords for this account or from this address. "
    "Wait 15 minutes, then try again."
)


def keys(username: str, address: str) -> dict[str, int]:
    """Each count an attempt adds to, with the failures at which it refuses."""
    # Hashed: a username may hold characters a cache key may not.
    user = hashlib.sha256(username.strip().lower().encode()).hexdigest()
    network = network_of(address)
    return {
        f"login-failures:user-address:{user}:{network}": PER_ACCOUNT_AND_ADDRESS,
        f"login-failures:user:{user}": PER_ACCOUNT,
        f"login-failures:address:{network}": PER_ADDRESS,
    }


def network_of(address: str) -> str:
    """An IPv6 client counts by its /64: one host usually holds all of it."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((parsed, 64), strict=False))
    return str(parsed)


def is_throttled(username: str, address: str) -> bool:
    limits = keys(username, address)
    counts = cache.get_many(list(limits))
    return any(counts.get(key, 0) >= limit for key, limit in limits.items())


def record_failure(
    sender: Any, credentials: dict[str, Any], request: Any = None, **kw: Any
) -> None:
    """The `user_login_failed` receiver."""
    count_failure(str(credentials.get("username", "")), client_address(request))


def count_failure(username: str, address: str) -> None:
    if is_throttled(username, address):
        return  # refused before any password was checked: not another guess
    for key in keys(username, address):
        cache.add(key, 0, WINDOW_SECONDS)
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, WINDOW_SECONDS)


class LoginThrottleBackend(ModelBackend):
    """First in AUTHENTICATION_BACKENDS: refuses a throttled attempt before any
    password is checked (PermissionDenied stops the next backends), and checks
    no password itself; a session it is named in (the first backend is
    `force_login`'s default) loads its user as ModelBackend does."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        if password is not None and not settings.NEOTASK["oidc"]["local_login"]:
            raise PermissionDenied(PASSWORDS_OFF)
        if request is not None and is_throttled(username or "", client_address(request)):
            raise PermissionDenied(REFUSED)
        return None
