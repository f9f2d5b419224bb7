"""One outbound policy for every URL a person sets (issue 40, H2, M2, L1, L4, L8,
L10): MCP servers and model providers reach public addresses only, checked when
the form is saved and again at every connection (a row written past the form, a
name resolved anew); an active superuser's URL, or an address the operator
allow-lists, may reach a private network; the Test button says a status, never a
body; a stored key never goes to a changed URL; the changes go to the History.

Only loopback is ever connected to: other addresses are tested at the policy's
level, without a connection."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from agent import outbound, providers
from agent.llm import LLMClient, LLMError, configured_endpoint
from agent.mcp import client as mcp_tools
from agent.models import McpServer, ModelProvider
from agent.outbound import Policy, Refused
from agent.tools.registry import ToolError
from core.models import Change
from core.sealing import seal
from sessions_app.models import ApiToken
from tests.support.mcp_server import served, weather_app
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.web import HTMX, client_for, text

pytestmark = pytest.mark.django_db(transaction=True)

NOT_PUBLIC = [
    ("127.0.0.1", "loopback"),
    ("127.8.9.10", "loopback"),
    ("::1", "loopback"),
    ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
    ("::127.0.0.1", "loopback"),  # IPv4-compatible
    ("64:ff9b::7f00:1", "loopback"),  # NAT64
    ("2002:7f00:1::", "loopback"),  # 6to4
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.168.1.1", "private"),
    ("::ffff:192.168.1.1", "private"),
    ("169.254.169.254", "metadata"),
    ("::ffff:169.254.169.254", "metadata"),
    ("fd00:ec2::254", "metadata"),
    ("169.254.10.1", "link-local"),
    ("fe80::1", "link-local"),
    ("fd12:3456::1", "unique local"),
    ("100.64.0.1", "shared"),
    ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"),
    ("240.0.0.1", "reserved"),
    ("198.18.0.1", "private"),  # benchmarking range
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2001:4860:4860::8888", "2606:4700::1111"]


@pytest.mark.parametrize(("address", "kind"), NOT_PUBLIC)
def test_every_non_public_address_is_classified_and_refused(address, kind):
    ip = ipaddress.ip_address(address)
    assert kind in (outbound.kind_of(ip) or "")
    with pytest.raises(Refused, match="only a superuser"):
        Policy().check("example.org", ip)


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address):
    assert outbound.kind_of(ipaddress.ip_address(address)) is None
    Policy().check("example.org", ipaddress.ip_address(address))


def test_a_superusers_url_reaches_private_networks_but_not_the_metadata_service(configure):
    Policy(private_ok=True).check("nas", ipaddress.ip_address("192.168.1.10"))
    Policy(private_ok=True).check("localhost", ipaddress.ip_address("127.0.0.1"))
    with pytest.raises(Refused, match="metadata"):
        Policy(private_ok=True).check("m", ipaddress.ip_address("169.254.169.254"))
    # What the operator allow-lists anyone's URL reaches; nothing else.
    configure("network", allow_private="10.0.5.0/24, 169.254.169.254")
    Policy().check("internal", ipaddress.ip_address("10.0.5.20"))
    Policy().check("m", ipaddress.ip_address("169.254.169.254"))
    with pytest.raises(Refused):
        Policy().check("internal", ipaddress.ip_address("10.0.6.20"))


def test_a_name_is_refused_if_any_of_its_addresses_is():
    infos = [(2, 1, 6, "", ("93.184.216.34", 80)), (2, 1, 6, "", ("127.0.0.1", 80))]
    with pytest.raises(Refused, match=r"two\.example \(127\.0\.0\.1\) is a loopback"):
        Policy().allowed("two.example", infos)


# MCP servers ---------------------------------------------------------------------


def counted(app: Any, seen: list[str]) -> Any:
    """`app`, noting each HTTP request's path in `seen`."""

    async def wrapper(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append(scope["path"])
        await app(scope, receive, send)

    return wrapper


@pytest.fixture
def loopback_mcp():
    """An MCP server on loopback (as an operator's internal one), its port and the
    requests it received."""
    seen: list[str] = []
    with served(counted(weather_app([]), seen), lifespan="on") as base:
        yield int(base.rsplit(":", 1)[1]), seen


def loopback_urls(port: int) -> list[str]:
    return [
        f"http://127.0.0.1:{port}/mcp",
        f"http://localhost:{port}/mcp",
        f"http://[::1]:{port}/mcp",
        f"http://[::ffff:127.0.0.1]:{port}/mcp",
        f"http://0.0.0.0:{port}/mcp",
    ]


def test_a_user_cannot_add_a_server_on_this_machine(alice, loopback_mcp):
    port, seen = loopback_mcp
    client = client_for(alice)
    for url in loopback_urls(port):
        response = client.post("/settings/mcp/", {"name": "internal", "url": url})
        assert response.status_code == 400, url
        error = " ".join(response.context["form"].errors["url"])
        assert "Refused" in error and "only a superuser" in error, (url, error)
    assert not McpServer.objects.exists()
    assert seen == []  # not one request: the form is no port scanner


def test_a_server_written_past_the_form_is_refused_at_every_connection(alice, loopback_mcp):
    """A row the form never saw (an old row, the admin, a name that resolved to a
    public address when saved and to loopback now): refused when connecting."""
    port, seen = loopback_mcp
    for number, url in enumerate([*loopback_urls(port), f"http://127.1:{port}/mcp"]):
        server = McpServer.objects.create(
            owner=alice,
            name=f"internal{number}",
            url=url,
            tools=[{"name": "forecast", "description": "", "input_schema": {"type": "object"}}],
        )
        message = mcp_tools.test_server(server)
        assert "its address is refused" in message and "only a superuser" in message, message
        assert "(this server itself)" in message
        with pytest.raises(ToolError, match="refused"):
            async_to_sync(mcp_tools.call_remote)(
                mcp_tools.remote_of(server), "forecast", {"city": "Paris"}
            )
    assert seen == []


def test_a_superuser_or_the_operators_allow_list_may_reach_it(
    owner, alice, loopback_mcp, configure
):
    port, seen = loopback_mcp
    url = f"http://localhost:{port}/mcp"
    response = client_for(owner).post("/settings/mcp/", {"name": "internal", "url": url})
    assert response.status_code == 200
    assert McpServer.objects.filter(owner=owner).exists() and seen
    configure("network", allow_private="127.0.0.0/8, ::1")
    response = client_for(alice).post("/settings/mcp/", {"name": "internal", "url": url})
    assert response.status_code == 200
    assert "It answered with 2 tools." in mcp_tools.test_server(McpServer.objects.get(owner=alice))


def test_a_deactivated_superusers_shared_server_is_no_longer_offered(owner, bob, loopback_mcp):
    port, _ = loopback_mcp
    url = f"http://127.0.0.1:{port}/mcp"
    client_for(owner).post("/settings/mcp/", {"name": "internal", "url": url, "for_everyone": "on"})
    assert [s.name for s in mcp_tools.servers_for(bob)] == ["internal"]
    owner.is_active = False
    owner.save()
    assert mcp_tools.servers_for(bob) == []
    # Their own server, too, reaches loopback no more.
    server = McpServer.objects.get(owner=owner)
    assert "refused" in mcp_tools.test_server(server)


def test_plain_users_see_a_shared_servers_name_not_its_url(
    owner, bob, loopback_mcp, llm, configure
):
    port, _ = loopback_mcp
    url = f"http://127.0.0.1:{port}/mcp"
    client_for(owner).post("/settings/mcp/", {"name": "internal", "url": url, "for_everyone": "on"})
    page = text(client_for(bob).get("/settings/mcp/"))
    assert "internal" in page and url not in page
    assert url in text(client_for(owner).get("/settings/mcp/"))
    # The model picker names config.toml's model, not where it is; nor do errors.
    chat = text(client_for(bob).get("/"))
    assert llm.url not in chat
    configure("llm", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(LLMError) as error:
        async_to_sync(LLMClient(configured_endpoint()).stream)([{"role": "user", "content": "hi"}])
    assert "Cannot reach the LLM at the configured endpoint" in str(error.value)
    assert "127.0.0.1:9" not in str(error.value)


# Model providers -----------------------------------------------------------------

SECRET = "sk-provider-secret-0123456789"


@pytest.fixture
def endpoint():
    with ScriptedLLM(api_key=SECRET, models=("m",)) as server:
        yield server


@pytest.fixture
def staff(alice):
    """Staff, not a superuser: manages the providers."""
    alice.is_staff = True
    alice.save()
    return alice


def provider_form(server: ScriptedLLM, **fields: Any) -> dict[str, Any]:
    return {
        "name": "Internal",
        "base_url": server.url,
        "api_key": SECRET,
        "offered_models": "m",
        "context_window": 4096,
        "enabled": "on",
        **fields,
    }


def test_staff_cannot_point_a_provider_at_this_machine(staff, endpoint):
    client = client_for(staff)
    port = endpoint.url.rsplit(":", 1)[1].split("/")[0]
    for base in (endpoint.url, f"http://localhost:{port}/v1", f"http://[::1]:{port}/v1"):
        response = client.post("/settings/models/add/", provider_form(endpoint, base_url=base))
        assert response.status_code == 400 and "Refused" in text(response), base
        tried = text(client.post("/settings/models/test/", provider_form(endpoint, base_url=base)))
        assert "✗ Failed" in tried and "Refused" in tried
    assert not ModelProvider.objects.exists()
    assert endpoint.requests == [] and endpoint.authorizations == []


def test_a_provider_saved_past_the_form_is_refused_when_it_connects(staff, endpoint):
    """As a row a staff member set before this policy, or repointed by a name that
    now resolves to loopback: the chat's request is refused, no key is sent."""
    provider = ModelProvider.objects.create(
        name="Internal",
        base_url=endpoint.url.replace("127.0.0.1", "localhost"),
        sealed_api_key=seal(SECRET),
        offered_models="m",
        url_set_by=staff,
    )
    trial = providers.try_endpoint(providers.endpoint_for(f"{provider.pk}:m"))
    assert not trial.passed and "refused" in trial.message and "loopback" in trial.message
    assert endpoint.authorizations == []


def test_the_test_button_says_a_status_never_a_body(owner, endpoint):
    client = client_for(owner)  # a superuser: this loopback endpoint is theirs to reach
    endpoint.script(Reply(status=404, error="root:x:0:0:root:/root:/bin/bash"))
    tried = text(client.post("/settings/models/test/", provider_form(endpoint), **HTMX))
    assert "HTTP 404" in tried and "root:x" not in tried
    endpoint.script(Reply(status=500, error="internal-detail-42"))
    tried = text(client.post("/settings/models/test/", provider_form(endpoint), **HTMX))
    assert "HTTP 500" in tried and "internal-detail-42" not in tried
    # A base URL whose ?query or #fragment would make the client read another path.
    for base in (f"{endpoint.url}/secret#", f"{endpoint.url}/secret?"):
        tried = text(client.post("/settings/models/test/", provider_form(endpoint, base_url=base)))
        assert "no ?query or #fragment" in tried


def test_a_stored_key_never_goes_to_a_changed_url(owner, endpoint):
    client = client_for(owner)
    assert client.post("/settings/models/add/", provider_form(endpoint)).status_code == 302
    provider = ModelProvider.objects.get()
    with ScriptedLLM(api_key="") as elsewhere:
        elsewhere.script(Reply("OK"))
        # Test with the saved provider and a new base URL, the key field empty.
        form = provider_form(elsewhere, api_key="", provider=provider.pk)
        client.post("/settings/models/test/", form, **HTMX)
        assert elsewhere.authorizations == [""]
        # Saving the new URL without the key removes the stored key, and says so.
        response = client.post(
            f"/settings/models/{provider.pk}/", provider_form(elsewhere, api_key=""), follow=True
        )
        assert "the stored API key was removed" in text(response)
        provider.refresh_from_db()
        assert provider.sealed_api_key == "" and provider.api_key_hint == ""
        elsewhere.script(Reply("OK"))
        assert providers.try_endpoint(providers.endpoint_for(f"{provider.pk}:m")).passed
        assert elsewhere.authorizations == ["", ""]


def test_provider_mcp_and_token_changes_go_to_the_history(owner, alice, endpoint, loopback_mcp):
    client = client_for(owner)
    client.post("/settings/models/add/", provider_form(endpoint))
    provider = ModelProvider.objects.get()
    client.post(f"/settings/models/{provider.pk}/", provider_form(endpoint, name="Renamed"))
    client.post(f"/settings/models/{provider.pk}/delete/")
    rows = Change.objects.filter(owner=owner, subject_kind="model_provider").order_by("at", "id")
    assert [row.action for row in rows] == ["created", "changed", "deleted"]
    assert rows[1].old_value == {"name": "Internal"} and rows[1].new_value == {"name": "Renamed"}
    assert SECRET not in str([(row.old_value, row.new_value) for row in rows])

    port, _ = loopback_mcp
    url = f"http://127.0.0.1:{port}/mcp"
    client.post("/settings/mcp/", {"name": "internal", "url": url, "token": "tok-123456789"})
    server = McpServer.objects.get(owner=owner)
    client.post(f"/settings/mcp/{server.pk}/delete/")
    rows = Change.objects.filter(owner=owner, subject_kind="mcp_server").order_by("at", "id")
    assert [(row.action, row.subject_label) for row in rows] == [
        ("created", "internal"),
        ("deleted", "internal"),
    ]
    assert rows[0].new_value["url"] == url and "tok-123456789" not in str(rows[0].new_value)

    alice_client = client_for(alice)
    alice_client.post("/settings/tokens/", {"name": "script"})
    token = ApiToken.objects.get(owner=alice)
    alice_client.post(f"/settings/tokens/{token.pk}/revoke/")
    rows = Change.objects.filter(owner=alice, subject_kind="api_token").order_by("at", "id")
    assert [row.action for row in rows] == ["created", "changed"]
    assert rows[1].new_value["revoked_at"] is not None


def test_next_and_the_link_cannot_send_the_provider_form_elsewhere(owner, endpoint):
    client = client_for(owner)
    for target in ("https://evil.example/", "//evil.example/", "/\\evil.example"):
        form = provider_form(endpoint, name=f"P{len(target)}", next=target)
        response = client.post("/settings/models/add/", form)
        assert response.status_code == 302 and response["Location"] == "/settings/models/"
    # A link cannot fill in the URL (and name) a staff member would then save.
    page = text(
        client.get("/settings/models/add/", {"base_url": "https://evil.example/v1", "name": "X"})
    )
    assert 'value="https://evil.example/v1"' not in page and 'value="X"' not in page


def test_staff_may_edit_a_superusers_loopback_provider_but_not_move_it(owner, staff, endpoint):
    assert (
        client_for(owner).post("/settings/models/add/", provider_form(endpoint)).status_code == 302
    )
    provider = ModelProvider.objects.get()
    client = client_for(staff)
    form = provider_form(endpoint, name="Renamed", api_key="")
    assert client.post(f"/settings/models/{provider.pk}/", form).status_code == 302
    provider.refresh_from_db()
    assert provider.name == "Renamed" and provider.url_set_by == owner and provider.api_key_hint
    endpoint.script(Reply("OK"))
    tried = text(client.post("/settings/models/test/", {**form, "provider": provider.pk}, **HTMX))
    assert "✓ Works" in tried
    moved = provider_form(endpoint, base_url=endpoint.url.replace("127.0.0.1", "localhost"))
    response = client.post(f"/settings/models/{provider.pk}/", moved)
    assert response.status_code == 400 and "Refused" in text(response)
