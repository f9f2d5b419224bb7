"""The top navigation: Chat, then Memory, Automations and Settings as groups,
every page reachable, the page shown marked (neotask_site/navigation.py)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User

from sessions_app import chat
from tests.support.web import client_for

MEMORY = ["Search", "Facts", "Files", "Macros", "History"]
AUTOMATIONS = ["Tasks", "Agents"]
SETTINGS = ["MCP", "API tokens", "Your data", "Import", "Sessions"]
STAFF_SETTINGS = ["Models", *SETTINGS, "Add user", "Admin"]


def nav_of(html: str) -> str:
    return html[html.index('<nav id="site-nav"') : html.index("</nav>")]


def groups(nav: str) -> dict[str, list[str]]:
    """Each group's label and its links' labels; the top-level links under ""."""
    found: dict[str, list[str]] = {"": []}
    for part in re.split(r'(?=<details class="nav-group">)|</details>', nav):
        summary = re.search(r"<summary[^>]*>([^<]+)</summary>", part)
        links = re.findall(r'<a href="[^"]+"[^>]*>([^<]+)</a>', part)
        if summary:
            found[summary[1]] = links
        else:
            found[""] += links
    return found


def current(nav: str) -> list[str]:
    return re.findall(r'<a href="([^"]+)" aria-current="page">', nav)


def test_it_groups_the_pages(alice, alice_client):
    nav = nav_of(alice_client.get("/memory/facts/").content.decode())
    assert groups(nav) == {
        "": ["Chat"],
        "Memory": MEMORY,
        "Automations": AUTOMATIONS,
        "Settings": SETTINGS,
    }
    assert "Log out" in nav


def test_staff_also_see_models_add_user_and_admin(db):
    sam = User.objects.create_user("sam", is_staff=True)
    nav = nav_of(client_for(sam).get("/memory/facts/").content.decode())
    assert groups(nav)["Settings"] == STAFF_SETTINGS
    assert 'href="/settings/users/add/"' in nav and 'href="/admin/"' in nav


@pytest.mark.parametrize(
    ("path", "marked", "group"),
    [
        ("/memory/", "/memory/", "Memory"),
        ("/memory/facts/", "/memory/facts/", "Memory"),
        ("/memory/files/", "/memory/files/", "Memory"),
        ("/history/", "/history/", "Memory"),
        ("/tasks/", "/tasks/", "Automations"),
        ("/agents/", "/agents/", "Automations"),
        ("/settings/tokens/", "/settings/tokens/", "Settings"),
        ("/sessions/", "/sessions/", "Settings"),
    ],
)
def test_it_marks_the_page_shown_and_its_group(alice_client, path, marked, group):
    response = alice_client.get(path)
    assert response.status_code == 200
    nav = nav_of(response.content.decode())
    assert current(nav) == [marked]
    assert re.findall(r'<summary class="current">([^<]+)</summary>', nav) == [group]


def test_it_marks_chat_on_a_chat_page_and_a_chat_not_started_yet(alice, alice_client):
    nav = nav_of(alice_client.get("/").content.decode())
    assert current(nav) == ["/"]
    session = chat.start_chat(alice)
    nav = nav_of(alice_client.get(f"/chat/{session.key}/").content.decode())
    assert current(nav) == ["/"]
    assert 'class="current"' not in nav  # no group


def test_it_keeps_every_old_link(alice_client):
    nav = nav_of(alice_client.get("/memory/").content.decode())
    for url in [
        "/",
        "/sessions/",
        "/agents/",
        "/tasks/",
        "/memory/",
        "/memory/facts/",
        "/memory/macros/",
        "/memory/files/",
        "/history/",
        "/import/",
        "/settings/tokens/",
        "/settings/mcp/",
    ]:
        assert f'href="{url}"' in nav, url


def test_it_has_no_navigation_for_someone_signed_out(client, db):
    assert 'id="site-nav"' not in client.get("/accounts/login/").content.decode()
