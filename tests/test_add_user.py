"""The staff's "Add user" page: an account that can sign in at once."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.support.web import client_for

URL = "/settings/users/add/"
PASSWORD = "a long passphrase 42"


@pytest.fixture
def staff_client(db) -> Client:
    return client_for(User.objects.create_user("sam", password="sam-password", is_staff=True))


def test_staff_adds_a_user_who_can_sign_in(staff_client):
    form = staff_client.get(URL)
    assert form.status_code == 200
    for name in ("username", "email", "password1", "password2", "is_staff"):
        assert f'name="{name}"' in form.content.decode()
    response = staff_client.post(
        URL,
        {"username": "carol", "email": "", "password1": PASSWORD, "password2": PASSWORD},
        follow=True,
    )
    assert "Added carol as a user: they can sign in now." in response.content.decode()
    carol = User.objects.get(username="carol")
    assert not carol.is_staff and not carol.is_superuser and carol.is_active
    assert Client().login(username="carol", password=PASSWORD)


def test_staff_adds_a_staff_member_with_an_email(staff_client):
    staff_client.post(
        URL,
        {
            "username": "dana",
            "email": "dana@example.org",
            "password1": PASSWORD,
            "password2": PASSWORD,
            "is_staff": "on",
        },
    )
    dana = User.objects.get(username="dana")
    assert dana.is_staff and not dana.is_superuser and dana.email == "dana@example.org"


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"username": "sam"}, "A user with that username already exists."),
        ({"password2": "another passphrase 42"}, "The two password fields didn\u2019t match."),
        ({"password1": "12345678", "password2": "12345678"}, "This password is too common."),
        ({"username": "no spaces please"}, "Enter a valid username."),
        ({"email": "not an address"}, "Enter a valid email address."),
        ({"username": ""}, "This field is required."),
    ],
)
def test_it_says_what_is_wrong_and_adds_nobody(staff_client, fields, error):
    data = {"username": "erin", "password1": PASSWORD, "password2": PASSWORD, **fields}
    response = staff_client.post(URL, data)
    assert response.status_code == 400
    assert error in response.content.decode()
    assert list(User.objects.values_list("username", flat=True)) == ["sam"]


def test_it_is_the_staffs_alone(alice_client, alice):
    assert alice_client.get(URL).status_code == 403
    data = {"username": "mallory", "password1": PASSWORD, "password2": PASSWORD, "is_staff": "on"}
    assert alice_client.post(URL, data).status_code == 403
    assert not User.objects.filter(username="mallory").exists()
    assert Client().get(URL)["Location"].startswith("/accounts/login/")
