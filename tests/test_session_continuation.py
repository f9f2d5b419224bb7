"""A session's own behaviour (sessions_app/models/conversations.py): the chat's active
session, continuing it in a fresh one, its events."""

from __future__ import annotations

from memory import recording
from memory.models import EventType
from sessions_app.chat import start_chat
from sessions_app.models import Session


def test_a_chat_has_its_active_session_for_its_owner_only(alice, bob):
    session = start_chat(alice)
    assert Session.objects.active(alice, session.key) == session
    assert Session.objects.active(bob, session.key) is None
    assert Session.objects.active(None, session.key) is None


def test_continuing_archives_the_session_and_carries_the_chat_on(alice):
    session = start_chat(alice)
    Session.objects.filter(pk=session.pk).update(title="Trip plans", compaction_count=2)
    session.refresh_from_db()
    fresh = session.continue_as(compaction_count=3)
    session.refresh_from_db()
    assert session.status == Session.Status.ARCHIVED
    assert (fresh.key, fresh.agent, fresh.title, fresh.status) == (
        session.key,
        session.agent,
        "Trip plans",
        Session.Status.ACTIVE,
    )
    assert (fresh.continues_from, fresh.compaction_count) == (session, 3)
    assert Session.objects.active(alice, session.key) == fresh


def test_a_session_already_continued_is_not_continued_twice(alice):
    session = start_chat(alice)
    first = session.continue_as()
    assert session.continue_as() is None  # a second tab, a moment later
    assert list(Session.objects.filter(key=session.key, status="active")) == [first]
    assert session.archive() is False


def test_a_sessions_events_are_its_own(alice, bob):
    session, other = start_chat(alice), start_chat(alice)
    mine = recording.record(alice, str(session.pk), EventType.USER_MESSAGE, {"content": "Mine"})
    recording.record(alice, str(other.pk), EventType.USER_MESSAGE, {"content": "Another chat"})
    # A row of bob's naming alice's session id (no such thing is written; proof it stays out).
    recording.record(bob, str(session.pk), EventType.USER_MESSAGE, {"content": "Bob's"})
    assert list(session.events()) == [mine]
