"""The in-process vector indexes stay equal to the database when several workers
write vectors: a vector whose transaction commits after a later-stamped one was
synced is still found, a re-embedded row is replaced in place, and a deleted row
is never a search result."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memory import recording
from memory.files.search import chunk_index_for, forget_chunk_indexes
from memory.models import Event, ForgottenEvent, MemoryChunk, MemoryFile
from memory.vector_index import CHUNKS, NumpyIndex, index_for
from memory.vectors import EMBEDDING_DIM, pack
from tests.support.profiles import in_process_vectors


def axis(number: int) -> np.ndarray:
    vector = np.zeros(EMBEDDING_DIM, dtype=np.float32)
    vector[number] = 1.0
    return vector


def blend(first: int, second: int, weight: float) -> np.ndarray:
    vector = axis(first) + weight * axis(second)
    return vector / np.linalg.norm(vector)


def record(owner, text, session="s1"):
    return recording.record(owner, session, "user_message", {"content": text}, embed=False)


def store_vector(event, vector, stamp) -> None:
    """What an embedding worker's transaction writes."""
    Event.objects.filter(pk=event.pk).update(embedding=pack(vector), embedded_at=stamp)


def test_it_finds_an_event_vector_stamped_first_and_committed_last(alice):
    early, late = record(alice, "stamped first"), record(alice, "stamped second")
    index = NumpyIndex(alice.pk, "main")
    stamped = timezone.now()
    # Worker 2 stamps after worker 1 but commits first, and a query syncs it...
    store_vector(late, axis(1), stamped + timedelta(milliseconds=5))
    assert index.count() == 1
    # ...then worker 1's transaction commits.
    store_vector(early, axis(0), stamped)
    assert index.count() == 2
    assert index.search(axis(0), 1)[0][0] == early.pk


def test_it_replaces_a_re_embedded_event_in_place(alice):
    event = record(alice, "my key changed")
    index = NumpyIndex(alice.pk, "main")
    store_vector(event, axis(0), timezone.now())
    assert index.search(axis(0), 1)[0][1] == pytest.approx(1.0)
    store_vector(event, axis(1), timezone.now())
    assert index.count() == 1
    assert index.search(axis(1), 1) == [(event.pk, pytest.approx(1.0))]


def test_it_never_returns_a_deleted_event_nor_gives_it_a_slot(alice):
    kept, deleted = record(alice, "kept"), record(alice, "deleted")
    index = NumpyIndex(alice.pk, "main")
    store_vector(kept, blend(0, 1, 1.0), timezone.now())
    store_vector(deleted, axis(0), timezone.now())
    assert index.search(axis(0), 1)[0][0] == deleted.pk
    assert index.search(axis(0), 1)[0][0] == deleted.pk
    deleted.delete()
    assert [event_id for event_id, _ in index.search(axis(0), 1)] == [kept.pk]
    assert index.count() == 1
    assert index.query(axis(0)).scores([kept.pk, deleted.pk]).keys() == {kept.pk}


def test_every_question_asked_with_one_query_reads_one_state_of_the_index(alice):
    first, second = record(alice, "first"), record(alice, "second")
    index = NumpyIndex(alice.pk, "main")
    store_vector(first, axis(0), timezone.now())
    compared = index.query(axis(1))
    assert compared.count == 1
    assert [event_id for event_id, _ in compared.top(2)] == [first.pk]
    store_vector(second, axis(1), timezone.now())
    assert index.count() == 2  # the index reads the new vector...
    # ...and the query still answers from the state it was compared with.
    assert [event_id for event_id, _ in compared.top(2)] == [first.pk]
    assert compared.scores([first.pk, second.pk]).keys() == {first.pk}
    assert [event_id for event_id, _ in index.query(axis(1)).top(2)] == [second.pk, first.pk]


def test_a_query_reads_the_rows_again_when_a_deletion_moved_them(alice):
    turns = [record(alice, f"turn {number}") for number in range(3)]
    index = NumpyIndex(alice.pk, "main")
    for number, turn in enumerate(turns):
        store_vector(turn, axis(number), timezone.now())
    compared = index.query(axis(2))
    turns[0].delete()
    index.search(axis(0), 1)  # finds the deletion: the last row moves into its place
    assert compared.scores([turns[2].pk]) == {turns[2].pk: pytest.approx(1.0)}


def test_it_relinks_the_neighbours_of_a_deleted_turn(alice):
    turns = [record(alice, f"turn {number}") for number in range(5)]
    index = NumpyIndex(alice.pk, "main")
    for number, turn in enumerate(turns):
        store_vector(turn, blend(number, 10, 0.2), timezone.now())
    index.search(axis(2), 1)
    turns[2].delete()
    assert turns[2].pk not in dict(index.search(axis(2), 5))
    record(alice, "turn 5")  # linked after the rows moved
    store_vector(Event.objects.latest("id"), blend(5, 10, 0.2), timezone.now())
    ids = list(Event.objects.values_list("id", flat=True))
    fresh = NumpyIndex(alice.pk, "main")
    for query in (axis(1), axis(3), axis(4), axis(10)):
        assert index.query(query).scores(ids, contextual=True) == pytest.approx(
            fresh.query(query).scores(ids, contextual=True)
        )
        found, expected = (dict(i.search(query, 6, contextual=True)) for i in (index, fresh))
        assert found == pytest.approx(expected)


def test_it_forgets_the_stamps_of_settled_rows(alice):
    old, new = record(alice, "an hour ago"), record(alice, "just now")
    store_vector(old, axis(0), timezone.now() - timedelta(hours=1))
    store_vector(new, axis(1), timezone.now())
    index = NumpyIndex(alice.pk, "main")
    assert index.count() == 2
    assert index.window.stamps.keys() == {new.pk}


@pytest.fixture(params=["numpy", "lancedb"])
def chunk_index(request, alice, configure):
    if request.param == "lancedb":
        pytest.importorskip("lancedb", reason='the LanceDB plugin (pip install ".[lancedb]")')
    configure("memory", vector_backend=request.param)
    forget_chunk_indexes()
    yield chunk_index_for(alice.pk, "main")
    forget_chunk_indexes()


def chunk(owner, position: int) -> MemoryChunk:
    file, _ = MemoryFile.objects.get_or_create(owner=owner, agent="main", path="MEMORY.md")
    return MemoryChunk.objects.create(
        owner=owner,
        file=file,
        position=position,
        start_line=position + 1,
        end_line=position + 1,
        text=f"line {position}",
        content_hash=f"{position:064x}",
    )


def store_chunk_vector(row, vector, stamp) -> None:
    MemoryChunk.objects.filter(pk=row.pk).update(embedding=pack(vector), embedded_at=stamp)


def test_it_finds_a_chunk_stamped_first_and_committed_last(alice, chunk_index):
    early, late, edited = chunk(alice, 0), chunk(alice, 1), chunk(alice, 2)
    store_chunk_vector(edited, axis(2), timezone.now() - timedelta(seconds=1))
    stamped = timezone.now()
    store_chunk_vector(late, axis(1), stamped + timedelta(milliseconds=5))
    assert [hit for hit, _ in chunk_index.search(axis(1), 5)] == [late.pk, edited.pk]
    # Worker 1 commits while an edit drops a chunk: the count alone is unchanged.
    store_chunk_vector(early, axis(0), stamped)
    edited.delete()
    assert [hit for hit, _ in chunk_index.search(axis(0), 5)] == [early.pk, late.pk]


def test_it_replaces_a_re_embedded_chunk_in_place(alice, chunk_index):
    row = chunk(alice, 0)
    store_chunk_vector(row, axis(0), timezone.now())
    assert chunk_index.search(axis(0), 1)[0][0] == row.pk
    store_chunk_vector(row, axis(1), timezone.now())
    assert chunk_index.search(axis(1), 5) == [(row.pk, pytest.approx(1.0))]


def test_it_clears_a_corrupt_chunk_vector_for_the_embedding_to_replace(alice, chunk_index):
    good, bad = chunk(alice, 0), chunk(alice, 1)
    store_chunk_vector(good, axis(0), timezone.now())
    MemoryChunk.objects.filter(pk=bad.pk).update(
        embedding=b"not a vector", embedded_at=timezone.now()
    )
    assert [hit for hit, _ in chunk_index.search(axis(0), 5)] == [good.pk]
    bad.refresh_from_db()
    assert (bad.embedding, bad.embedded_at) == (None, None)


@in_process_vectors
def test_a_vector_stored_with_its_event_here_goes_into_the_loaded_index_unread(alice):
    record(alice, "already there")
    index = index_for(alice.pk, "main")
    assert index.count() == 0  # loaded
    event = recording.record(alice, "s1", "user_message", {"content": "new"}, vector=axis(3))
    with CaptureQueriesContext(connection) as queries:
        assert index.search(axis(3), 1) == [(event.pk, pytest.approx(1.0))]
    # The sync saw its stamp and read no vector back.
    assert not [q for q in queries.captured_queries if '"events"."embedding"' in q["sql"]]


def test_one_statement_reads_both_the_new_vectors_and_the_forgotten_rows(alice):
    kept, doomed, late = (record(alice, text) for text in ("kept", "doomed", "late"))
    store_vector(kept, axis(0), timezone.now())
    store_vector(doomed, axis(1), timezone.now())
    index = NumpyIndex(alice.pk, "main")
    assert index.count() == 2
    with CaptureQueriesContext(connection) as idle:
        assert index.count() == 2
    assert len(idle) == 1  # nothing new: the one question, nothing read back
    # Another process forgets one row and a worker embeds another.
    ForgottenEvent.objects.create(owner=alice, agent="main", event_id=doomed.pk)
    doomed.delete()
    store_vector(late, axis(2), timezone.now())
    with CaptureQueriesContext(connection) as changed:
        assert index.count() == 2
    assert len(changed) == 2  # the one question, then the new vector's row
    assert set(index.position) == {kept.pk, late.pk}


def test_a_hit_the_caller_has_just_read_is_not_looked_up_again(alice):
    read, other = record(alice, "in the context"), record(alice, "elsewhere")
    store_vector(read, axis(0), timezone.now())
    store_vector(other, blend(0, 1, 1.0), timezone.now())
    index = NumpyIndex(alice.pk, "main")
    query = index.query(axis(0))
    query.exist([read.pk])
    with CaptureQueriesContext(connection) as known:
        assert [i for i, _ in query.top(1)] == [read.pk]
    assert len(known) == 0
    other.delete()  # a hit nobody read is still looked up, and dropped if gone
    with CaptureQueriesContext(connection) as unknown:
        assert [i for i, _ in query.top(2)] == [read.pk]
    assert len(unknown) >= 1 and other.pk not in index.position


def test_one_statement_reads_a_chunk_index_s_new_vectors_and_its_count(alice):
    kept, edited, late = chunk(alice, 0), chunk(alice, 1), chunk(alice, 2)
    store_chunk_vector(kept, axis(0), timezone.now())
    store_chunk_vector(edited, axis(1), timezone.now())
    index = NumpyIndex(alice.pk, "main", CHUNKS)
    assert index.count() == 2
    with CaptureQueriesContext(connection) as idle:
        assert index.count() == 2
    assert len(idle) == 1  # the new stamps and the count, in one question
    # An edit of the file drops a chunk; a worker embeds another.
    edited.delete()
    store_chunk_vector(late, axis(2), timezone.now())
    with CaptureQueriesContext(connection) as changed:
        assert index.count() == 2
    # The question, the new vector's row, and (three held, two counted) the ids.
    assert len(changed) == 3
    assert set(index.position) == {kept.pk, late.pk}
