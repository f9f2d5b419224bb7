"""API tokens name the APIs they are good for and may expire (L13): a token for
/mcp is refused by /api/v1 and /v1, one for /api/v1 by /mcp, an expired one by
all three; tokens made before (and any made without a choice) are good for every
API until revoked. On main every token was good for every API, for ever."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.utils import timezone

from neotask_site.asgi import application
from sessions_app.models import Api, ApiToken
from tests.support.mcp_server import served

pytestmark = pytest.mark.django_db(transaction=True)

TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


@pytest.fixture
def site(transactional_db) -> Any:
    with served(application) as base:
        yield base


def answers(site: str, token: str) -> dict[str, int]:
    """The status each API answers a request with `token`."""
    headers = {"Authorization": f"Bearer {token}"}
    mcp = httpx.post(
        f"{site}/mcp",
        json=TOOLS_LIST,
        headers={**headers, "Accept": "application/json, text/event-stream"},
        timeout=30,
    )
    return {
        "/api/v1": httpx.get(f"{site}/api/v1/sessions/", headers=headers, timeout=30).status_code,
        "/v1": httpx.get(f"{site}/v1/models", headers=headers, timeout=30).status_code,
        "/mcp": mcp.status_code,
    }


def test_a_token_for_one_api_is_refused_by_the_others(site, alice):
    mcp_only = ApiToken.issue(alice, "ide", apis=[Api.MCP])[1]
    assert answers(site, mcp_only) == {"/api/v1": 401, "/v1": 401, "/mcp": 200}
    json_only = ApiToken.issue(alice, "script", apis=[Api.JSON])[1]
    assert answers(site, json_only) == {"/api/v1": 200, "/v1": 401, "/mcp": 401}
    refused = httpx.get(
        f"{site}/api/v1/sessions/", headers={"Authorization": f"Bearer {mcp_only}"}, timeout=30
    )
    assert "not for /api/v1" in refused.json()["error"]


def test_an_expired_token_is_refused_everywhere(site, alice):
    token, text = ApiToken.issue(alice, "week", lifetime=timedelta(days=7))
    assert answers(site, text) == {"/api/v1": 200, "/v1": 200, "/mcp": 200}
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert answers(site, text) == {"/api/v1": 401, "/v1": 401, "/mcp": 401}


def test_a_token_without_a_choice_is_good_for_every_api_until_revoked(site, alice):
    token, text = ApiToken.issue(alice, "old script")
    assert token.apis == ["api", "v1", "mcp"] and token.expires_at is None
    assert answers(site, text) == {"/api/v1": 200, "/v1": 200, "/mcp": 200}


def test_the_token_page_makes_a_scoped_expiring_token(site, alice, alice_client):
    page = alice_client.post(
        "/settings/tokens/", {"name": "ide", "scope": "mcp", "lifetime": "30"}
    ).content.decode()
    token = ApiToken.objects.get(owner=alice)
    assert token.apis == ["mcp"]
    assert timedelta(days=29) < token.expires_at - timezone.now() <= timedelta(days=30)
    shown = page.split('id="new-token">')[1].split("<")[0]
    assert answers(site, shown) == {"/api/v1": 401, "/v1": 401, "/mcp": 200}
    listed = alice_client.get("/settings/tokens/").content.decode()
    assert "/mcp" in listed and token.expires_at.strftime("%Y-%m-%d") in listed
    bad = alice_client.post("/settings/tokens/", {"name": "x", "scope": "admin", "lifetime": "0"})
    assert "Select a valid choice" in bad.content.decode()
    assert ApiToken.objects.filter(owner=alice).count() == 1


def test_an_expired_token_shows_as_expired(alice, alice_client):
    token, _ = ApiToken.issue(alice, "gone", lifetime=timedelta(days=7))
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(days=1))
    assert "Expired" in alice_client.get("/settings/tokens/").content.decode()
