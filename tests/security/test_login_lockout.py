"""Anyone may type anyone's username (issue 40, L7): failed logins from one
address lock the account from that address only, so a stranger cannot lock a
person out; the account's own limit still stops guessing spread over many
addresses (core.throttle)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from core import throttle

REFUSED = "Too many failed logins"


def attempt(client: Client, username: str, password: str, path: str = "/accounts/login/") -> str:
    return client.post(path, {"username": username, "password": password}).content.decode()


def logs_in(address: str, user: User, password: str) -> bool:
    client = Client(REMOTE_ADDR=address)
    client.post("/accounts/login/", {"username": user.username, "password": password})
    return client.session.get("_auth_user_id") == str(user.pk)


@pytest.mark.parametrize(
    "addresses",
    [
        ["203.0.113.66"],
        # An IPv6 client rotating through its /64 is one address.
        [f"2001:db8:1:2::{number:x}" for number in range(1, 41)],
    ],
    ids=["ipv4", "ipv6-one-64"],
)
def test_a_stranger_cannot_lock_someone_out_from_one_address(alice, addresses):
    for number in range(40):  # past every limit
        stranger = Client(REMOTE_ADDR=addresses[number % len(addresses)])
        path = "/admin/login/" if number % 2 else "/accounts/login/"
        attempt(stranger, "alice", f"guess-{number}", path)
    # The stranger is refused, even with the right password...
    assert REFUSED in attempt(Client(REMOTE_ADDR=addresses[0]), "alice", "alice-password")
    assert not logs_in(addresses[0], alice, "alice-password")
    # ...and alice, from her own address, is not.
    assert logs_in("198.51.100.8", alice, "alice-password")


def test_guessing_spread_over_many_addresses_still_locks_the_account(alice):
    addresses = throttle.PER_ACCOUNT // throttle.PER_ACCOUNT_AND_ADDRESS
    for number in range(addresses):
        guesser = Client(REMOTE_ADDR=f"203.0.113.{number}")
        for guess in range(throttle.PER_ACCOUNT_AND_ADDRESS + 3):  # the extra ones are refused
            attempt(guesser, "alice", f"guess-{guess}")
    assert REFUSED in attempt(Client(REMOTE_ADDR="198.51.100.8"), "alice", "alice-password")
    assert not logs_in("198.51.100.8", alice, "alice-password")
