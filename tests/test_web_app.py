"""The chat installable as an app, and every page reachable from the navigation
(issue 27 part 4)."""

from __future__ import annotations

import json

from django.test import Client

from neotask_site.views import THEME_COLOR
from tests.support.web import text


def test_it_serves_a_manifest_a_phone_can_install_without_a_login(alice):
    response = Client().get("/manifest.webmanifest")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/manifest+json"
    manifest = json.loads(response.content)
    assert manifest["start_url"] == "/" and manifest["display"] == "standalone"
    assert manifest["theme_color"] == THEME_COLOR
    sizes = {icon["sizes"] for icon in manifest["icons"]}
    assert {"192x192", "512x512"} <= sizes
    for icon in manifest["icons"]:
        png = Client().get(icon["src"])
        assert png.status_code == 200
        content = b"".join(png.streaming_content) if png.streaming else png.content
        width, height = icon["sizes"].split("x")
        # The PNG header's width and height: the file is the size the manifest says.
        assert content[:8] == b"\x89PNG\r\n\x1a\n"
        assert int.from_bytes(content[16:20]) == int(width)
        assert int.from_bytes(content[20:24]) == int(height)


def test_it_serves_the_manifest_before_the_first_account_exists(db):
    assert Client().get("/manifest.webmanifest").status_code == 200


def test_it_links_the_manifest_theme_color_and_every_memory_page(alice_client):
    page = text(alice_client.get("/memory/"))
    assert '<link rel="manifest" href="/manifest.webmanifest">' in page
    assert f'<meta name="theme-color" content="{THEME_COLOR}">' in page
    for href in ('href="/memory/facts/"', 'href="/memory/macros/"', 'href="/agents/"'):
        assert href in page
