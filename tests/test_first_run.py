from __future__ import annotations

from django.contrib.auth.models import User
from django.test import Client


def test_it_sends_every_page_to_setup_while_no_account_exists(db):
    client = Client()
    for path in [
        "/",
        "/accounts/login/",
        "/admin/",
        "/sessions/00000000-0000-0000-0000-000000000000/",
    ]:
        response = client.get(path)
        assert response.status_code == 302, path
        assert response["Location"] == "/setup/"


def test_it_shows_the_create_the_admin_account_page(db):
    response = Client().get("/setup/")
    assert response.status_code == 200
    assert b"Create the admin account" in response.content


def test_it_creates_the_admin_account_and_logs_in(db):
    client = Client()
    response = client.post(
        "/setup/",
        {"username": "root", "password1": "a-long-passphrase", "password2": "a-long-passphrase"},
    )
    assert response.status_code == 302
    assert response["Location"] == "/setup/model/"
    user = User.objects.get()
    assert user.username == "root"
    assert user.is_superuser and user.is_staff
    assert user.check_password("a-long-passphrase")
    assert client.get("/", follow=True).status_code == 200
    assert client.get("/admin/").status_code == 200


def test_it_refuses_a_bad_setup_form_and_creates_nothing(db):
    client = Client()
    response = client.post(
        "/setup/", {"username": "root", "password1": "a-long-passphrase", "password2": "different"}
    )
    assert response.status_code == 200
    assert b"password fields didn" in response.content
    response = client.post("/setup/", {"username": "root", "password1": "123", "password2": "123"})
    assert b"too short" in response.content
    assert not User.objects.exists()


def test_it_closes_setup_once_an_account_exists(alice):
    client = Client()
    assert client.get("/setup/")["Location"] == "/accounts/login/"
    response = client.post(
        "/setup/",
        {"username": "intruder", "password1": "p4ss-phrase!", "password2": "p4ss-phrase!"},
    )
    assert response.status_code == 302
    assert not User.objects.filter(username="intruder").exists()


def test_it_requires_login_for_every_page(alice):
    client = Client()
    for path in ["/", "/sessions/00000000-0000-0000-0000-000000000000/"]:
        response = client.get(path)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/?next=")
    assert client.get("/admin/")["Location"].startswith("/admin/login/")


def test_it_logs_in_and_out(alice):
    client = Client()
    assert client.get("/accounts/login/").status_code == 200
    response = client.post("/accounts/login/", {"username": "alice", "password": "wrong-password"})
    assert response.status_code == 200
    assert b"enter a correct username and password" in response.content
    response = client.post("/accounts/login/", {"username": "alice", "password": "alice-password"})
    assert response["Location"] == "/"
    assert b"alice" in client.get("/", follow=True).content
    assert client.post("/accounts/logout/")["Location"] == "/accounts/login/"
    assert client.get("/sessions/")["Location"].startswith("/accounts/login/")


def test_it_shows_a_readable_not_found_page(alice_client):
    response = alice_client.get("/no/such/page/")
    assert response.status_code == 404
    assert b"Not found" in response.content
