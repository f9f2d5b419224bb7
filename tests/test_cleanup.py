from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from django_q.models import Schedule

from memory import recording
from memory.models import Event
from sessions_app import chat, cleanup
from sessions_app.models import Session


def idle_session(owner: Any, days: float, *texts: str, archived: bool = False) -> Session:
    """A chat last used `days` ago, holding one event per text."""
    session = chat.start_chat(owner)
    session.title = f"idle {days} days"
    session.save()
    for text in texts:
        recording.record(owner, str(session.pk), "user_message", {"content": text})
    status = Session.Status.ARCHIVED if archived else Session.Status.ACTIVE
    Session.objects.filter(pk=session.pk).update(
        last_activity_at=timezone.now() - timedelta(days=days), status=status
    )
    session.refresh_from_db()
    return session


def events_of(session: Session) -> int:
    return Event.objects.filter(session_id=str(session.pk)).count()


def run_cleanup(*args: str) -> str:
    stdout = StringIO()
    call_command("cleanup_sessions", *args, stdout=stdout)
    return stdout.getvalue()


def test_it_finds_sessions_idle_for_n_days(alice):
    old = idle_session(alice, 31)
    idle_session(alice, 29.9)
    found = cleanup.candidate_sessions(Session.objects.owned_by(alice), 30)
    assert list(found) == [old]
    assert set(cleanup.candidate_sessions(Session.objects.owned_by(alice), 7)) == set(
        Session.objects.all()
    )


def test_it_keeps_archived_sessions_unless_included(alice):
    idle = idle_session(alice, 40)
    archived = idle_session(alice, 40, archived=True)
    owned = Session.objects.owned_by(alice)
    assert list(cleanup.candidate_sessions(owned, 30)) == [idle]
    assert set(cleanup.candidate_sessions(owned, 30, include_archived=True)) == {idle, archived}


def test_it_measures_events_and_their_size(alice):
    session = idle_session(alice, 40, "hello", "world!")
    empty = idle_session(alice, 50)
    found = cleanup.measure(cleanup.candidate_sessions(Session.objects.owned_by(alice), 30))
    by_session = {candidate.session: candidate for candidate in found}
    assert by_session[empty].events == 0 and by_session[empty].size == 0
    assert by_session[session].events == 2
    # The text plus the JSON of the data: {"content": "hello"} and so on.
    assert by_session[session].size >= len("hello" + "world!") * 2


def test_it_lists_candidates_in_a_dry_run_and_deletes_nothing(alice):
    old = idle_session(alice, 45, "old news")
    output = run_cleanup("--dry-run")
    assert old.key in output and "idle 45 days" in output and "1 events" in output
    assert "Would remove 1 session (1 event" in output
    assert Session.objects.filter(pk=old.pk).exists() and events_of(old) == 1


def test_it_deletes_idle_sessions_with_their_events(alice, bob):
    old = idle_session(alice, 45, "old news", "more")
    recent = idle_session(alice, 1, "fresh")
    bobs = idle_session(bob, 45, "bob's")

    output = run_cleanup("--user", "alice")

    assert f"removed {old.key}" in output and "Removed 1 session (2 events" in output
    assert not Session.objects.filter(pk=old.pk).exists() and events_of(old) == 0
    assert events_of(recent) == 1 and events_of(bobs) == 1

    run_cleanup("--days", "30")
    assert not Session.objects.filter(pk=bobs.pk).exists()


def test_it_deletes_archived_sessions_only_when_asked(alice):
    archived = idle_session(alice, 90, "compacted", archived=True)
    run_cleanup()
    assert Session.objects.filter(pk=archived.pk).exists()
    output = run_cleanup("--include-archived")
    assert "archived" in output
    assert not Session.objects.filter(pk=archived.pk).exists() and events_of(archived) == 0


def test_it_uses_the_configured_number_of_days(alice, configure):
    configure("sessions", cleanup_after_days=60)
    old = idle_session(alice, 45)
    run_cleanup()
    assert Session.objects.filter(pk=old.pk).exists()
    run_cleanup("--days", "44")
    assert not Session.objects.filter(pk=old.pk).exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--days", "soon"], "invalid int value: 'soon'"),
        (["--days", "-3"], "--days must be at least 1, not -3"),
        (["--days", "0"], "--days must be at least 1"),
        (["--user", "carol"], 'There is no user "carol"'),
    ],
)
def test_it_rejects_bad_options(db, args, message):
    with pytest.raises(CommandError, match=message):
        run_cleanup(*args)


def test_it_lists_the_users_candidates_on_the_page(alice, alice_client, bob):
    idle = idle_session(alice, 45, "hello there")
    archived = idle_session(alice, 50, archived=True)
    recent = idle_session(alice, 2)
    bobs = idle_session(bob, 45)

    page = alice_client.get("/sessions/cleanup/").content.decode()

    assert "<html" in page and "Clean up old sessions" in page
    assert f'value="{idle.pk}"' in page and f'value="{archived.pk}"' in page
    assert "Archived transcripts" in page
    assert f'value="{recent.pk}"' not in page and f'value="{bobs.pk}"' not in page
    partial = alice_client.get("/sessions/cleanup/", HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in partial and f'value="{idle.pk}"' in partial


def test_it_says_when_there_is_nothing_to_clean_up(alice, alice_client):
    idle_session(alice, 1)
    assert "Nothing to clean up." in alice_client.get("/sessions/cleanup/").content.decode()


def test_it_links_the_cleanup_page_from_the_sessions_list(alice, alice_client):
    assert 'href="/sessions/cleanup/"' in alice_client.get("/sessions/").content.decode()


def test_it_asks_for_confirmation_then_deletes(alice, alice_client):
    first = idle_session(alice, 45, "one", "two")
    second = idle_session(alice, 60, "three", archived=True)
    kept = idle_session(alice, 70, "kept")
    selected = {"session": [str(first.pk), str(second.pk)]}

    confirm = alice_client.post("/sessions/cleanup/confirm/", selected, HTTP_HX_REQUEST="true")

    text = confirm.content.decode()
    assert "Delete 2 sessions with 3 events? This cannot be undone." in text
    assert "<html" not in text and f'value="{kept.pk}"' not in text
    assert Session.objects.filter(pk__in=[first.pk, second.pk]).count() == 2

    done = alice_client.post("/sessions/cleanup/delete/", selected, HTTP_HX_REQUEST="true")

    text = done.content.decode()
    assert "Removed 2 sessions with 3 events" in text and first.key in text
    assert not Session.objects.filter(pk__in=[first.pk, second.pk]).exists()
    assert events_of(first) == 0 and events_of(second) == 0 and events_of(kept) == 1


def test_it_works_without_htmx_too(alice, alice_client):
    old = idle_session(alice, 45, "one")
    confirm = alice_client.post("/sessions/cleanup/confirm/", {"session": [str(old.pk)]})
    assert "<html" in confirm.content.decode() and "Delete 1 session with 1 event?" in (
        confirm.content.decode()
    )
    done = alice_client.post("/sessions/cleanup/delete/", {"session": [str(old.pk)]})
    assert "<html" in done.content.decode() and "Removed 1 session" in done.content.decode()


def test_it_never_deletes_another_users_session(alice, alice_client, bob):
    bobs = idle_session(bob, 45, "bob's secret")
    values = {"session": [str(bobs.pk)]}

    confirm = alice_client.post("/sessions/cleanup/confirm/", values, HTTP_HX_REQUEST="true")
    assert "Nothing was selected" in confirm.content.decode()
    assert "1 selected item did not name an idle session of yours" in confirm.content.decode()

    done = alice_client.post("/sessions/cleanup/delete/", values, HTTP_HX_REQUEST="true")
    assert "Nothing was deleted." in done.content.decode()
    assert "bob&#x27;s secret" not in done.content.decode()
    assert Session.objects.filter(pk=bobs.pk).exists() and events_of(bobs) == 1


def test_it_ignores_garbage_and_sessions_in_use_again(alice, alice_client):
    old = idle_session(alice, 45, "one")
    recent = idle_session(alice, 1, "two")
    values = {"session": ["junk", "", "123", "' OR 1=1 --", str(old.pk), str(recent.pk)]}

    done = alice_client.post("/sessions/cleanup/delete/", values)

    assert done.status_code == 200
    assert "Removed 1 session" in done.content.decode()
    assert "5 selected items did not name an idle session of yours" in done.content.decode()
    assert Session.objects.filter(pk=recent.pk).exists()
    nothing = alice_client.post("/sessions/cleanup/confirm/", {"session": ["junk"]})
    assert nothing.status_code == 200 and "Nothing was selected" in nothing.content.decode()


def test_it_deletes_only_by_post(alice, alice_client):
    old = idle_session(alice, 45)
    assert alice_client.get(f"/sessions/cleanup/delete/?session={old.pk}").status_code == 405
    assert alice_client.get(f"/sessions/cleanup/confirm/?session={old.pk}").status_code == 405
    assert Session.objects.filter(pk=old.pk).exists()


def test_it_requires_a_login(client, alice):
    assert client.get("/sessions/cleanup/")["Location"].startswith("/accounts/login/")


def test_it_installs_the_daily_schedule_once(db):
    assert Schedule.objects.filter(name=cleanup.CLEANUP_SCHEDULE).exists()  # by migrate
    cleanup.install_schedule(sender=None)
    schedule = Schedule.objects.get(name=cleanup.CLEANUP_SCHEDULE)
    assert schedule.func == "sessions_app.cleanup.scheduled_cleanup"
    assert schedule.schedule_type == Schedule.DAILY and schedule.repeats == -1


def test_it_only_reports_by_default_when_scheduled(alice, caplog):
    old = idle_session(alice, 45, "old")
    with caplog.at_level("INFO", logger="sessions_app.cleanup"):
        summary = cleanup.scheduled_cleanup()
    assert "1 session (1 event" in summary and "would be removed" in summary
    assert summary in caplog.text
    assert Session.objects.filter(pk=old.pk).exists() and events_of(old) == 1


def test_it_deletes_when_scheduled_and_configured_to(alice, configure):
    configure("sessions", cleanup_delete=True)
    old = idle_session(alice, 45, "old")
    archived = idle_session(alice, 45, "compacted", archived=True)
    recent = idle_session(alice, 3)
    assert cleanup.scheduled_cleanup().startswith("removed 1 session")
    assert not Session.objects.filter(pk=old.pk).exists() and events_of(old) == 0
    assert Session.objects.filter(pk__in=[archived.pk, recent.pk]).count() == 2
