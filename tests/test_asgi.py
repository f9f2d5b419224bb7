from __future__ import annotations

import json

import pytest
from channels.testing import HttpCommunicator, WebsocketCommunicator

from neotask_site.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


async def test_it_routes_http_to_django():
    communicator = HttpCommunicator(
        application, "GET", "/healthz", headers=[(b"host", b"127.0.0.1:8000")]
    )
    response = await communicator.get_response()
    # 503: no job cluster runs beside the tests (tests/test_health.py).
    assert response["status"] == 503
    assert json.loads(response["body"])["db"] == "ok"


async def test_it_refuses_websockets_from_a_foreign_origin():
    communicator = WebsocketCommunicator(
        application, "/ws/chat/agent:main:web:x/", headers=[(b"origin", b"http://evil.example")]
    )
    connected, _ = await communicator.connect()
    assert not connected
    await communicator.disconnect()
