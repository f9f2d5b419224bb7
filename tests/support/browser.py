"""The browser tests' side of the live app: Debian's Chromium, the user `tester`
it logs in as, and the steps every chat test takes."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.processes import free_port, manage, spawn_serve, wait_for_health

ARTIFACTS = Path(__file__).resolve().parent.parent / "e2e" / "artifacts"  # screenshots
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
PASSWORD = "e2e-password-123"
# The two sizes the browser tests hold to: a phone (an iPhone 12-15's CSS pixels, touch) and
# a desktop window.
PHONE: dict[str, Any] = {
    "viewport": {"width": 390, "height": 844},
    "is_mobile": True,
    "has_touch": True,
    "device_scale_factor": 3,
}
DESKTOP: dict[str, Any] = {"viewport": {"width": 1280, "height": 800}}


def add_tester(env: dict[str, str]) -> None:
    """Migrate the database of the app in `env` and add the superuser `tester`
    (`env` gives DJANGO_SUPERUSER_PASSWORD=PASSWORD)."""
    manage(env, "migrate", "-v0")
    manage(env, "createsuperuser", "--noinput", "--username", "tester", "--email", "t@x.org")


def log_in(page: Any) -> None:
    page.goto("/accounts/login/")
    page.fill("input[name=username]", "tester")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    # The latest chat, or one not started yet (on a phone its button is in the hidden chat list).
    page.wait_for_selector("#new-chat", state="attached")


def new_chat(page: Any) -> None:
    """Start a chat with the New chat button (a GET of a page creates none); on a
    phone it is in the chat list, behind the Chats button."""
    if not page.locator("#new-chat").is_visible():
        page.click("button.chats-toggle")
    page.click("#new-chat")
    page.locator(".empty-chat").wait_for()


def send(page: Any, text: str) -> None:
    """Type `text` in the chat and press Enter."""
    page.fill("#input", text)
    page.press("#input", "Enter")


@contextlib.contextmanager
def served_and_signed_in(
    browser: Any, env: dict[str, str], logs: Path, timeout_ms: int
) -> Iterator[Any]:
    """`manage.py serve` as `make run` starts it, with the tester added and signed in:
    a page of a new context, each wait up to `timeout_ms`; the server is stopped after."""
    add_tester(env)
    port = free_port()
    with (logs / "serve.log").open("w") as log:
        serve = spawn_serve(env, port, log=log)
        try:
            wait_for_health(port, serve)
            context = browser.new_context(base_url=f"http://127.0.0.1:{port}")
            page = context.new_page()
            page.set_default_timeout(timeout_ms)
            log_in(page)
            yield page
            context.close()
        finally:
            os.killpg(serve.pid, signal.SIGTERM)
            serve.wait(timeout=30)


def serious_violations(page: Any) -> list[str]:
    """axe-core's serious and critical findings on the page, one line each."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    return [
        f"{violation['id']} ({violation['impact']}): "
        + ", ".join(" ".join(node["target"]) for node in violation["nodes"])
        for violation in results.response["violations"]
        if violation["impact"] in ("serious", "critical")
    ]
