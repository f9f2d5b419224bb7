from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client


@pytest.fixture
def alice(db) -> User:
    return User.objects.create_user("alice", password="alice-password")


@pytest.fixture
def bob(db) -> User:
    return User.objects.create_user("bob", password="bob-password")


@pytest.fixture
def alice_client(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def bob_client(bob) -> Client:
    client = Client()
    client.force_login(bob)
    return client
