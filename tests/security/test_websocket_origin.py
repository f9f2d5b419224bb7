"""The chat socket's Origin must be this site — scheme, host and port, as the
Host header and NEOTASK_HTTPS say — or one of NEOTASK_CSRF_TRUSTED_ORIGINS, as
Django's CSRF check asks of a form."""

from __future__ import annotations

import pytest
from channels.testing import WebsocketCommunicator

from neotask_site.asgi import application
from sessions_app import chat
from tests.support.web import client_for, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def logged_in(alice) -> tuple[str, str]:
    """Alice's session cookie and one of her chats."""
    return session_cookie(client_for(alice)), chat.start_chat(alice).key


@pytest.fixture
def opens(logged_in):
    async def attempt(origin: str | None, host: str = "127.0.0.1:8000", **extra: str) -> bool:
        """Whether alice's chat socket opens with this Origin, Host and `extra` headers."""
        cookie, key = logged_in
        headers = [(b"host", host.encode()), (b"cookie", cookie.encode())]
        if origin is not None:
            headers.append((b"origin", origin.encode()))
        headers += [
            (name.replace("_", "-").encode(), value.encode()) for name, value in extra.items()
        ]
        ws = WebsocketCommunicator(application, f"/ws/chat/{key}/", headers=headers)
        connected, _ = await ws.connect()
        if connected:
            await ws.disconnect()
        return connected

    return attempt


async def test_it_opens_for_the_sites_own_origin(opens):
    assert await opens("http://127.0.0.1:8000")


@pytest.mark.parametrize(
    "origin",
    [
        "https://127.0.0.1:8000",  # another scheme
        "http://127.0.0.1:8001",  # another port
        "http://127.0.0.1",  # the default port is another port
        "http://localhost:8000",  # an allowed host, but not this one
        "http://evil:8000",
        "http://127.0.0.1:8000.evil",
        "null",  # a sandboxed frame or a file:// page
        None,
    ],
)
async def test_it_refuses_any_other_origin(opens, origin):
    assert not await opens(origin)


async def test_it_refuses_a_host_that_is_not_allowed(opens):
    assert not await opens("http://evil:8000", host="evil:8000")


async def test_it_takes_the_scheme_from_the_proxy_over_https(opens, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.ALLOWED_HOSTS = ["neotask.example.org"]
    assert await opens(
        "https://neotask.example.org", host="neotask.example.org", x_forwarded_proto="https"
    )
    assert not await opens(
        "http://neotask.example.org", host="neotask.example.org", x_forwarded_proto="https"
    )
    assert not await opens("https://neotask.example.org", host="neotask.example.org")


async def test_it_opens_for_a_trusted_origin(opens, settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://chat.example.org", "https://*.example.net"]
    assert await opens("https://chat.example.org")
    assert await opens("https://app.example.net")
    assert not await opens("http://chat.example.org")
    assert not await opens("https://chat.example.org:8443")
