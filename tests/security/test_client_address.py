"""The address the login and password-change throttles count by: X-Forwarded-For
is read only from NEOTASK_TRUSTED_PROXIES, right to left, and the first address
that is no trusted proxy is the client's."""

from __future__ import annotations

import http.client
import ipaddress
import re
import shlex
import subprocess
import sys
from http.cookies import SimpleCookie
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.test import Client

from core import throttle
from core.client_address import refuse_rewriting_server, resolve, trusted_proxies
from core.config import ConfigError
from tests.programs import accounts
from tests.support.processes import (
    ROOT,
    app_env,
    free_port,
    run_program,
    stop_process,
    wait_for_health,
)
from tests.support.web import client_for

REFUSED = "Too many failed logins"
PROXY = [ipaddress.ip_network("127.0.0.1"), ipaddress.ip_network("10.0.0.0/8")]


@pytest.mark.parametrize(
    ("peer", "forwarded", "client"),
    [
        # An untrusted peer is the client, whatever it forwards.
        ("198.51.100.9", "203.0.113.1", "198.51.100.9"),
        ("198.51.100.9", "", "198.51.100.9"),
        # A trusted proxy: the right-most entry that is none of ours.
        ("127.0.0.1", "203.0.113.1, 198.51.100.7", "198.51.100.7"),
        ("127.0.0.1", "203.0.113.1, 198.51.100.7, 10.1.2.3", "198.51.100.7"),
        ("127.0.0.1", "198.51.100.7", "198.51.100.7"),
        ("127.0.0.1", "", "127.0.0.1"),  # nothing forwarded: the proxy itself
        # Everything trusted: the farthest hop we can see.
        ("127.0.0.1", "10.0.0.5, 10.0.0.6", "10.0.0.5"),
        # Garbage is not a proxy's writing: the hop after it is the client.
        ("127.0.0.1", "198.51.100.7, nonsense", "127.0.0.1"),
        ("127.0.0.1", "nonsense, 10.0.0.5", "10.0.0.5"),
        ("127.0.0.1", "203.0.113.1:4711, [2001:db8::1]:443", "2001:db8::1"),
        ("::ffff:127.0.0.1", "198.51.100.7", "198.51.100.7"),  # an IPv4 peer on a v6 socket
    ],
)
def test_it_resolves_the_client_behind_trusted_proxies(peer, forwarded, client):
    assert resolve(peer, forwarded, PROXY) == client


def test_it_trusts_no_proxy_by_default():
    assert trusted_proxies({}) == ()
    assert resolve("127.0.0.1", "203.0.113.1", trusted_proxies({})) == "127.0.0.1"


def test_it_reads_addresses_and_networks():
    assert trusted_proxies({"NEOTASK_TRUSTED_PROXIES": " 127.0.0.1, 10.0.0.0/8,::1 ,"}) == (
        ipaddress.ip_network("127.0.0.1"),
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("::1"),
    )


@pytest.mark.parametrize("value", ["localhost", "10.0.0.0/33", "127.0.0.1;10.0.0.1", "*"])
def test_it_refuses_bad_trusted_proxies_naming_the_variable(value):
    with pytest.raises(ConfigError, match=r"^NEOTASK_TRUSTED_PROXIES: .* is not an IP address"):
        trusted_proxies({"NEOTASK_TRUSTED_PROXIES": value})


def test_it_refuses_daphne_with_proxy_headers():
    with pytest.raises(ConfigError, match="without --proxy-headers"):
        refuse_rewriting_server(["daphne", "-b", "127.0.0.1", "--proxy-headers", "x:app"])
    refuse_rewriting_server(["daphne", "-b", "127.0.0.1", "x:app"])


# Logins ---------------------------------------------------------------------------


def attempt(client: Client, username: str, password: str) -> str:
    return client.post(
        "/accounts/login/", {"username": username, "password": password}
    ).content.decode()


def test_it_ignores_what_an_untrusted_peer_forwards(bob, settings):
    settings.TRUSTED_PROXIES = PROXY
    for number in range(throttle.PER_ADDRESS):
        forged = Client(REMOTE_ADDR="198.51.100.9", HTTP_X_FORWARDED_FOR=f"203.0.113.{number}")
        attempt(forged, f"user{number}", "password1")
    again = Client(REMOTE_ADDR="198.51.100.9", HTTP_X_FORWARDED_FOR="203.0.113.200")
    assert REFUSED in attempt(again, "someone", "password1")


def test_it_counts_the_client_behind_a_trusted_proxy(bob, settings):
    """25 accounts, one wrong password each, each naming another address before
    the one the proxy appended: counted as the proxy's client, and only it."""
    settings.TRUSTED_PROXIES = PROXY
    refused = 0
    for number in range(25):
        sprayer = Client(
            REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=f"203.0.113.{number}, 198.51.100.7"
        )
        refused += REFUSED in attempt(sprayer, f"user{number}", "password1")
    assert refused == 25 - throttle.PER_ADDRESS
    # Bob, behind the same proxy, is not locked out by someone else's spraying.
    own = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.8")
    own.post("/accounts/login/", {"username": "bob", "password": "bob-password"})
    assert own.session["_auth_user_id"] == str(bob.pk)


def test_it_answers_setup_only_to_this_machine_behind_a_trusted_proxy(db, settings):
    settings.TRUSTED_PROXIES = PROXY
    forwarded = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.5")
    assert forwarded.get("/setup/").status_code == 403
    assert Client(REMOTE_ADDR="127.0.0.1").get("/setup/").status_code == 200


# Password changes -------------------------------------------------------------------


def change_password(client: Client, old: str, path: str = "/accounts/password_change/") -> str:
    new = "a-new-pass-phrase-42"
    return client.post(
        path, {"old_password": old, "new_password1": new, "new_password2": new}
    ).content.decode()


@pytest.mark.parametrize("path", ["/accounts/password_change/", "/admin/password_change/"])
def test_it_throttles_guessing_the_current_password(alice, path):
    alice.is_staff = True  # the admin's page too
    alice.save()
    client = client_for(alice, REMOTE_ADDR="198.51.100.7")
    for _ in range(throttle.PER_ACCOUNT_AND_ADDRESS):
        assert "Your old password was entered incorrectly" in change_password(client, "guess", path)
    # Now even the right password is refused from that address, and says why.
    assert "Too many wrong passwords" in change_password(client, "alice-password", path)
    alice.refresh_from_db()
    assert alice.check_password("alice-password")
    # A guess here is a guess at the login too: the account is throttled there.
    assert REFUSED in attempt(Client(REMOTE_ADDR="198.51.100.7"), "alice", "alice-password")


def test_it_throttles_one_address_guessing_many_current_passwords(db):
    users = [User.objects.create_user(f"user{n}", password=f"pass-{n}") for n in range(21)]
    for user in users[: throttle.PER_ADDRESS]:
        client = client_for(user, REMOTE_ADDR="198.51.100.9")
        change_password(client, "password1")
    last = client_for(users[-1], REMOTE_ADDR="198.51.100.9")
    assert "Too many wrong passwords" in change_password(last, "pass-20")
    users[-1].refresh_from_db()
    assert users[-1].check_password("pass-20")


def test_it_still_changes_a_password(alice, alice_client):
    response = alice_client.post(
        "/accounts/password_change/",
        {
            "old_password": "alice-password",
            "new_password1": "a-new-pass-phrase-42",
            "new_password2": "a-new-pass-phrase-42",
        },
    )
    assert response["Location"] == "/accounts/password_change/done/"
    alice.refresh_from_db()
    assert alice.check_password("a-new-pass-phrase-42")


# Through daphne, as docs/deploy.md runs it --------------------------------------------


def documented_daphne(port: int) -> list[str]:
    """The web worker's command line from docs/deploy.md's systemd unit, on `port`."""
    docs = re.sub(r"\\\n\s*", " ", (ROOT / "docs" / "deploy.md").read_text())  # joined lines
    command = r"^ExecStart=\S*/python -m (neotask_site\.web_server .*)$"
    [line] = re.findall(command, docs, re.MULTILINE)
    return [sys.executable, "-m", *shlex.split(line.replace("%i", str(port)))]


def documented_trusted_proxies() -> str:
    docs = (ROOT / "docs" / "deploy.md").read_text()
    [value] = re.findall(r"^NEOTASK_TRUSTED_PROXIES=(\S+)", docs, re.MULTILINE)
    return value


def log_in(port: int, username: str, source: str, forwarded: str) -> str:
    """A login form posted from `source` with X-Forwarded-For `forwarded`: the page."""
    connection = http.client.HTTPConnection(
        "127.0.0.1", port, timeout=30, source_address=(source, 0)
    )
    headers = {"Host": f"127.0.0.1:{port}", "X-Forwarded-For": forwarded}
    connection.request("GET", "/accounts/login/", headers=headers)
    page = connection.getresponse()
    token = SimpleCookie(page.getheader("Set-Cookie"))["csrftoken"].value
    page.read()
    body = urlencode({"username": username, "password": "password1", "csrfmiddlewaretoken": token})
    headers |= {
        "Cookie": f"csrftoken={token}",
        "Content-Type": "application/x-www-form-urlencoded",
        "Origin": f"http://127.0.0.1:{port}",
    }
    connection.request("POST", "/accounts/login/", body=body, headers=headers)
    answer = connection.getresponse().read().decode()
    connection.close()
    return answer


@pytest.mark.slow
def test_it_throttles_forged_addresses_through_the_documented_daphne(tmp_path):
    env = app_env(tmp_path, NEOTASK_TRUSTED_PROXIES=documented_trusted_proxies())
    # A user: with none, every page leads to the first-run page.
    run_program(env, accounts.add_user, "bob", True)
    port = free_port()
    server = subprocess.Popen(
        documented_daphne(port),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_health(port, server)
        # As nginx forwards it: whatever the client sent, then the address it came from.
        behind_proxy = [
            log_in(port, f"user{n}", "127.0.0.1", f"203.0.113.{n}, 198.51.100.7") for n in range(25)
        ]
        assert [REFUSED in page for page in behind_proxy] == [False] * 20 + [True] * 5
        # Straight to daphne from an address that is no proxy: the header counts for nothing.
        direct = [log_in(port, f"other{n}", "127.0.0.2", f"203.0.113.{n}") for n in range(25)]
        assert [REFUSED in page for page in direct] == [False] * 20 + [True] * 5
    finally:
        stop_process(server)
