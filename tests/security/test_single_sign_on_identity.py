"""Single sign-on keys an account on the provider's (issuer, subject), not on a
username (issue 40: M6, L11): another provider account with the same or a
lookalike username is refused, the linked one finds its account whatever it
is called here, and an ID token not signed as agreed is a refusal page, not a
500. Every sign-in goes through the real oidc-provider (tests/oidc)."""

from __future__ import annotations

import html
from collections.abc import Iterator

import pytest
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User
from django.test import Client

from tests.support.oidc_provider import CLIENT_SECRET, OIDCProvider, skip_without_node
from tests.test_single_sign_on import oidc

pytestmark = pytest.mark.slow

FULLWIDTH_ALICE = "\uff41\uff4c\uff49\uff43\uff45"


def said(response) -> str:
    return html.unescape(response.content.decode())


def people():
    """The accounts the sign-ins made (not the administrator's)."""
    return User.objects.exclude(username="root")


@pytest.fixture(scope="module")
def provider(tmp_path_factory) -> Iterator[OIDCProvider]:
    skip_without_node()
    with OIDCProvider("http://testserver", tmp_path_factory.mktemp("oidc") / "log") as running:
        yield running


@pytest.fixture
def signs_in(settings, provider, db):
    """Single sign-on with the provider; signs_in("alice") goes through it in a
    fresh browser: the callback's response, and the account it signed in to."""
    settings.NEOTASK = {
        **settings.NEOTASK,
        "oidc": oidc(
            issuer=provider.issuer,
            client_secret=CLIENT_SECRET,
            scopes="openid email profile groups",
        ),
    }
    User.objects.create_superuser("root", password="root-password")  # past the first run

    def sign_in(login: str) -> tuple[object, User | None]:
        client = Client()
        response = provider.sign_in(client, login)
        signed_in = client.session.get("_auth_user_id")
        return response, User.objects.get(pk=signed_in) if signed_in else None

    return sign_in


def test_another_subject_with_an_accounts_username_is_refused(signs_in):
    response, alice = signs_in("alice")
    assert response.status_code == 302 and alice is not None and alice.username == "alice"

    response, user = signs_in("alice-impostor")
    assert user is None  # not signed in to alice's account, nor to any
    assert response.status_code == 403
    assert 'The account "alice" here belongs to another Test IdP account' in said(response)
    assert people().get().email == "alice@example.org"  # nothing of hers changed


def test_a_fullwidth_lookalike_username_is_the_same_name(signs_in):
    signs_in("alice")
    response, user = signs_in("alice-fullwidth")
    assert user is None and response.status_code == 403
    assert "belongs to another Test IdP account" in said(response)
    assert list(people().values_list("username", flat=True)) == ["alice"]  # no second


def test_a_lookalike_username_becomes_its_plain_form_on_a_new_account(signs_in):
    response, user = signs_in("alice-fullwidth")
    assert response.status_code == 302 and user is not None
    assert user.username == "alice" != FULLWIDTH_ALICE
    # Now the name is hers: alice's own provider account is refused, not let in.
    assert signs_in("alice")[1] is None


def test_the_linked_subject_finds_its_account_whatever_it_is_called_here(signs_in, provider):
    _, alice = signs_in("alice")
    assert alice is not None
    alice.username = "alice.example"  # renamed by an administrator
    alice.save()
    _, again = signs_in("alice")
    assert again is not None and again.pk == alice.pk
    assert people().count() == 1
    from core.models import SignOnLink  # here: before the fix there was none

    link = SignOnLink.objects.get()
    assert (link.owner_id, link.issuer, link.subject) == (alice.pk, provider.issuer, "alice")


def test_the_first_sign_in_links_an_unlinked_account_of_that_name(signs_in):
    # Made by a sign-in before accounts were linked: no password, no link.
    existing = User.objects.create(username="Alice", password=make_password(None))
    _, user = signs_in("alice")  # case-folded, the same name
    assert user is not None and user.pk == existing.pk
    from core.models import SignOnLink

    assert SignOnLink.objects.get().owner_id == existing.pk
    assert signs_in("alice-impostor")[1] is None  # linked now: taken


@pytest.mark.parametrize(("login", "alg"), [("unsigned", "none"), ("hmac", "HS256")])
def test_an_id_token_not_signed_as_agreed_is_refused_with_a_page(signs_in, login, alg):
    response, user = signs_in(login)
    assert user is None
    assert response.status_code == 403
    page = said(response)
    assert "Sign-in refused" in page
    assert f"The provider's ID token is signed with '{alg}', not RS256" in page
    assert not people().exists()


def test_the_exact_name_wins_over_a_case_variant_at_the_first_link(signs_in):
    User.objects.create(username="Alice", password=make_password(None))
    alice = User.objects.create(username="alice", password=make_password(None))
    _, user = signs_in("alice")
    assert user is not None and user.pk == alice.pk


def test_several_accounts_of_the_same_folded_name_are_left_to_the_administrator(signs_in):
    for name in ("Alice", "ALICE"):
        User.objects.create(username=name, password=make_password(None))
    response, user = signs_in("alice")
    assert user is None and response.status_code == 403
    assert 'Several accounts here are named like "alice"' in said(response)
