"""Who is asking: the address the login and password-change throttles count by.

The socket peer (REMOTE_ADDR, daphne's `scope["client"]`) is the client unless
it is one of NEOTASK_TRUSTED_PROXIES; only then is X-Forwarded-For read, from
the right, and the first address that is not a trusted proxy is the client.
Entries left of it are whatever the client sent and are never believed.

Hand-written rather than django-ipware (or django-axes, which uses it): ipware
matches its `proxy_trusted_ips` against the last entries of the header, not
against the peer, so a client that reaches daphne directly can still name any
address; and axes has one failure limit for all its lockout parameters, where
the throttle has 5 per account and 20 per address. Daphne must run without
`--proxy-headers`, which replaces the peer with the header's first (the
client's own) entry before the application sees it; settings refuse to start
under it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence

from django.conf import settings
from django.http import HttpRequest

from core.config import ConfigError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
VARIABLE = "NEOTASK_TRUSTED_PROXIES"


def trusted_proxies(environ: Mapping[str, str]) -> tuple[Network, ...]:
    """NEOTASK_TRUSTED_PROXIES: addresses or CIDR networks, comma-separated;
    none by default (every peer is a client)."""
    networks = []
    for item in environ.get(VARIABLE, "").split(","):
        if not item.strip():
            continue
        try:
            networks.append(ipaddress.ip_network(item.strip(), strict=False))
        except ValueError:
            raise ConfigError(
                f"{VARIABLE}: {item.strip()!r} is not an IP address or network "
                "(write e.g. 127.0.0.1,10.0.0.0/8)"
            ) from None
    return tuple(networks)


def refuse_rewriting_server(argv: Sequence[str]) -> None:
    """Daphne with --proxy-headers believes the client's X-Forwarded-For."""
    if "--proxy-headers" in argv:
        raise ConfigError(
            f"run daphne without --proxy-headers: it takes the client address from "
            f"X-Forwarded-For whoever sent it; Neotask reads it from the proxies in {VARIABLE}"
        )


def parse(text: str) -> Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [v6]:port
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # v4:port
        text = text.split(":")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def resolve(peer: str, forwarded_for: str, trusted: Sequence[Network]) -> str:
    """The client behind `peer`, who forwarded `forwarded_for` (comma-separated,
    oldest first, as each proxy appends the address it was reached from)."""

    def is_trusted(address: Address | None) -> bool:
        return address is not None and any(address in network for network in trusted)

    client = parse(peer)
    if not is_trusted(client):
        return str(client) if client is not None else peer
    for entry in reversed(forwarded_for.split(",") if forwarded_for else []):
        address = parse(entry)
        if address is None:
            break  # not written by a proxy of ours: the hop before it is the client
        client = address
        if not is_trusted(address):
            break
    return str(client)


def client_address(request: HttpRequest | None) -> str:
    if request is None:
        return ""
    return resolve(
        request.META.get("REMOTE_ADDR") or "",
        request.META.get("HTTP_X_FORWARDED_FOR") or "",
        settings.TRUSTED_PROXIES,
    )
