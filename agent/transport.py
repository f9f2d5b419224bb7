"""The LLM client's network layer: httpx and httpcore as they are, on asyncio's
own streams instead of anyio's.

A streamed answer is one small read per token; through anyio each read pays
for a cancel scope and a checkpoint, about 40 µs of a process's CPU, which at
fifty chats streaming at once was a tenth of a core (bench/chat_latency.py).
Measured again without it (issue 25, five alternating runs of
`bench/chat_latency.py --chats 50 --interval 0.02`): the p95 a delta waits was
47-160 ms with it and 173-370 ms with stock httpx, so it stays. Everything
above the socket (HTTP/1.1, TLS set-up, pooling, limits, exceptions) stays
httpx's.

It is also where the outbound policy (agent.outbound) is enforced: a backend
given a policy resolves the host itself, checks every address and connects to
the address it checked, for every new connection.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable
from typing import Any, TypeVar

import httpcore
import httpx
from httpcore import AsyncNetworkBackend, AsyncNetworkStream

from agent.outbound import Policy


class AsyncioStream(AsyncNetworkStream):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            async with asyncio.timeout(timeout):
                return await self.reader.read(max_bytes)
        except TimeoutError:
            raise httpcore.ReadTimeout("timed out reading the response") from None
        except OSError as exc:
            raise httpcore.ReadError(str(exc)) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        try:
            async with asyncio.timeout(timeout):
                self.writer.write(buffer)
                await self.writer.drain()
        except TimeoutError:
            raise httpcore.WriteTimeout("timed out sending the request") from None
        except OSError as exc:
            raise httpcore.WriteError(str(exc)) from exc

    async def aclose(self) -> None:
        self.writer.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                await self.writer.start_tls(ssl_context, server_hostname=server_hostname)
        except TimeoutError:
            self.writer.close()
            raise httpcore.ConnectTimeout("timed out setting up TLS") from None
        except (OSError, ssl.SSLError) as exc:
            self.writer.close()
            raise httpcore.ConnectError(str(exc)) from exc
        return self

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            # Asked of an idle kept-alive connection: readable means the server
            # closed it (or sent what nobody asked for), so it is not reused.
            return self.reader.at_eof() or self.writer.is_closing()
        name = {"client_addr": "sockname", "server_addr": "peername"}.get(info, info)
        if name in ("ssl_object", "sockname", "peername", "socket"):
            return self.writer.get_extra_info(name)
        return None


class AsyncioBackend(AsyncNetworkBackend):
    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = policy  # None: an operator's endpoint, not checked

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> AsyncNetworkStream:
        local_addr = (local_address, 0) if local_address else None
        try:
            async with asyncio.timeout(timeout):
                if self.policy is None:
                    reader, writer = await asyncio.open_connection(
                        host, port, local_addr=local_addr
                    )
                else:  # outbound.Refused goes up as it is, for the caller to say
                    reader, writer = await self.connect_checked(host, port, local_addr)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"timed out connecting to {host}:{port}") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        sock = writer.get_extra_info("socket")
        for option in socket_options or ():
            sock.setsockopt(*option)
        return AsyncioStream(reader, writer)

    async def connect_checked(
        self, host: str, port: int, local_addr: tuple[str, int] | None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """To the first of `host`'s addresses that answers, each one checked first:
        the address connected to is the one checked (no second lookup to rebind)."""
        assert self.policy is not None
        addresses = await self.policy.resolve(host, port)
        error: OSError = OSError(f"{host} has no address")
        for address in addresses:
            try:
                return await asyncio.open_connection(address, port, local_addr=local_addr)
            except OSError as exc:
                error = exc
        raise error

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_unix_connection(path)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"timed out connecting to {path}") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        return AsyncioStream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


# The versions whose private `_pool` asyncio_transport replaces; pinned exactly
# in pyproject.toml. tests/test_patched_packages.py fails when another is
# installed: re-read httpx's AsyncHTTPTransport, then update both.
PATCHED_FOR = {"httpx": "0.29.0", "httpcore": "1.0.9"}


T = TypeVar("T", bound=httpx.AsyncHTTPTransport)


def asyncio_transport(
    limits: httpx.Limits,
    policy: Policy | None = None,
    kind: type[T] = httpx.AsyncHTTPTransport,  # type: ignore[assignment]
) -> T:
    """httpx's own transport (or `kind`, a subclass), its connection pool on
    AsyncioBackend, under `policy`. httpx has no argument for the backend, so
    the pool it built is replaced (a test checks that the client uses this
    backend, should httpx change)."""
    transport = kind(limits=limits)
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=httpx.create_ssl_context(),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=AsyncioBackend(policy),
    )
    return transport
