from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone
from django_q.models import Schedule

from agent.consolidation_job import SCHEDULE, run
from memory import recording
from memory.consolidation import claim
from memory.models import Event, Fact
from tests.support.consolidation import answer, chat_yesterday
from tests.support.scripted_llm import Reply


def test_it_turns_yesterdays_chat_into_a_summary_and_facts(alice, llm):
    events = chat_yesterday(alice)
    llm.script(answer("Alice moved to Porto.", ("place", "home_city", "Porto")))
    report = run()
    assert (report.sessions, report.events, report.summaries, report.facts_added) == (1, 2, 1, 1)
    summary = Event.objects.get(event_type="summary")
    assert summary.text == "Alice moved to Porto." and summary.importance == 0.8
    assert summary.session_id == "s1" and summary.data["first_event_id"] == events[0].pk
    assert Fact.objects.get(owner=alice, key="home_city").value == "Porto"
    # The originals are kept and marked.
    for event in events:
        event.refresh_from_db()
        assert event.consolidated_at is not None and event.consolidation_claim is None
    assert "I moved to Porto" in llm.requests[0]["messages"][1]["content"]
    # A second run finds nothing to do.
    assert run().events == 0
    assert len(llm.requests) == 1


def test_it_leaves_recent_conversation_alone(alice, llm):
    recording.record(alice, "s1", "user_message", {"content": "said just now"})
    assert run().events == 0
    assert llm.requests == []


def test_it_merges_facts_without_duplicates(alice, llm):
    Fact.objects.create(owner=alice, category="place", key="home_city", value="Lisbon")
    Fact.objects.create(
        owner=alice, category="pet", key="dog", value="A golden retriever named Biscuit"
    )
    chat_yesterday(alice)
    llm.script(
        answer(
            "Moved; still has the dog.",
            ("place", "home_city", "Porto"),  # same key: updated
            ("animal", "biscuit", "a golden retriever named Biscuit"),  # same meaning: skipped
            ("work", "employer", "Acme"),  # new
            ("work", "employer", "Acme"),  # repeated in the same answer
        )
    )
    report = run()
    assert (report.facts_added, report.facts_updated, report.facts_skipped) == (1, 1, 2)
    assert Fact.objects.get(owner=alice, key="home_city").value == "Porto"
    assert not Fact.objects.filter(key="biscuit").exists()
    assert Fact.objects.filter(owner=alice, key="employer").count() == 1


@pytest.mark.parametrize(
    "reply",
    [Reply(status=500, error="down"), Reply(text="no JSON here"), Reply(text='{"facts": []}')],
)
def test_it_leaves_nothing_half_done_when_the_model_fails(alice, llm, reply):
    events = chat_yesterday(alice)
    llm.script(reply)
    report = run()
    assert report.summaries == 0 and len(report.failures) == 1
    assert not Event.objects.filter(event_type="summary").exists()
    for event in events:
        event.refresh_from_db()
        assert event.consolidated_at is None and event.consolidation_claim is None
    llm.script(answer("Second try works."))
    assert run().summaries == 1


def test_it_never_gives_the_same_events_to_two_workers(alice):
    chat_yesterday(alice)
    first_token, first = claim("s1", alice.pk)
    _, second = claim("s1", alice.pk)
    assert len(first) == 2 and second == []
    # A crashed worker's claim expires.
    Event.objects.filter(consolidation_claim=first_token).update(
        consolidation_claimed_at=timezone.now() - timedelta(hours=1)
    )
    _, third = claim("s1", alice.pk)
    assert len(third) == 2


def test_it_consolidates_each_users_sessions_apart(alice, bob, llm):
    chat_yesterday(alice, texts=("Alice's secret plan",))
    chat_yesterday(bob, texts=("Bob's own news",))
    llm.script(answer("One."), answer("Two."))
    run()
    for owner, words in ((alice, "Alice's secret"), (bob, "Bob's own")):
        summary = Event.objects.get(owner=owner, event_type="summary")
        request = next(r for r in llm.requests if words in r["messages"][1]["content"])
        assert ("Bob" in request["messages"][1]["content"]) == (owner == bob)
        assert summary.owner == owner


def test_it_runs_from_the_command_line(alice, llm):
    chat_yesterday(alice)
    llm.script(answer("Summary.", ("place", "home_city", "Porto")))
    out = StringIO()
    call_command("consolidate", "--user", "alice", stdout=out)
    assert "Consolidated 2 messages of 1 sessions into 1 summaries" in out.getvalue()
    with pytest.raises(Exception, match='no user "nobody"'):
        call_command("consolidate", "--user", "nobody")


def test_it_is_scheduled_every_interval(db):
    schedule = Schedule.objects.get(name=SCHEDULE)
    assert schedule.func == "agent.consolidation_job.scheduled_consolidation"
    assert schedule.minutes == 6 * 60
