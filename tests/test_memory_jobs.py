from __future__ import annotations

import time
from datetime import timedelta
from io import StringIO

import numpy as np
import pytest
from django.core.management import call_command
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.models import Schedule

from memory import recording, tasks
from memory.fulltext import WORDS_TABLE
from memory.models import Event
from memory.vectors import unpack
from tests.support.records import take_queued_tasks


def record(owner, text, event_type="user_message", session="s1"):
    return recording.record(owner, session, event_type, {"content": text})


def test_it_queues_an_embedding_for_every_stored_message(alice, django_capture_on_commit_callbacks):
    take_queued_tasks()
    with django_capture_on_commit_callbacks(execute=True):
        event = record(alice, "I adopted a cat called Miso")
        record(alice, "", event_type="assistant_response")  # nothing to embed
        recording.record(alice, "s1", "session_start", {"content": "New session"})
    [task] = take_queued_tasks()
    assert (task["func"], task["args"]) == ("memory.tasks.embed_events", ([event.pk],))


@pytest.mark.django_db(transaction=True)  # the requests are sent from a thread of their own
def test_it_sends_the_requests_of_a_moment_as_one_job(alice, monkeypatch):
    take_queued_tasks()
    requests = tasks.EmbeddingRequests(window=1.0)  # ample for three inserts
    monkeypatch.setattr(tasks, "EMBEDDING_REQUESTS", requests)
    first = [record(alice, f"Message {n}").pk for n in range(3)]
    wait_for_jobs(1)
    later = record(alice, "A message after the first job went out").pk
    wait_for_jobs(2)
    jobs = [(task["func"], task["args"]) for task in take_queued_tasks()]
    assert jobs == [
        ("memory.tasks.embed_events", (first,)),
        ("memory.tasks.embed_events", ([later],)),
    ]


def wait_for_jobs(count, seconds=10):
    broker = get_broker()
    deadline = time.monotonic() + seconds
    while broker.queue_size() < count:
        assert time.monotonic() < deadline, f"fewer than {count} jobs were queued"
        time.sleep(0.02)


def test_it_embeds_an_event(alice):
    event = record(alice, "My sister Maya lives in Lisbon")
    assert tasks.embed_event(event.pk) == 1
    event.refresh_from_db()
    vector = unpack(event.embedding)
    assert vector.shape == (384,)
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-4
    assert event.embedded_at is not None and event.embedding_error is None
    assert tasks.embed_event(event.pk) == 0  # already done: nothing written twice


def test_it_sweeps_up_everything_missing_in_batches(alice, bob):
    for number in range(40):
        record(alice if number % 2 else bob, f"message number {number} about gardening")
    record(alice, "a tool said this", event_type="tool_result")
    seen: list[int] = []
    assert tasks.embed_missing(progress=seen.append) == 41
    assert seen == [32, 9]
    assert not tasks.needs_embedding().exists()
    assert tasks.embed_missing() == 0


def test_its_sweep_leaves_a_fresh_message_to_its_job(alice):
    fresh = record(alice, "just said")
    forgotten = record(alice, "said two minutes ago, its job lost")
    Event.objects.filter(pk=forgotten.pk).update(created_at=timezone.now() - timedelta(minutes=2))
    assert tasks.sweep() == 1
    assert list(tasks.needs_embedding().values_list("id", flat=True)) == [fresh.pk]


def test_it_records_failures_and_retries_with_backoff(alice, monkeypatch):
    event = record(alice, "this will fail once")

    def broken(texts):
        raise RuntimeError("model exploded")

    monkeypatch.setattr("memory.embeddings.embed_texts", broken)
    assert tasks.embed_missing() == 0
    event.refresh_from_db()
    assert event.embedding is None
    assert event.embedding_error == "RuntimeError: model exploded"
    assert event.embedding_attempts == 1
    assert event.embedding_retry_at > timezone.now() + timedelta(seconds=90)
    assert not tasks.needs_embedding().exists()  # waits for its retry time
    monkeypatch.undo()
    Event.objects.filter(pk=event.pk).update(embedding_retry_at=timezone.now())
    assert tasks.embed_missing() == 1
    event.refresh_from_db()
    assert event.embedding is not None and event.embedding_error is None


def test_it_gives_up_after_the_last_attempt(alice):
    event = record(alice, "hopeless")
    Event.objects.filter(pk=event.pk).update(embedding_attempts=tasks.MAX_ATTEMPTS)
    assert tasks.embed_missing() == 0


def test_it_backfills_from_the_command_line_with_progress(alice):
    for number in range(5):
        record(alice, f"backfill {number}")
    out, err = StringIO(), StringIO()
    call_command("embed_backfill", stdout=out, stderr=err)
    assert "Embedded 5 events" in out.getvalue()
    assert "5/5" in err.getvalue()  # the progress bar
    assert not tasks.needs_embedding().exists()


def test_it_installs_the_sweep_schedule(db):
    schedule = Schedule.objects.get(name=tasks.SWEEP_SCHEDULE)
    assert schedule.func == "memory.tasks.sweep"
    assert schedule.schedule_type == Schedule.MINUTES and schedule.minutes == 1


@pytest.mark.parametrize("blob", [b"", b"\x00" * 10, b"not a vector at all"])
def test_it_skips_a_corrupt_vector_in_search(alice, blob):
    from memory.vector_index import NumpyIndex

    good = record(alice, "good vector")
    tasks.embed_missing()
    bad = record(alice, "bad vector")
    Event.objects.filter(pk=bad.pk).update(embedding=blob, embedded_at=timezone.now())
    index = NumpyIndex(alice.pk, "main")
    hits = index.search(unpack(Event.objects.get(pk=good.pk).embedding), 5)
    assert [event_id for event_id, _ in hits] == [good.pk]
    # Re-queued: the sweep computes a proper vector, and the index picks it up.
    bad.refresh_from_db()
    assert bad.embedding is None and bad.embedding_error == "corrupt vector replaced"
    assert tasks.embed_missing() == 1
    assert len(index.search(unpack(Event.objects.get(pk=good.pk).embedding), 5)) == 2


def test_it_refreshes_the_planner_statistics(alice):
    from django.db import connection

    def analyzed() -> dict[str, int]:  # times each table was analyzed by hand
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT relname, analyze_count FROM pg_stat_user_tables WHERE relname IN (%s, %s)",
                ["events", WORDS_TABLE],
            )
            return dict(cursor.fetchall())

    record(alice, "something to count")
    assert Schedule.objects.filter(name=tasks.ANALYZE_SCHEDULE).exists()
    before = analyzed() if connection.vendor == "postgresql" else {}
    tasks.analyze_database()
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM sqlite_stat1 WHERE tbl = 'events'")
            assert cursor.fetchone()[0] > 0
    else:  # the events and the full-text search's table
        after = analyzed()
        assert all(after[table] == before.get(table, 0) + 1 for table in after), (before, after)
        assert set(after) == {"events", WORDS_TABLE}


def test_a_vector_the_caller_has_is_stored_with_the_event_and_queues_no_job(alice):
    take_queued_tasks()
    vector = np.ones(384, dtype=np.float32) / np.sqrt(384)
    event = recording.record(alice, "s1", "user_message", {"content": "Hi"}, vector=vector)
    event.refresh_from_db()
    assert event.embedded_at is not None
    assert np.allclose(unpack(event.embedding), vector)
    assert take_queued_tasks() == []
