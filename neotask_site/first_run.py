"""Who may create the first (admin) account: a browser on this machine, or
whoever holds the one-time token that `manage.py serve` prints. Otherwise the
first visitor of a fresh instance reachable from the network would become its
superuser."""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from pathlib import Path

from django.conf import settings
from django.http import HttpRequest

from core.client_address import client_address


def token_file() -> Path:
    return Path(settings.DATA_DIR) / "setup_token"


def issue_token() -> str:
    """The token, made once and kept (0600, in the data dir) until setup is done."""
    path = token_file()
    if not path.exists():
        path.write_text(secrets.token_urlsafe(24))
    return path.read_text().strip()


def setup_link(base_url: str, terminal: bool) -> str:
    """What `serve` prints on a fresh instance. The link with its token goes to a
    terminal only: written to a pipe or a file (a service's journal, a container's
    log) the token would be kept in a log, so there the token's file is named."""
    token = issue_token()
    if terminal:
        return f"First run: create the admin account at {base_url}/setup/?token={token}"
    return (
        f"First run: create the admin account at {base_url}/setup/ (from this machine), "
        f"or from another with ?token= and the token in {token_file()}"
    )


def discard_token() -> None:
    token_file().unlink(missing_ok=True)


def holds_token(given: str) -> bool:
    try:
        expected = token_file().read_text().strip()
    except OSError:
        return False
    return bool(given) and hmac.compare_digest(given.encode(), expected.encode())


def from_loopback(request: HttpRequest) -> bool:
    # Behind a proxy (NEOTASK_HTTPS) every request comes from the proxy's
    # loopback address, so the address proves nothing there; behind a trusted
    # one (NEOTASK_TRUSTED_PROXIES) the client it forwards for is asking.
    if settings.HTTPS:
        return False
    try:
        return ipaddress.ip_address(client_address(request)).is_loopback
    except ValueError:
        return False


def may_set_up(request: HttpRequest) -> bool:
    return from_loopback(request) or holds_token(
        request.POST.get("token") or request.GET.get("token") or ""
    )
