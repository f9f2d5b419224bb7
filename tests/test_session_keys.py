from __future__ import annotations

import pytest
from django.db import IntegrityError

from sessions_app.keys import SCHEDULED_CHANNEL, SessionKey, SessionKeyError
from sessions_app.models import Agent, Session


@pytest.mark.parametrize(
    ("key", "parts"),
    [
        ("agent:main:web:abc123", ("main", "web", "abc123")),
        ("agent:research-bot:telegram:42", ("research-bot", "telegram", "42")),
        (
            "cron:1b4e28ba-2fa1-11d2-883f-0016d3cca427",
            ("main", "cron", "1b4e28ba-2fa1-11d2-883f-0016d3cca427"),
        ),
    ],
)
def test_it_parses_and_rebuilds_keys(key, parts):
    parsed = SessionKey.parse(key)
    assert (parsed.agent, parsed.channel, parsed.chat) == parts
    assert str(parsed) == key


@pytest.mark.parametrize(
    "key",
    [
        "",
        "agent:main:web",
        "agent::web:x",
        "agent:main:web:x:y",
        "cron:",
        "user:main:web:x",
        "agent:main:web:<script>",
        "agent:main:web:" + "x" * 300,
        "agent:ma in:web:x",
    ],
)
def test_it_rejects_malformed_keys(key):
    with pytest.raises(SessionKeyError):
        SessionKey.parse(key)


def test_it_allows_one_active_session_per_key(alice):
    agent = Agent.objects.default_for(alice)
    first = Session.start(alice, agent, "web", "chat1")
    assert first.key == "agent:main:web:chat1"
    with pytest.raises(IntegrityError):
        Session.start(alice, agent, "web", "chat1")


def test_it_keeps_archived_sessions_under_the_same_key(alice, bob):
    agent = Agent.objects.default_for(alice)
    first = Session.start(alice, agent, "web", "chat1")
    first.status = Session.Status.ARCHIVED
    first.save()
    second = Session.start(alice, agent, "web", "chat1", continues_from=first)
    assert second.continues_from == first
    # Another user may use the same key.
    Session.start(bob, Agent.objects.default_for(bob), "web", "chat1")
    assert Session.objects.filter(key="agent:main:web:chat1").count() == 3


def test_it_tells_a_scheduled_tasks_session_from_a_conversation(alice):
    agent = Agent.objects.default_for(alice)
    task_id = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
    scheduled = Session.start(alice, agent, SCHEDULED_CHANNEL, task_id)
    chat = Session.start(alice, agent, "web", "chat1")
    assert scheduled.key == f"cron:{task_id}" and scheduled.is_scheduled
    assert SessionKey.parse(scheduled.key).is_scheduled
    assert not chat.is_scheduled and not SessionKey.parse(chat.key).is_scheduled
