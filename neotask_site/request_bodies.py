"""Request bodies bounded while they arrive, in daphne.

daphne (Twisted) receives a request's whole body — in memory up to 100 kB, then
in an unlinked temporary file — before the ASGI application sees the request,
so neither Django's DATA_UPLOAD_MAX_MEMORY_SIZE nor an upload page's own limit
could stop a body: anyone's chunked body, which declares no length, grew in the
temp dir for as long as they kept sending it. Here a body that passes its bound
is answered 413 and its connection closed at once (one with a larger declared
Content-Length before any of it is read):

- without credentials (no session cookie, no Authorization header):
  DATA_UPLOAD_MAX_MEMORY_SIZE — no page one can use signed out takes more;
- with them: the largest upload a page takes (an import: its file and its form).

The credentials are only looked for, not checked: that needs the database, which
Twisted's reactor thread must not wait for; Django checks them as before. A
forged cookie gets the larger bound, never more.

And a large body costs the event loop no long turn: Twisted does not parse a
form (Django does, in its thread), and Django reads a body in slices.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from daphne.http_protocol import WebRequest
from django.conf import settings

# The version whose WebRequest (a Twisted http.Request) this module extends; pinned
# exactly in pyproject.toml. tests/test_patched_packages.py fails when another is
# installed: re-read its http_protocol.py, then update both.
PATCHED_FOR = {"daphne": "4.2.3"}


def credentialed_bound() -> int:
    from importers.uploads import MAX_UPLOAD_BYTES
    from importers.views import FORM_OVERHEAD

    return MAX_UPLOAD_BYTES + FORM_OVERHEAD


def body_bound(request: Any) -> int:
    """How many body bytes the request may send, by the credentials it carries."""
    cookies = request.received_cookies  # parsed by Twisted before gotLength
    if request.requestHeaders.hasHeader(b"authorization") or (
        settings.SESSION_COOKIE_NAME.encode() in cookies
    ):
        return credentialed_bound()
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def refuse(request: Any) -> None:
    """413 and the connection closed, before the request reaches the application:
    nothing more of the body is read, and what was kept of it is let go."""
    request.neotask_refused = True
    request.requestHeaders.removeHeader(b"expect")  # no "100 Continue" after the 413
    bound = request.neotask_bound
    body = (
        f"The request body is larger than {bound} bytes, the most this site takes"
        f"{'' if bound > settings.DATA_UPLOAD_MAX_MEMORY_SIZE else ' before signing in'}.\n"
    ).encode()
    transport = request.channel.transport
    transport.write(
        b"HTTP/1.1 413 Content Too Large\r\n"
        b"Content-Type: text/plain; charset=utf-8\r\n"
        b"Connection: close\r\n" + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    )
    transport.loseConnection()  # stops reading; closes once the answer is written
    if request.content is not None:
        request.content.close()


class BoundedBodyRequest(WebRequest):
    """daphne's request, counting its body's bytes as they come; a form's body is
    left to Django."""

    neotask_bound = 0
    neotask_received = 0
    neotask_refused = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Twisted's Request would parse a POSTed form into `args`, which daphne never
        # reads: a multipart body read into memory whole and parsed by the email
        # package in the reactor thread (a 13 MB upload: +155 MB and /healthz stalled
        # ~1 s, py-spy in docs/memory.md). Django parses it, streaming, in its thread.
        super().__init__(*args, parsePOSTFormSubmission=False, **kwargs)

    def gotLength(self, length: int | None) -> None:
        self.neotask_bound = body_bound(self)
        super().gotLength(length)
        if length is not None and length > self.neotask_bound:
            refuse(self)

    def handleContentChunk(self, data: bytes) -> None:
        if self.neotask_refused:
            return
        self.neotask_received += len(data)
        if self.neotask_received > self.neotask_bound:
            refuse(self)
            return
        super().handleContentChunk(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if not self.neotask_refused:  # a refused request never reaches the application
            super().requestReceived(command, path, version)


def bound_daphne_bodies() -> None:
    """daphne's HTTP factory makes its requests from this module's class from now on
    (it looks `WebRequest` up in its module for every connection)."""
    from daphne import http_protocol

    http_protocol.WebRequest = BoundedBodyRequest


# daphne queues a body's messages (8 KB each) all at once, once it has the whole
# body; Django's read_body takes them one by one into its spooled file, and an
# asyncio.Queue with items never suspends: a 20 MB body was one turn of 2,560
# messages (40 to 60 ms, the body copied to disk) while /healthz waited.
MESSAGES_PER_TURN = 16

Application = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def body_in_slices(application: Application) -> Application:
    """`application`, given the event loop back every MESSAGES_PER_TURN messages
    of a request's body."""

    async def sliced(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await application(scope, receive, send)
        messages = 0

        async def receive_in_slices() -> Any:
            nonlocal messages
            messages += 1
            if messages % MESSAGES_PER_TURN == 0:
                await asyncio.sleep(0)  # the loop's turn
            return await receive()

        return await application(scope, receive_in_slices, send)

    return sliced
