"""/mcp against DNS rebinding and other sites' pages (the MCP transport's rule:
servers MUST validate Origin): a request whose Origin is not this site's is
refused with 403 before its token is looked at or a tool runs, one for a Host
outside ALLOWED_HOSTS with 400, as Django refuses it for every page. Programs
send no Origin and are served with a valid token. Over a real socket: Neotask's
ASGI application under uvicorn."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from memory.models import Fact
from neotask_site.asgi import application
from sessions_app.models import ApiToken
from tests.support.mcp_server import served

pytestmark = pytest.mark.django_db(transaction=True)

REMEMBER = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {
        "name": "remember_fact",
        "arguments": {"category": "person", "key": "planted", "value": "by another site"},
    },
}


@pytest.fixture
def site(transactional_db) -> Any:
    with served(application) as base:
        yield base


@pytest.fixture
def post(site, alice):
    token = ApiToken.issue(alice, "mcp client")[1]

    def send(**headers: str) -> httpx.Response:
        """alice's remember_fact call to /mcp with her token and these headers."""
        return httpx.post(
            f"{site}/mcp",
            json=REMEMBER,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json, text/event-stream",
                **headers,
            },
            timeout=30,
        )

    return send


def test_it_serves_a_program_that_sends_no_origin(post, alice):
    response = post()
    assert response.status_code == 200, response.text
    assert Fact.objects.filter(owner=alice, key="planted").exists()


def test_it_serves_the_sites_own_origin(post, site, alice):
    assert post(Origin=site).status_code == 200
    assert Fact.objects.filter(owner=alice, key="planted").exists()


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example.com",
        "http://localhost:1",  # an allowed host, on another port
        "https://127.0.0.1",  # another scheme and port
        "null",  # a sandboxed frame or a file:// page
    ],
)
def test_it_refuses_another_sites_page_before_any_tool_runs(post, alice, origin):
    response = post(Origin=origin)
    assert response.status_code == 403
    assert "other sites" in response.json()["error"]
    assert not Fact.objects.filter(owner=alice).exists()


def test_it_refuses_a_rebound_host_name(post, site, alice):
    """DNS rebinding: evil.example.com resolved to this server, the page's
    requests carry its name as Host (and as Origin)."""
    for headers in ({"Host": "evil.example.com"}, {"Host": "evil.example.com", "Origin": site}):
        response = post(**headers)
        assert response.status_code == 400, headers
        assert "NEOTASK_ALLOWED_HOSTS" in response.json()["error"]
    assert post(Host="evil.example.com", Origin="http://evil.example.com").status_code == 400
    assert not Fact.objects.filter(owner=alice).exists()


def test_it_serves_a_trusted_origin(post, alice, settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://*.example.org"]
    assert post(Origin="https://tools.example.org").status_code == 200
    assert post(Origin="https://example.net").status_code == 403


def test_a_refused_origin_is_refused_without_a_token_too(site):
    response = httpx.post(f"{site}/mcp", json=REMEMBER, headers={"Origin": "http://evil.test"})
    assert response.status_code == 403
