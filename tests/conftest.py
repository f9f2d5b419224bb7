from __future__ import annotations

import copy
import uuid

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from core import process_cache
from memory import recording, tasks
from memory.files.search import forget_chunk_indexes
from memory.models import EventType
from memory.vector_index import forget_indexes
from memory.working import working_memory
from monitoring import counters
from sessions_app import chat
from sessions_app.models import Session
from tests.support.records import FRIDAY
from tests.support.scripted_llm import ScriptedLLM
from tests.support.web import client_for


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test databases; before they are dropped, PostgreSQL's
    sessions of connections other threads still hold (asgiref's executor, the
    live servers') are ended, or the drop fails and leaves the database behind."""
    yield
    with django_db_blocker.unblock():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )


def forget_process_state() -> None:
    process_cache.clear_all()
    forget_chunk_indexes()
    forget_indexes()
    working_memory.clear()


@pytest.fixture(autouse=True)
def own_process_state(settings, tmp_path_factory, monkeypatch):
    """User ids repeat between tests (rolled back), so each test gets its own data dir
    (workspaces, uploads), cache and empty in-process indexes and working memory: a
    file or cached row of one test never reaches the next. Embedding requests
    and counts go out at once (each in its test's transaction), not gathered for
    a moment by a thread of their own."""
    monkeypatch.setattr(tasks.EMBEDDING_REQUESTS, "window", 0)
    monkeypatch.setattr(counters.COUNTS, "window", 0)
    settings.DATA_DIR = tmp_path_factory.mktemp("data")  # apart from the test's tmp_path
    # A cache of its own (login throttle counts): a key prefix, not a flush,
    # since on the team profile the Redis is shared.
    cache = settings.CACHES["default"]
    settings.CACHES = {
        **settings.CACHES,
        "default": {**cache, "KEY_PREFIX": f"{cache['KEY_PREFIX']}-{uuid.uuid4().hex}"},
    }
    forget_process_state()
    yield
    forget_process_state()


@pytest.fixture
def alice(db) -> User:
    return User.objects.create_user("alice", password="alice-password")


@pytest.fixture
def bob(db) -> User:
    return User.objects.create_user("bob", password="bob-password")


@pytest.fixture
def alice_client(alice) -> Client:
    return client_for(alice)


@pytest.fixture
def bob_client(bob) -> Client:
    return client_for(bob)


@pytest.fixture
def owner(db) -> User:
    """A superuser: may approve terminal commands and walk the admin."""
    return User.objects.create_superuser("owner", password="owner-password")


@pytest.fixture
def session(owner) -> Session:
    """A web chat of `owner`'s."""
    return chat.start_chat(owner)


@pytest.fixture
def alice_session(alice) -> Session:
    """A web chat of `alice`'s."""
    return chat.start_chat(alice)


@pytest.fixture
def user_with_memories(db) -> User:
    """A plain user `owner` with 30 old messages, something for every branch of memory to find."""
    user = User.objects.create_user("owner")
    for n in range(30):
        said = f"My cousin number {n} likes sailing on the lake and reading about trains."
        recording.record(user, "old", EventType.USER_MESSAGE, {"content": said})
    return user


@pytest.fixture
def configure(settings):
    """Change [section] keys of the Neotask config for one test."""

    def change(section: str, **values) -> None:
        neotask = copy.deepcopy(settings.NEOTASK)
        neotask[section].update(values)
        settings.NEOTASK = neotask

    return change


@pytest.fixture
def berlin_friday(configure, monkeypatch):
    """The server's zone is Berlin and it is Friday 10:00 there."""
    configure("server", time_zone="Europe/Berlin")
    monkeypatch.setattr("django.utils.timezone.now", lambda: FRIDAY)


@pytest.fixture
def llm(configure):
    """The scripted LLM server, configured as Neotask's endpoint."""
    with ScriptedLLM() as server:
        configure("llm", base_url=server.url, api_key=server.api_key, model="scripted")
        yield server


# The e2e fixtures: a test that asks for one starts Chromium or daphne.
SLOW_FIXTURES = {"browser", "live_app"}


@pytest.hookimpl(tryfirst=True)  # the marks must be there before `-m` deselects
def pytest_collection_modifyitems(items):
    """Browser tests are marked slow and run last: a failure elsewhere shows first."""
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: "/e2e/" in str(item.path))
