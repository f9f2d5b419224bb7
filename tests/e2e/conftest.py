"""End-to-end fixtures: the real app (daphne, its own database) and Debian's Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.browser import ARTIFACTS, CHROMIUM, CHROMIUM_FLAGS, PASSWORD, add_tester
from tests.support.processes import app_env, free_port, start_daphne
from tests.support.scripted_llm import ScriptedLLM


@pytest.fixture(scope="session")
def e2e_llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


@pytest.fixture(scope="session")
def live_env(e2e_llm, tmp_path_factory) -> dict[str, str]:
    """The environment of the live app: tests that seed its database run
    programs in it (tests.support.processes.run_program)."""
    return app_env(
        tmp_path_factory.mktemp("e2e-data"),
        NEOTASK_LLM_BASE_URL=e2e_llm.url,
        NEOTASK_LLM_API_KEY=e2e_llm.api_key,
        NEOTASK_LLM_MODEL="scripted",
        NEOTASK_TERMINAL_ENABLED="true",
        DJANGO_SUPERUSER_PASSWORD=PASSWORD,
    )


@pytest.fixture(scope="session")
def live_app(live_env) -> Iterator[str]:
    """daphne serving Neotask on a free port, with a user `tester`."""
    env = live_env
    data = Path(env["NEOTASK_DATA_DIR"])
    add_tester(env)
    port = free_port()
    log = open(data / "daphne.log", "w")  # noqa: SIM115  (closed below)
    server = start_daphne(env, port, log)
    url = f"http://127.0.0.1:{port}"
    yield url
    server.terminate()
    server.wait(timeout=15)
    log.close()


@pytest.fixture(scope="module")
def browser():
    # Module scope: Playwright's sync API keeps an event loop running while it
    # is open, which would stop the async tests of other modules.
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is missing: `make test` installs it (apt-get install chromium)")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, live_app):
    context = browser.new_context(base_url=live_app, viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(30_000)  # generous: CI machines are sometimes busy
    yield page
    context.close()
