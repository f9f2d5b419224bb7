"""Single sign-on in a real browser against a real OpenID Connect provider
(issue 28 part 2): panva's oidc-provider run by Node.js (tests/oidc), and a
Neotask whose [oidc] lets in the provider's group neotask-users and maps
neotask-terminal to the Django group "Terminal users"."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.programs.accounts import account, group_with_permission
from tests.support.browser import ARTIFACTS, PASSWORD, add_tester, serious_violations
from tests.support.oidc_provider import OIDCProvider, skip_without_node
from tests.support.processes import app_env, free_port, run_program, start_daphne, stop_process

TERMINAL_GROUP = "Terminal users"


@dataclass
class SingleSignOnApp:
    url: str
    env: dict[str, str]
    provider: OIDCProvider


@pytest.fixture(scope="module")
def sso(tmp_path_factory, e2e_llm) -> Iterator[SingleSignOnApp]:
    skip_without_node()
    data = tmp_path_factory.mktemp("sso-data")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    provider = OIDCProvider(url, data / "provider.log")
    env = app_env(
        data,
        NEOTASK_LLM_BASE_URL=e2e_llm.url,
        NEOTASK_LLM_API_KEY=e2e_llm.api_key,
        NEOTASK_LLM_MODEL="scripted",
        DJANGO_SUPERUSER_PASSWORD=PASSWORD,
        **provider.config(
            allowed_groups="neotask-users",
            group_map=f"neotask-terminal = {TERMINAL_GROUP}",
        ),
    )
    add_tester(env)
    # The administrator grants the mapped group its permission in the admin.
    run_program(env, group_with_permission, TERMINAL_GROUP, "use_terminal")
    provider.start()
    log = open(data / "daphne.log", "w")  # noqa: SIM115  (closed below)
    try:
        server = start_daphne(env, port, log)
        yield SingleSignOnApp(url, env, provider)
        stop_process(server, seconds=15)
    finally:
        provider.stop()
        log.close()


@pytest.fixture
def sso_page(browser, sso):
    context = browser.new_context(base_url=sso.url, viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


def sign_in_at_provider(page, login: str) -> None:
    """From Neotask's login page, through the provider's own login form."""
    page.goto("/accounts/login/")
    page.click("text=Sign in with Test IdP")
    page.fill("input[name=login]", login)
    page.fill("input[name=password]", "any password: the test provider's form checks none")
    page.click("button[type=submit]")


def test_it_signs_in_a_new_user_with_the_providers_groups_and_logs_out_there(sso, sso_page):
    assert run_program(sso.env, account, "alice") is None
    sso_page.goto("/accounts/login/")
    assert serious_violations(sso_page) == []
    sign_in_at_provider(sso_page, "alice")
    sso_page.wait_for_selector("#new-chat")
    assert sso_page.url.startswith(sso.url)
    assert "alice" in sso_page.locator("header.topbar").inner_text()
    assert run_program(sso.env, account, "alice") == {
        "email": "alice@example.org",
        "has_password": False,
        "groups": [TERMINAL_GROUP],
        "can_use_terminal": True,
    }
    sso_page.screenshot(path=str(ARTIFACTS / "sso-signed-in.png"))

    # Logged out here and at the provider, back on the login page.
    sso_page.click("header form[action='/accounts/logout/'] button")
    sso_page.click("button[name=logout][value=yes]")  # the provider's "Yes, sign me out"
    sso_page.wait_for_url(f"{sso.url}/accounts/login/")
    sso_page.goto("/")
    assert sso_page.url.startswith(f"{sso.url}/accounts/login/")
    # The provider forgot her too: signing in again asks for the login once more.
    sso_page.click("text=Sign in with Test IdP")
    sso_page.locator("input[name=login]").wait_for()


def test_it_gives_a_user_outside_the_mapped_group_no_terminal(sso, sso_page):
    sign_in_at_provider(sso_page, "bob")
    sso_page.wait_for_selector("#new-chat")
    assert run_program(sso.env, account, "bob") == {
        "email": "bob@example.org",
        "has_password": False,
        "groups": [],
        "can_use_terminal": False,
    }


def test_it_refuses_someone_outside_the_allowed_groups(sso, sso_page):
    sign_in_at_provider(sso_page, "mallory")
    heading = sso_page.locator("h1")
    heading.wait_for()
    assert heading.inner_text() == "Sign-in refused"
    assert "not in a group allowed to use Neotask" in sso_page.locator(".error").inner_text()
    assert run_program(sso.env, account, "mallory") is None
    assert serious_violations(sso_page) == []
    sso_page.screenshot(path=str(ARTIFACTS / "sso-refused.png"))


def test_it_refuses_an_account_without_the_username_claim(sso, sso_page):
    sign_in_at_provider(sso_page, "nameless")
    sso_page.locator("h1:has-text('Sign-in refused')").wait_for()
    assert 'has no "preferred_username"' in sso_page.locator(".error").inner_text()


def test_it_says_so_when_the_provider_is_down(sso, sso_page):
    sso.provider.stop()
    try:
        sso_page.goto("/accounts/login/")
        with sso_page.expect_response(lambda r: "/accounts/oidc/start/" in r.url) as answer:
            sso_page.click("text=Sign in with Test IdP")
        assert answer.value.status == 503
        assert sso_page.locator("h1").inner_text() == "The sign-in service is not available"
        assert "Test IdP is not answering" in sso_page.locator(".error").inner_text()
        assert "Traceback" not in sso_page.content()
        assert serious_violations(sso_page) == []
        sso_page.screenshot(path=str(ARTIFACTS / "sso-provider-down.png"))
    finally:
        sso.provider.start()


def test_it_still_logs_in_with_a_password(sso, sso_page):
    sso_page.goto("/accounts/login/")
    sso_page.fill("input[name=username]", "tester")
    sso_page.fill("input[name=password]", PASSWORD)
    sso_page.click("text=Log in with a password")
    sso_page.wait_for_selector("#new-chat")
    assert "tester" in sso_page.locator("header.topbar").inner_text()
