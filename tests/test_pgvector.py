"""The team profile's vectors in PostgreSQL (pgvector): kept equal to the stored
ones on every write, searched per owner and agent, scored as the numpy index
scores them, forgotten with their rows, and the memory search in one statement."""

from __future__ import annotations

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.history import Actor
from memory import fulltext, recording, vector_index
from memory.forgetting import forget_events
from memory.models import Event, ForgottenEvent
from memory.pgvector import queries as pgvector
from memory.pgvector import schema
from memory.search import SearchHit, search_memory
from memory.system_checks import pgvector_installed
from memory.vector_index import NumpyIndex, index_for
from memory.vectors import EMBEDDING_DIM, pack

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="pgvector is the team profile's (PostgreSQL)"
)


def unit(seed: int, near: np.ndarray | None = None, noise: float = 1.0) -> np.ndarray:
    vector = np.random.default_rng(seed).normal(size=EMBEDDING_DIM).astype(np.float32)
    if near is not None:
        vector = near + noise * vector / np.linalg.norm(vector)
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def say(owner, text, vector, session="s1", speaker="Ann", kind="user_message", agent="main"):
    event = recording.record(
        owner, session, kind, {"content": text, "speaker": speaker}, embed=False, agent=agent
    )
    Event.objects.filter(pk=event.pk).update(embedding=pack(vector), embedded_at=timezone.now())
    return event


def stored_vector(event) -> np.ndarray | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT embedding_vec::text FROM events WHERE id = %s", [event.pk])
        text = cursor.fetchone()[0]
    return None if text is None else np.array(text.strip("[]").split(","), dtype=np.float32)


def test_it_keeps_the_vector_column_equal_to_the_stored_vector_on_every_write(alice):
    first, second = unit(1), unit(2)
    event = say(alice, "hello", first)
    assert np.array_equal(stored_vector(event), first)
    event.refresh_from_db()
    event.embedding = pack(second)
    event.save()  # the model's own write path
    assert np.array_equal(stored_vector(event), second)
    # A vector that cannot be read is cleared for the embedding jobs, the write kept.
    Event.objects.filter(pk=event.pk).update(embedding=b"not a vector", text="kept")
    event.refresh_from_db()
    assert (event.embedding, event.embedded_at, event.text) == (None, None, "kept")
    assert event.embedding_error == schema.CORRUPT
    assert stored_vector(event) is None


def test_it_searches_only_the_owners_agent_and_holds_nothing_in_process(alice, bob):
    query = unit(0)
    mine = say(alice, "mine", unit(1, query, 0.6))
    say(alice, "another agent's", query, agent="other")
    for n in range(40):  # bob's are all nearer than alice's
        say(bob, f"bob {n}", unit(100 + n, query, 0.1))
    hits = index_for(alice.pk).search(query, 10)
    assert [i for i, _ in hits] == [mine.pk]
    assert hits[0][1] == pytest.approx(float(unit(1, query, 0.6) @ query), abs=1e-5)
    assert len(index_for(bob.pk).search(query, 10)) == 10
    assert not vector_index._event_indexes.indexes  # no process holds vectors


def test_it_scores_as_the_numpy_index_does_with_each_turns_neighbours(alice):
    query = unit(0)
    for s, session in enumerate(("s1", "s2")):
        for n in range(12):
            speaker = ("Ann", "Bob")[n % 2]
            say(alice, f"{session} {n}", unit(50 * s + n + 1, query, 1.5), session, speaker)
    numpy_index, pg_index = NumpyIndex(alice.pk, "main"), index_for(alice.pk)
    for contextual in (False, True):
        expected = numpy_index.search(query, 10, contextual=contextual)
        found = pg_index.search(query, 10, contextual=contextual)
        assert [i for i, _ in found] == [i for i, _ in expected]
        assert [s for _, s in found] == pytest.approx([s for _, s in expected], abs=1e-5)
        ids = [i for i, _ in expected[:3]]
        scores = pg_index.query(query).scores(ids, contextual=contextual)
        assert scores == pytest.approx(numpy_index.query(query).scores(ids, contextual), abs=1e-5)


def test_it_fuses_both_branches_in_one_statement_as_in_process(alice, bob):
    query = unit(0)
    texts = ["the lentil soup recipe", "a bicycle in the garage", "soup for dinner", "weather"]
    for n, text in enumerate(texts * 3):
        say(alice, text, unit(n + 1, query, 1.0 + n / 10), speaker=("Ann", "Bob")[n % 2])
    say(bob, "bob's soup", query)
    with CaptureQueriesContext(connection) as queries:
        hits = search_memory(alice, "lentil soup", k=8, query_vector=query, files=False)
    searches = [q["sql"] for q in queries.captured_queries if "to_tsquery" in q["sql"]]
    assert len(searches) == 1 and "<=>" in searches[0]
    # The same fusion computed in process from the numpy index's scores.
    numpy_query = NumpyIndex(alice.pk, "main").query(query)
    expected = search_memory(
        alice, "lentil soup", k=8, query_vector=query, files=False, compared=numpy_query
    )
    assert all(isinstance(hit, SearchHit) for hit in hits)
    assert [hit.score for hit in hits] == pytest.approx([hit.score for hit in expected], abs=1e-5)
    assert {hit.event.owner_id for hit in hits} == {alice.pk}
    # Ties (the same words) go by id, every time.
    tied = search_memory(alice, "recipe", k=8, branch="lexical", files=False)
    assert len({hit.score for hit in tied}) < len(tied)
    assert tied == sorted(tied, key=lambda hit: (-hit.score, hit.event.pk))
    again = search_memory(alice, "lentil soup", k=8, query_vector=query, files=False)
    assert [hit.event.pk for hit in again] == [hit.event.pk for hit in hits]


def words_rows() -> dict[int, tuple[int, str, str]]:
    """The full-text half's narrow table: id → (owner, agent, document)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, owner_id, agent, document::text FROM {fulltext.WORDS_TABLE}")
        return {row[0]: row[1:] for row in cursor.fetchall()}


def bm25_figures_hold() -> bool:
    """Each memory's stored length is its document's, and each owner's totals are
    the sums of their memories (memory.pgvector.schema.BM25_FUNCTION)."""
    with connection.cursor() as cursor:
        length = schema.DOCUMENT_LENGTH.format(document="document")
        cursor.execute(f"SELECT count(*) FROM {fulltext.WORDS_TABLE} WHERE length <> {length}")
        wrong = cursor.fetchone()[0]
        cursor.execute(
            f"SELECT owner_id, agent, count(*), sum(length) FROM {fulltext.WORDS_TABLE} "
            "GROUP BY owner_id, agent"
        )
        summed = set(cursor.fetchall())
        cursor.execute(f"SELECT owner_id, agent, memories, length FROM {fulltext.WORDS_TOTALS}")
        kept = set(cursor.fetchall())
    return wrong == 0 and summed == kept


def test_it_keeps_the_full_text_table_equal_to_the_events_on_every_write(
    alice, bob, transactional_db
):
    soup, tool = say(alice, "lentil soup", unit(1)), say(alice, "ls", unit(2), kind="tool_call")
    assert set(words_rows()) == {soup.pk}  # memories only, as search_document
    assert bm25_figures_hold()
    Event.objects.filter(pk=soup.pk).update(search_key="Ann: bicycle repairs today")
    assert "bicycl" in words_rows()[soup.pk][2] and "soup" not in words_rows()[soup.pk][2]
    assert bm25_figures_hold()
    Event.objects.filter(pk=soup.pk).update(owner=bob, agent="other")
    assert words_rows()[soup.pk][:2] == (bob.pk, "other")
    assert bm25_figures_hold()  # alice's totals gone with her last memory, bob's made
    assert search_memory(alice, "bicycle", branch="lexical", files=False) == []
    Event.objects.filter(pk=tool.pk).update(event_type="user_message")  # becomes a memory
    assert set(words_rows()) == {soup.pk, tool.pk}
    Event.objects.filter(pk=soup.pk).update(importance=0.9)  # a column it does not copy
    Event.objects.filter(pk=tool.pk).delete()
    assert set(words_rows()) == {soup.pk}
    assert bm25_figures_hold()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE events CASCADE")  # as the test runner's flush does
    assert words_rows() == {}
    assert bm25_figures_hold()
    # What the events held before the table existed is copied when migrating.
    kept = say(alice, "the garden shed", unit(3))
    call_command("migrate", "memory", "0014", verbosity=0)
    try:
        assert not fulltext_table_exists()
    finally:
        call_command("migrate", "memory", verbosity=0)
    assert set(words_rows()) == {kept.pk}
    assert bm25_figures_hold()  # computed for what was there when migrating
    assert [h.event.pk for h in search_memory(alice, "garden", branch="lexical")] == [kept.pk]


def fulltext_table_exists() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [fulltext.WORDS_TABLE])
        return cursor.fetchone()[0]


def test_it_forgets_a_vector_with_its_row_and_logs_nothing(alice):
    query = unit(0)
    kept, forgotten = say(alice, "kept", unit(1, query, 1.0)), say(alice, "forgotten", query)
    index = index_for(alice.pk)
    assert [i for i, _ in index.search(query, 5)] == [forgotten.pk, kept.pk]
    forget_events(alice, [forgotten.pk], Actor.user(alice))
    assert [i for i, _ in index.search(query, 5)] == [kept.pk]
    assert not ForgottenEvent.objects.exists()


def test_it_names_the_package_when_the_extension_is_missing(db):
    assert pgvector_installed() == []
    major = connection.cursor().connection.info.server_version // 10000
    problem = schema.missing_extension(connection, extension="vector_not_installed")
    assert problem is not None and f"postgresql-{major}-pgvector" in problem


def test_it_backfills_stored_vectors_when_migrating(alice, transactional_db):
    event = say(alice, "stored before pgvector", unit(3))
    call_command("migrate", "memory", "0013", verbosity=0)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_proc WHERE proname = 'neotask_unpack_vector'")
            assert cursor.fetchone()[0] == 0
    finally:
        call_command("migrate", "memory", verbosity=0)
    assert np.array_equal(stored_vector(event), unit(3))
    assert [i for i, _ in index_for(alice.pk).search(unit(3), 1)] == [event.pk]


def test_it_scans_iteratively_set_once_per_connection_or_in_the_callers_transaction(
    transactional_db,
):
    settings = "SELECT current_setting('hnsw.iterative_scan'), current_setting('hnsw.ef_search')"
    ours = [("relaxed_order", str(pgvector.EF_SEARCH))]

    def defaults() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT current_setting('hnsw.iterative_scan', true), "
                "current_setting('hnsw.ef_search', true)"
            )
            iterative, ef_search = cursor.fetchone()  # pgvector's (none before it loads)
        return iterative in ("off", "", None) and ef_search in ("40", "", None)

    connection.close()  # a new session has the server's defaults
    with CaptureQueriesContext(connection) as queries:
        assert pgvector.run(settings, {}) == ours
        assert pgvector.run(settings, {}) == ours
    assert len(queries) == 3  # set once, then each query alone
    connection.close()
    assert defaults()
    assert pgvector.run(settings, {}) == ours  # set again for the new session
    # In a caller's transaction, set in it (SET LOCAL): its rollback would undo a
    # session's setting unseen.
    connection.close()
    with transaction.atomic():
        assert pgvector.run(settings, {}) == ours
    assert defaults()


def test_it_compares_a_small_owner_exactly_whatever_the_planner_would_choose(alice, monkeypatch):
    say(alice, "one", unit(1))
    say(alice, "two", unit(2))
    index = index_for(alice.pk)
    assert index.exact() == pgvector.EXACT
    monkeypatch.setattr(pgvector, "EXACT_BELOW", 2)  # an owner of many rows: HNSW's
    with CaptureQueriesContext(connection) as queries:
        assert index.exact() == ""
    assert not queries  # the rows are counted once a minute per process
    monkeypatch.undo()
    params = index.params(pgvector.as_literal(unit(1)), nearest=10)

    def plan(exact: str) -> str:
        sql = pgvector.NEAREST.format(table="events", thread="", exact=exact)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")  # as misleading statistics would
            cursor.execute("SET LOCAL enable_bitmapscan = off")
            cursor.execute(f"EXPLAIN {sql}", params)
            return " ".join(row[0] for row in cursor.fetchall())

    # Through HNSW, a few rows among many may not be reached before the scan's
    # limit (hnsw.max_scan_tuples); read whole and sorted, all of them are.
    assert "events_embedding_hnsw" not in plan(pgvector.EXACT)
    hits = index.search(unit(1), 10)
    assert len(hits) == 2 and hits[0][0] == Event.objects.get(owner=alice, text="one").pk
