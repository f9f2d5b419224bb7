"""Odd values where a URL takes an id, a key or a path — NUL, huge and negative
numbers, unicode, `..`, over-long and malformed ones — are a 400 or a 404,
never a 500: in every route of the project and the admin, in the id-like query
parameters, and in the chat socket's key."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import get_resolver

from sessions_app.models import ApiToken
from tests.support.web import client_for, walk
from tests.support.websocket import communicator

ODD = [
    "\x00",
    "a\x00b",
    "9" * 30,  # beyond any database's integers
    str(2**63),
    "-1",
    "0",
    "1e9",
    "é",
    "日本語",
    "\U0001f600",
    "..",
    "../..",
    "../../etc/passwd",
    "%00",
    "%ff",
    " ",
    "x" * 300,
    "00000000-0000-0000-0000-000000000000",
    "00000000-0000-0000-0000-00000000000g",
    "agent:main:web:" + "x" * 300,
    "agent:main:web:\x00",
    "agent:..:web:x",
    "cron:..",
]
PLACEHOLDER = re.compile(r"<(?:\w+:)?\w+>")
# Where a bad value is not the path's only answer: Django's reset page says the
# link is invalid (200); the admin sends an unknown row back to its list (302).
NOT_FOUND = (400, 404, 405)
# Nobody may edit or delete the history: its admin may refuse those views (403)
# before it looks for the row.
ANSWERS = {
    "accounts/reset/": (200, 302, 404),
    "admin/neotask_site/change/": (200, 301, 302, 403, *NOT_FOUND),
    "admin/": (200, 301, 302, *NOT_FOUND),
}


def routes_with_parameters() -> list[str]:
    routes = [route for route, _ in walk(get_resolver().url_patterns)]
    return [route for route in routes if PLACEHOLDER.search(route)]


def expected(route: str) -> tuple[int, ...]:
    return next((codes for prefix, codes in ANSWERS.items() if route.startswith(prefix)), NOT_FOUND)


@pytest.fixture
def alice_admin(alice) -> Client:
    alice.is_staff = alice.is_superuser = True
    alice.save()
    return client_for(alice)


@pytest.mark.parametrize("route", routes_with_parameters())
def test_it_answers_odd_path_values_without_failing(route, alice, alice_admin):
    token = ApiToken.issue(alice, "script")[1]
    bearer = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    if "(?P<" in route:  # a regex route (the admin's app index, its catch-all)
        pytest.skip("regex routes take no typed value")
    for value in ODD:
        path = "/" + PLACEHOLDER.sub(quote(value, safe="%"), route)
        for client in (alice_admin, bearer) if route.startswith("api/") else (alice_admin,):
            for method in ("get", "post"):
                response = getattr(client, method)(path)
                assert response.status_code in expected(route), (method, path, response.status_code)


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/chat/agent:main:web:x/events/", "after"),
        ("/sessions/00000000-0000-0000-0000-000000000000/", "page"),
        ("/chat/sidebar/", "current"),
        ("/api/v1/sessions/", "page"),
        ("/tasks/preview/", "schedule"),
    ],
)
def test_it_answers_odd_query_values_without_failing(path, name, alice_client):
    for value in ODD:
        response = alice_client.get(path, {name: value})
        assert response.status_code in (200, 400, 404), (path, name, value)


@pytest.mark.parametrize(
    "path",
    ["/admin/auth/user/?username=%00", "/admin/memory/fact/?q=x&q=%00", "/memory/?%00=x"],
)
def test_it_refuses_a_nul_in_the_query(path, alice_admin):
    # PostgreSQL refuses NUL in a query: the admin's lookup with one was a 500 there.
    assert alice_admin.get(path).status_code == 400


@pytest.mark.django_db(transaction=True)
async def test_it_closes_a_socket_for_an_odd_key_without_failing():
    alice = await User.objects.acreate(username="alice")
    for value in ODD:
        ws = communicator(alice, quote(value, safe="%"))
        connected, code = await ws.connect()
        if connected:
            code = (await ws.receive_output(timeout=5)).get("code")
        # 4404, or refused by the route itself (a key with a slash, or over 255).
        assert code in (4404, 1000, None), (value, code)
