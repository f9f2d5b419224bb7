"""Where a URL a person set may connect: one policy for every such request
(MCP servers, model providers, their Test buttons).

A URL a user or staff member types is a request this server makes from inside
its own network, so it may reach only public addresses: never loopback (this
machine's own services), private, link-local, shared or unique-local networks,
nor a cloud's metadata service. A URL set by an active superuser may reach a
private network (they run the server), and the operator may allow-list
addresses for everyone in config ([network] allow_private). Operator-set
endpoints (config.toml's [llm], the embedded model) are not checked.

The check runs where the socket's address is chosen (agent.transport connects
to the very address checked), for every connection, so a name that resolved to
a public address when the form was saved and to 127.0.0.1 later is refused;
the forms run it too, for a clear message at once.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT
UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
NAT64 = ipaddress.ip_network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # ::127.0.0.1, deprecated but routed by some


class Refused(Exception):
    """The policy refuses a URL's address; the message says why and what to do."""


def unwrapped(address: Address) -> Address:
    """The IPv4 address an IPv6 one carries (mapped, compatible, NAT64, 6to4):
    [::ffff:127.0.0.1] reaches 127.0.0.1."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in NAT64 or (address in IPV4_COMPATIBLE and int(address) > 1):
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def kind_of(address: Address) -> str | None:
    """What makes `address` not a public one ("a loopback address"); None if public."""
    address = unwrapped(address)
    if address in METADATA:
        return "a cloud metadata address"
    if address.is_loopback:
        return "a loopback address (this server itself)"
    if address.is_unspecified:
        return "the unspecified address (this server itself)"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if address in SHARED:
        return "a shared (carrier-grade NAT) address"
    if address in UNIQUE_LOCAL:
        return "a unique local (private IPv6) address"
    if address.is_reserved:
        return "a reserved address"
    if address.is_private:
        return "a private-network address"
    if not address.is_global:
        return "a reserved address"
    return None


def allow_list() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """[network] allow_private: the addresses anyone's URL may reach (config checked them)."""
    text = settings.NEOTASK["network"]["allow_private"]
    return [
        ipaddress.ip_network(item.strip(), strict=False) for item in text.split(",") if item.strip()
    ]


@dataclass(frozen=True)
class Policy:
    """For one URL: `private_ok` when an active superuser set it."""

    private_ok: bool = False

    def check(self, host: str, address: Address) -> None:
        """Refused unless `address` (what `host` resolved to) may be reached."""
        kind = kind_of(address)
        if kind is None:
            return
        if any(unwrapped(address) in net or address in net for net in allow_list()):
            return
        if self.private_ok and kind != "a cloud metadata address":
            return
        shown = host if host == str(address) else f"{host} ({address})"
        raise Refused(
            f"{shown} is {kind}: only a superuser may connect to this server's own or a "
            "private network (or the operator allow-lists it: [network] allow_private)"
        )

    async def resolve(self, host: str, port: int) -> list[str]:
        """`host`'s addresses, each allowed (else Refused, naming the first that is not)."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return self.allowed(host, infos)

    def resolve_now(self, host: str, port: int) -> list[str]:
        """As `resolve`, blocking (forms)."""
        return self.allowed(host, socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))

    def allowed(self, host: str, infos: list[Any]) -> list[str]:
        # Every address must pass: a name answering one public and one private
        # address would otherwise reach the private one on a retry.
        addresses = list(dict.fromkeys(str(info[4][0]).split("%")[0] for info in infos))
        for text in addresses:
            self.check(host, ipaddress.ip_address(text))
        return addresses


def policy_of(user: Any) -> Policy:
    """For a URL `user` set (None: nobody now, e.g. they were deleted)."""
    return Policy(private_ok=bool(user is not None and user.is_superuser and user.is_active))


def check_url(url: str, policy: Policy) -> None:
    """A form's check of `url` before it is saved: Refused if its host resolves to
    an address the policy refuses. A name that does not resolve now passes here
    (the connection says so, and is checked again then)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").strip()
    if not host:
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return  # the URL validator says what is wrong with it
    try:
        policy.resolve_now(host, port)
    except (OSError, UnicodeError):
        return
