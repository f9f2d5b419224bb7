"""Single sign-on (issue 28 part 2): whom a provider's claims make someone here,
the [oidc] settings, and the pages around the provider — with the real
oidc-provider where the page talks to it (the whole sign-in, which needs a
browser at the provider, is tests/e2e/test_single_sign_on_e2e.py)."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.contrib.auth import authenticate
from django.contrib.auth.models import Group, User
from django.test import Client, RequestFactory

from core.config import ConfigError, load_config
from core.ports import free_port
from neotask_site.oidc import OIDCBackend
from neotask_site.single_sign_on import (
    ProviderUnavailable,
    SignInRefused,
    discover,
    identity_from,
    sign_in,
)
from tests.support.oidc_provider import CLIENT_ID, OIDCProvider, skip_without_node
from tests.support.web import client_for, text

DOWN = f"http://127.0.0.1:{free_port()}"  # nothing listens there


def oidc(**overrides) -> dict:
    """[oidc] with a provider, as load_config makes it."""
    variables = {
        "NEOTASK_OIDC_ISSUER": DOWN,
        "NEOTASK_OIDC_CLIENT_ID": CLIENT_ID,
        "NEOTASK_OIDC_CLIENT_SECRET": "secret",
        "NEOTASK_OIDC_PROVIDER_NAME": "Test IdP",
        "NEOTASK_OIDC_TIMEOUT_SECONDS": "2",
    }
    variables.update({f"NEOTASK_OIDC_{key.upper()}": str(v) for key, v in overrides.items()})
    return load_config(None, variables)["oidc"]


@pytest.fixture
def configure_oidc(settings):
    """Sets [oidc] for the test: configure_oidc(issuer=..., local_login="false", ...)."""

    def apply(**overrides) -> dict:
        settings.NEOTASK = {**settings.NEOTASK, "oidc": oidc(**overrides)}
        return settings.NEOTASK["oidc"]

    return apply


@pytest.fixture(scope="module")
def provider(tmp_path_factory) -> Iterator[OIDCProvider]:
    skip_without_node()
    with OIDCProvider("http://testserver", tmp_path_factory.mktemp("oidc") / "log") as running:
        yield running


def claims(**extra) -> dict:
    return {
        "sub": "alice-sub",
        "preferred_username": "alice",
        "email": "alice@example.org",
        "email_verified": True,
        "groups": ["neotask-users"],
        **extra,
    }


# Who the claims make someone here


def test_it_makes_the_account_from_the_username_claim_without_a_password(db):
    user = sign_in(identity_from(claims(), oidc()), oidc())
    assert (user.username, user.email) == ("alice", "alice@example.org")
    assert not user.has_usable_password()


def test_it_finds_the_same_account_at_the_next_sign_in(db):
    first = sign_in(identity_from(claims(), oidc()), oidc())
    again = sign_in(identity_from(claims(email="alice@new.example.org"), oidc()), oidc())
    assert again.pk == first.pk
    assert User.objects.get().email == "alice@new.example.org"


def test_it_uses_the_configured_claim_as_the_username(db):
    config = oidc(username_claim="sub")
    assert sign_in(identity_from(claims(), config), config).username == "alice-sub"


def test_it_refuses_claims_without_the_username_claim(db):
    with pytest.raises(SignInRefused, match='has no "preferred_username"'):
        identity_from(claims(preferred_username=""), oidc())
    no_claim = claims()
    del no_claim["preferred_username"]
    with pytest.raises(SignInRefused, match='has no "preferred_username"'):
        identity_from(no_claim, oidc())


def test_it_refuses_an_unverified_email_as_the_username(db):
    config = oidc(username_claim="email")
    with pytest.raises(SignInRefused, match="not verified"):
        identity_from(claims(email_verified=False), config)
    assert identity_from(claims(), config).username == "alice@example.org"


def test_it_keeps_an_unverified_email_off_the_account(db):
    assert identity_from(claims(email_verified=False), oidc()).email == ""
    assert identity_from(claims(email_verified="true"), oidc()).email == ""


def test_it_refuses_a_username_django_cannot_hold(db):
    for bad in ["alice smith", "a" * 151, "alice/../bob"]:
        with pytest.raises(SignInRefused, match="cannot be a username here"):
            identity_from(claims(preferred_username=bad), oidc())


def test_it_refuses_someone_outside_the_allowed_groups(db):
    config = oidc(allowed_groups="neotask-users, staff")
    with pytest.raises(SignInRefused, match="not in a group allowed"):
        identity_from(claims(groups=["contractors"]), config)
    with pytest.raises(SignInRefused, match="not in a group allowed"):
        identity_from(claims(groups=[]), config)
    assert identity_from(claims(groups=["staff"]), config).groups == {"staff"}


def test_it_refuses_a_groups_claim_that_is_not_a_list(db):
    with pytest.raises(SignInRefused, match='"groups" is not a list'):
        identity_from(claims(groups={"admin": True}), oidc())
    assert identity_from(claims(groups="one-group"), oidc()).groups == {"one-group"}


def test_it_refuses_an_account_that_has_a_password_unless_linking_is_on(alice):
    identity = identity_from(claims(), oidc())
    with pytest.raises(SignInRefused, match='An account "alice" with a password already exists'):
        sign_in(identity, oidc())
    assert sign_in(identity, oidc(link_existing_users="true")).pk == alice.pk
    alice.refresh_from_db()
    assert alice.check_password("alice-password")  # linked, her password still works


def test_it_refuses_a_disabled_account(db):
    User.objects.create_user("alice", is_active=False)
    with pytest.raises(SignInRefused, match="disabled"):
        sign_in(identity_from(claims(), oidc()), oidc())


def test_it_syncs_only_the_mapped_groups(db):
    config = oidc(group_map="neotask-terminal = Terminal users, admins = Staff")
    user = sign_in(identity_from(claims(groups=["neotask-terminal", "other"]), config), config)
    user.groups.add(Group.objects.create(name="Book club"))  # the administrator's
    assert sorted(user.groups.values_list("name", flat=True)) == ["Book club", "Terminal users"]
    assert not Group.objects.filter(name="other").exists()

    sign_in(identity_from(claims(groups=["admins"]), config), config)
    assert sorted(user.groups.values_list("name", flat=True)) == ["Book club", "Staff"]


def test_it_gives_the_terminal_permission_through_a_mapped_group(db):
    from django.contrib.auth.models import Permission

    Group.objects.create(name="Terminal users").permissions.add(
        Permission.objects.get(codename="use_terminal")
    )
    config = oidc(group_map="neotask-terminal = Terminal users")
    user = sign_in(identity_from(claims(groups=["neotask-terminal"]), config), config)
    assert User.objects.get(pk=user.pk).has_perm("agent.use_terminal")
    sign_in(identity_from(claims(groups=[]), config), config)
    assert not User.objects.get(pk=user.pk).has_perm("agent.use_terminal")


# The [oidc] settings


def test_it_reads_the_oidc_settings_from_the_environment():
    config = oidc(local_login="false", group_map="a = A", allowed_groups="x,y")
    assert (config["local_login"], config["group_map"]) == (False, "a = A")


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"NEOTASK_OIDC_ISSUER": "sso.example.org"}, "NEOTASK_OIDC_ISSUER must be an http"),
        (
            {"NEOTASK_OIDC_ISSUER": "https://sso.example.org"},
            "[oidc] client_id must be set when [oidc] issuer is set",
        ),
        ({"NEOTASK_OIDC_LOCAL_LOGIN": "false"}, "NEOTASK_OIDC_LOCAL_LOGIN can be false only"),
        ({"NEOTASK_OIDC_GROUP_MAP": "admins"}, "'admins' is not written as provider-group"),
        ({"NEOTASK_OIDC_USERNAME_CLAIM": " "}, "NEOTASK_OIDC_USERNAME_CLAIM must not be empty"),
        (
            {
                "NEOTASK_OIDC_ISSUER": "https://sso.example.org",
                "NEOTASK_OIDC_CLIENT_ID": "neotask",
                "NEOTASK_OIDC_CLIENT_SECRET": "s",
                "NEOTASK_OIDC_SCOPES": "email profile",
            },
            "NEOTASK_OIDC_SCOPES must include 'openid'",
        ),
    ],
)
def test_it_refuses_bad_oidc_settings_naming_them(variables, message):
    with pytest.raises(ConfigError) as refused:
        load_config(None, variables)
    assert message in str(refused.value)


# The pages


def test_it_offers_the_provider_on_the_login_page_only_when_configured(alice, configure_oidc):
    page = text(Client().get("/accounts/login/"))
    assert "Sign in with" not in page and 'name="password"' in page
    configure_oidc()
    page = text(Client().get("/accounts/login/?next=/memory/"))
    assert 'href="/accounts/oidc/start/?next=/memory/"' in page
    assert "Sign in with Test IdP" in page and 'name="password"' in page


def test_it_refuses_passwords_when_local_login_is_off(alice, configure_oidc):
    configure_oidc(local_login="false")
    client = Client()
    page = text(client.get("/accounts/login/"))
    assert "Sign in with Test IdP" in page and 'name="password"' not in page
    response = client.post("/accounts/login/", {"username": "alice", "password": "alice-password"})
    assert response.status_code == 200
    assert "Passwords are switched off here" in text(response)
    assert "_auth_user_id" not in client.session
    # The admin's login page and any other password check too.
    User.objects.create_superuser("root", password="root-password")
    response = client.post(
        "/admin/login/", {"username": "root", "password": "root-password", "next": "/admin/"}
    )
    assert response.status_code == 200
    assert "_auth_user_id" not in client.session
    assert authenticate(username="root", password="root-password") is None


def test_it_answers_its_pages_with_not_found_when_not_configured(alice):
    assert Client().get("/accounts/oidc/start/").status_code == 404
    assert Client().get("/accounts/oidc/callback/?code=c&state=s").status_code == 404


def test_it_says_so_when_the_provider_is_down_at_the_start(alice, configure_oidc):
    configure_oidc(issuer=DOWN)
    response = Client().get("/accounts/oidc/start/")
    assert response.status_code == 503
    assert "Test IdP is not answering" in text(response)
    assert "The sign-in service is not available" in text(response)


def test_it_says_so_when_the_provider_is_down_at_the_callback(alice, configure_oidc):
    configure_oidc(issuer=DOWN)
    client = Client()
    session = client.session
    session["oidc_states"] = {"s1": {"nonce": "n1", "code_verifier": "v" * 64}}
    session.save()
    response = client.get("/accounts/oidc/callback/?code=c1&state=s1")
    assert response.status_code == 503
    assert "Test IdP is not answering" in text(response)
    assert "_auth_user_id" not in client.session


def test_it_explains_a_sign_in_the_provider_did_not_complete(alice, configure_oidc):
    configure_oidc()
    response = Client().get(
        "/accounts/oidc/callback/?error=access_denied&error_description=End-User+aborted"
    )
    assert response.status_code == 403
    assert "The sign-in did not complete: End-User aborted." in text(response)
    response = Client().get("/accounts/oidc/callback/?code=c&state=never-issued")
    assert response.status_code == 403
    assert "may have been started in another window" in text(response)


def test_it_ignores_a_password_login_that_carries_a_code(alice, configure_oidc):
    """The OIDC backend answers only the callback: a code in a login page's URL
    is not exchanged at the provider."""
    configure_oidc()
    request = RequestFactory().post("/accounts/login/?code=c&state=s")
    assert OIDCBackend().authenticate(request, username="alice", password="x") is None


def test_it_refuses_an_id_token_of_another_application_or_issuer(alice, configure_oidc):
    configure_oidc()
    backend = OIDCBackend()
    backend.OIDC_RP_CLIENT_ID = CLIENT_ID
    backend.OIDC_OP_USER_ENDPOINT = f"{DOWN}/me"
    payload = {"sub": "alice", "iss": DOWN, "aud": [CLIENT_ID, "other"]}
    with pytest.raises(SignInRefused, match="another application"):
        backend.get_or_create_user("token", "id-token", {**payload, "aud": "other"})
    with pytest.raises(SignInRefused, match="another provider"):
        backend.get_or_create_user("token", "id-token", {**payload, "iss": "https://evil"})
    # Both right: the next step asks the provider (down here) for the user info.
    with pytest.raises(requests.ConnectionError):
        backend.get_or_create_user("token", "id-token", payload)


@pytest.mark.slow
def test_it_sends_the_browser_to_the_provider_with_state_nonce_and_pkce(
    alice, configure_oidc, provider
):
    configure_oidc(issuer=provider.issuer, scopes="openid email profile groups")
    client = Client()
    response = client.get("/accounts/oidc/start/?next=/memory/")
    assert response.status_code == 302
    location = urlsplit(response["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == f"{provider.issuer}/auth"
    query = {key: values[0] for key, values in parse_qs(location.query).items()}
    assert query["client_id"] == CLIENT_ID
    assert query["redirect_uri"] == "http://testserver/accounts/oidc/callback/"
    assert query["scope"] == "openid email profile groups"
    assert query["code_challenge_method"] == "S256"
    assert query["state"] in client.session["oidc_states"]
    assert client.session["oidc_states"][query["state"]]["nonce"] == query["nonce"]
    assert client.session["oidc_login_next"] == "/memory/"


@pytest.mark.slow
def test_it_says_so_when_the_provider_refuses_the_code(alice, configure_oidc, provider):
    configure_oidc(issuer=provider.issuer)
    client = Client()
    state = parse_qs(urlsplit(client.get("/accounts/oidc/start/")["Location"]).query)["state"][0]
    response = client.get(f"/accounts/oidc/callback/?code=forged-code&state={state}")
    assert response.status_code == 503
    assert "Test IdP did not complete the sign-in" in text(response)
    assert "_auth_user_id" not in client.session


@pytest.mark.slow
def test_it_refuses_a_provider_that_answers_as_another_issuer(provider):
    config = oidc(issuer=provider.issuer.replace("127.0.0.1", "localhost"))
    with pytest.raises(ProviderUnavailable, match="another issuer"):
        discover(config)
    assert discover(oidc(issuer=provider.issuer))["issuer"] == provider.issuer


@pytest.mark.slow
def test_it_logs_out_at_the_provider_after_a_single_sign_on(alice, configure_oidc, provider):
    configure_oidc(issuer=provider.issuer)
    client = client_for(alice)
    session = client.session
    session["oidc_id_token"] = "the-id-token"
    session.save()
    response = client.post("/accounts/logout/")
    location = urlsplit(response["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == (
        f"{provider.issuer}/session/end"
    )
    query = {key: values[0] for key, values in parse_qs(location.query).items()}
    assert query == {
        "id_token_hint": "the-id-token",
        "client_id": CLIENT_ID,
        "post_logout_redirect_uri": "http://testserver/accounts/login/",
    }
    assert "_auth_user_id" not in client.session


def test_it_logs_out_here_only_after_a_password_login_or_with_the_provider_down(
    alice, configure_oidc
):
    configure_oidc(issuer=DOWN)
    client = client_for(alice)
    assert client.post("/accounts/logout/")["Location"] == "/accounts/login/"
    client = client_for(alice)
    session = client.session
    session["oidc_id_token"] = "the-id-token"
    session.save()
    assert client.post("/accounts/logout/")["Location"] == "/accounts/login/"
    assert "_auth_user_id" not in client.session
