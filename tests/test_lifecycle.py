from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from memory import recording
from memory.models import Event
from sessions_app import chat
from sessions_app.models import Session
from sessions_app.turns import ensure_fresh, last_daily_reset, stale_reason
from tests.support.chat_turns import converse

BERLIN = ZoneInfo("Europe/Berlin")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=BERLIN)


@pytest.fixture
def berlin(configure):
    configure("server", time_zone="Europe/Berlin")
    configure("sessions", daily_reset_hour=4, idle_minutes=0)


def session_active_at(owner, when: datetime) -> Session:
    session = chat.start_chat(owner)
    recording.record(owner, str(session.pk), "user_message", {"content": "hello"})
    Session.objects.filter(pk=session.pk).update(last_activity_at=when)
    session.refresh_from_db()
    return session


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        ("2026-06-10 04:00", "2026-06-10 04:00"),  # the boundary minute itself
        ("2026-06-10 03:59", "2026-06-09 04:00"),
        ("2026-06-10 23:00", "2026-06-10 04:00"),
        # DST: clocks jump 02:00 → 03:00 on 2026-03-29 and back 03:00 → 02:00 on 2026-10-25.
        ("2026-03-29 05:00", "2026-03-29 04:00"),
        ("2026-10-25 05:00", "2026-10-25 04:00"),
    ],
)
def test_it_finds_the_last_daily_reset(now, expected):
    assert last_daily_reset(at(now), 4, BERLIN) == at(expected)


def test_it_resets_once_on_the_night_the_reset_hour_does_not_exist():
    # 02:30 does not exist on 2026-03-29 in Berlin: the reset happens at the jump.
    boundary = last_daily_reset(at("2026-03-29 12:00"), 2, BERLIN)
    assert boundary.astimezone(ZoneInfo("UTC")).isoformat() == "2026-03-29T01:00:00+00:00"
    assert last_daily_reset(at("2026-03-30 12:00"), 2, BERLIN) == at("2026-03-30 02:00")


def test_it_rolls_over_after_the_daily_reset_hour(alice, berlin):
    session = session_active_at(alice, at("2026-06-09 23:30"))
    assert stale_reason(session, at("2026-06-10 03:59")) is None
    assert stale_reason(session, at("2026-06-10 04:00")) == "daily reset at 04:00"
    fresh, reason = ensure_fresh(session, at("2026-06-10 08:00"))
    assert reason == "daily reset at 04:00"
    assert fresh.pk != session.pk and fresh.continues_from_id == session.pk
    session.refresh_from_db()
    assert session.status == "archived"
    notice = Event.objects.get(session_id=str(fresh.pk), event_type="session_start")
    assert notice.text == "New session started: daily reset at 04:00."
    # History is kept.
    assert Event.objects.filter(session_id=str(session.pk), event_type="user_message").exists()


def test_it_rolls_over_after_idle_minutes(alice, berlin, configure):
    configure("sessions", idle_minutes=45)
    session = session_active_at(alice, at("2026-06-10 09:00"))
    assert stale_reason(session, at("2026-06-10 09:44")) is None
    assert stale_reason(session, at("2026-06-10 09:45")) == "idle for 45 minutes"


def test_it_names_whichever_rule_came_first(alice, berlin, configure):
    configure("sessions", idle_minutes=30)
    session = session_active_at(alice, at("2026-06-10 03:00"))
    # Idle since 03:30, daily reset at 04:00: idle came first.
    assert stale_reason(session, at("2026-06-10 05:00")) == "idle for 30 minutes"
    session = session_active_at(alice, at("2026-06-10 03:50"))
    assert stale_reason(session, at("2026-06-10 05:00")) == "daily reset at 04:00"


def test_it_keeps_a_session_with_nothing_said(alice, berlin):
    session = chat.start_chat(alice)
    Session.objects.filter(pk=session.pk).update(last_activity_at=at("2026-06-01 10:00"))
    session.refresh_from_db()
    same, reason = ensure_fresh(session, at("2026-06-10 10:00"))
    assert same.pk == session.pk and reason is None
    assert Session.objects.count() == 1


@pytest.mark.django_db(transaction=True)
async def test_it_tells_the_chat_about_the_reset(llm, configure):
    from asgiref.sync import sync_to_async
    from django.contrib.auth.models import User

    from tests.support.scripted_llm import Reply

    configure("sessions", idle_minutes=1)
    owner = await User.objects.acreate(username="owner")
    session = await sync_to_async(session_active_at)(owner, at("2026-01-01 10:00"))
    llm.script(Reply(text="Hello again."))
    frames: list = []

    async def emit(frame) -> None:
        frames.append(frame)

    await converse(session, "good morning", emit)
    assert frames[0].type == "session"
    assert frames[0].reason == "idle for 1 minute"
    fresh = await Session.objects.aget(owner=owner, status="active")
    assert frames[0].session_id == str(fresh.pk)
    assert await Event.objects.filter(session_id=str(fresh.pk), event_type="user_message").aexists()
