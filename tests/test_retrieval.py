from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from memory import recording, tasks
from memory.models import Event
from memory.retrieval import get_context
from memory.search import best_events, search_memory
from memory.turns import NEIGHBOUR_SHARE
from memory.working import working_memory
from tests.support.profiles import in_process_vectors


def say(owner, text, session="s1", event_type="user_message", agent="main", **fields):
    return recording.record(owner, session, event_type, {"content": text}, agent=agent, **fields)


@pytest.fixture
def history(alice):
    """An old session about pets and travel, a new one about work."""
    old = [
        say(alice, "My dog Biscuit is a golden retriever", session="old"),
        say(alice, "We are flying to Lisbon on June 3rd", session="old"),
        say(alice, "I can't stand cilantro in anything", session="old", importance=0.9),
        say(alice, "The quarterly report is due Friday", session="old"),
    ]
    recent = [say(alice, f"work note number {n}", session="s1") for n in range(12)]
    tasks.embed_missing()
    return old, recent


def test_it_combines_recency_relevance_and_similarity(alice, history):
    old, recent = history
    context = get_context(alice, "s1", "What kind of dog is Biscuit?")
    assert [item.event for item in context.branch("recency")] == recent[-10:]
    assert [item.event for item in context.branch("relevance")] == [old[2]]
    similar = [item.event for item in context.branch("similarity")]
    assert similar[0] == old[0]
    assert all(item.score > 0.65 for item in context.branch("similarity"))
    ids = [item.event.pk for item in context.items]
    assert len(ids) == len(set(ids))  # de-duplicated


def test_it_honours_the_configured_limits(alice, history, configure):
    configure(
        "memory", recency_limit=3, relevance_limit=0, similarity_limit=1, similarity_threshold=0.0
    )
    context = get_context(alice, "s1", "travel plans")
    assert len(context.branch("recency")) == 3
    assert context.branch("relevance") == []
    assert len(context.branch("similarity")) == 1


def test_it_keeps_a_long_turn_whole_in_recency(alice, configure):
    configure("memory", recency_limit=4)
    user = say(alice, "do many things")
    steps = [say(alice, f"step {n}", event_type="tool_result") for n in range(8)]
    recent = get_context(alice, "s1", "").branch("recency")
    assert [item.event for item in recent] == [user, *steps]


def test_it_still_recalls_events_without_embeddings(alice):
    say(alice, "Pinned: my passport number ends in 42", session="old", importance=1.0)
    say(alice, "unembedded but recent")
    context = get_context(alice, "s1", "passport")
    assert [i.event.text for i in context.branch("recency")] == ["unembedded but recent"]
    assert "passport" in context.branch("relevance")[0].event.text
    hits = search_memory(alice, "passport number")
    assert hits and "passport" in hits[0].event.text  # found by the lexical branch


@pytest.mark.parametrize(
    "query",
    ["", "   ", "x" * 100_000, "'; DROP TABLE events; --", '" OR 1=1 NEAR(a b) * ^', "🙂🙂🙂"],
)
def test_it_survives_odd_queries(alice, history, query):
    get_context(alice, "s1", query)
    search_memory(alice, query)
    assert Event.objects.count() == 16


def test_it_never_returns_another_users_or_agents_memories(alice, bob, history):
    say(bob, "Bob's dog is a golden retriever named Biscuit too", session="b", importance=1.0)
    say(alice, "The research agent knows about dogs", session="r", agent="research", importance=1.0)
    tasks.embed_missing()
    say(bob, "My dog sleeps all day on the beach", session="b2")
    tasks.embed_missing()
    context = get_context(bob, "b", "What breed is my dog?")
    owners = {item.event.owner_id for item in context.items}
    assert owners == {bob.pk}
    assert context.branch("search"), "the search branch ran, on bob's memories only"
    for branch in ("fused", "vector", "lexical", "recency"):
        hits = search_memory(bob, "golden retriever dog Biscuit", branch=branch)
        assert hits and {hit.event.owner_id for hit in hits} == {bob.pk}, branch
    alice_context = get_context(alice, "s1", "dogs research")
    assert all(item.event.agent == "main" for item in alice_context.items)
    assert all(hit.event.agent == "main" for hit in search_memory(alice, "research dogs"))


def test_it_fuses_both_branches_and_finds_unembedded_events_by_words(alice, history):
    old, _ = history
    fresh = say(alice, "The plumber Zoltan comes on Tuesday", session="new")  # no vector yet
    hits = search_memory(alice, "golden retriever")
    assert hits[0].event == old[0]
    assert set(hits[0].branches) == {"vector", "lexical"}
    # The best of both branches (1.0), plus a share of its neighbour's (memory.turns).
    assert 1.0 <= hits[0].score <= 1.0 + NEIGHBOUR_SHARE
    # Found by meaning only: no word in common, so the lexical branch adds nothing.
    assert set(search_memory(alice, "canine pet breed")[0].branches) == {"vector"}
    hits = search_memory(alice, "when does Zoltan come?")
    assert fresh in [hit.event for hit in hits[:3]]
    assert next(h for h in hits if h.event == fresh).branches.keys() == {"lexical"}
    paraphrase = search_memory(alice, "which food do I dislike?", branch="vector")
    assert paraphrase[0].event == old[2]
    assert search_memory(alice, "Lisbon", branch="lexical")[0].event == old[1]


def test_it_reads_no_event_again_that_the_caller_holds(alice, bob, history):
    old, recent = history
    someone_elses = say(bob, "golden retriever", session="old")
    plain = search_memory(alice, "golden retriever dog", k=5, files=False)
    held = [*old, *recent, someone_elses]
    with CaptureQueriesContext(connection) as queries:
        hits = search_memory(alice, "golden retriever dog", k=5, files=False, known=held)
    assert [hit.event.pk for hit in hits] == [hit.event.pk for hit in plain]
    assert all(any(hit.event is event for event in held) for hit in hits)
    assert not [query for query in queries if '"events"."data"' in query["sql"]]


def test_it_reads_only_the_wanted_of_the_k_best_and_only_as_many_as_are_shown(alice, bob):
    events = [say(alice, f"note {n}") for n in range(6)]
    gone = say(bob, "not alice's")  # among the scores, but not of `owned`
    scores = {gone.pk: 1.0, **{e.pk: 0.9 - n / 10 for n, e in enumerate(events)}}
    owned = Event.objects.filter(owner=alice)
    skipped = {events[1].pk}

    def wanted(event_id):
        return event_id not in skipped

    # As if the k best were read and then filtered: the unwanted still count among the k.
    assert best_events(owned, scores, 3, wanted=wanted) == [events[0], events[2]]
    with CaptureQueriesContext(connection) as queries:
        shown = best_events(owned, scores, 5, wanted=wanted, shown=2)
    assert shown == [events[0], events[2]]
    asked = {
        int(found)
        for query in queries
        for found in re.search(r'"id" IN \(([^)]*)\)', query["sql"]).group(1).split(",")
    }
    assert asked == {gone.pk, events[0].pk, events[1].pk, events[2].pk}  # not the rest
    known = {events[0].pk: events[0], events[2].pk: events[2]}
    with CaptureQueriesContext(connection) as queries:
        assert best_events(owned, scores, 5, known, wanted, shown=2) == [events[0], events[2]]
    assert len(queries) == 2  # the missing one and the unwanted one, then nothing more


def test_its_search_branch_shows_what_filtering_the_search_would(alice, history, configure):
    from memory.search import SearchHit

    configure("memory", search_limit=2, search_min_similarity=0.2)
    for query in ("When do we fly to Lisbon?", "golden retriever", "report due Friday cilantro"):
        context = get_context(alice, "s1", query)
        shown = context.branch("search")
        before = [item for item in context.items if item.branch != "search"]
        seen = {item.event.pk for item in before}
        hits = search_memory(alice, query, k=2 + len(seen), files=False)
        fresh = [
            hit
            for hit in hits
            if isinstance(hit, SearchHit) and hit.event.pk not in seen and hit.bears_on_query(0.2)
        ][:2]
        assert [(i.event.pk, i.score) for i in shown] == [(h.event.pk, h.score) for h in fresh]


def test_relevance_brings_the_most_important_then_the_newest(alice, configure):
    configure("memory", relevance_limit=2, similarity_limit=0, search_limit=0)
    older = say(alice, "older pinned", session="a", importance=0.9)
    newer = say(alice, "newer pinned", session="b", importance=0.9)
    say(alice, "less important", session="c", importance=0.85)
    top = say(alice, "the most important", session="d", importance=1.0)
    Event.objects.filter(pk__in=[older.pk, newer.pk]).update(created_at=newer.created_at)
    relevant = [item.event for item in get_context(alice, "s1", "x").branch("relevance")]
    assert relevant == [top, newer]  # a tie in date goes to the later event


def test_relevance_reads_its_events_in_an_index_order_without_sorting_them(alice):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's plan")
    important = (
        Event.objects.filter(owner=alice, agent="main", importance__gte=0.8)
        .exclude(pk__in=[1, 2])
        .order_by("-importance", "-created_at", "-id")[:5]
    )
    sql, params = important.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        plan = " ".join(row[-1] for row in cursor.fetchall())
    assert "event_relevance" in plan and "TEMP B-TREE" not in plan


def test_it_rebuilds_working_memory_when_another_process_wrote(alice):
    say(alice, "first")
    assert [e.text for e in working_memory.recent(alice, "s1", 10)] == ["first"]
    rebuilds = working_memory.rebuilds
    say(alice, "second")  # through this process: the cache is updated, not rebuilt
    assert [e.text for e in working_memory.recent(alice, "s1", 10)] == ["first", "second"]
    assert working_memory.rebuilds == rebuilds
    # Another process writes straight to the database.
    Event.objects.create(owner=alice, session_id="s1", event_type="user_message", text="third")
    assert [e.text for e in working_memory.recent(alice, "s1", 10)] == ["first", "second", "third"]
    assert working_memory.rebuilds == rebuilds + 1


@override_settings()
def test_it_caps_working_memory(alice, configure):
    configure("memory", working_memory_cap=5)
    working_memory.clear()
    for n in range(8):
        say(alice, f"m{n}")
    assert [e.text for e in working_memory.recent(alice, "s1", 50)] == [
        f"m{n}" for n in range(3, 8)
    ]


def test_it_recalls_the_top_of_memory_search_as_a_fourth_branch(alice, history, configure):
    old, recent = history
    configure("memory", similarity_limit=0, relevance_limit=0)
    context = get_context(alice, "s1", "When do we fly to Lisbon?")
    found = [item.event for item in context.branch("search")]
    assert found[0] == old[1]
    assert not set(found) & set(recent[-10:])  # what recency holds is not repeated
    assert len(found) <= 5  # search_limit
    assert context.recalled[0].branch == "search"  # shown to the model, with its date
    configure("memory", search_limit=0)
    assert not get_context(alice, "s1", "When do we fly to Lisbon?").branch("search")


def test_it_leaves_out_search_hits_that_share_nothing_with_the_message(alice, history, configure):
    configure("memory", search_min_similarity=0.99)
    assert not get_context(alice, "s1", "Quantum chromodynamics?").branch("search")
    configure("memory", search_min_similarity=-1.0)
    assert get_context(alice, "s1", "Quantum chromodynamics?").branch("search")


@in_process_vectors
def test_it_gathers_a_turns_memory_in_a_bounded_number_of_queries(alice, history, monkeypatch):
    from memory.embeddings import embed_text
    from memory.vector_query import VectorQuery

    query = "When do we fly to Lisbon?"
    vector = embed_text(query)
    get_context(alice, "s1", query, query_vector=vector)  # the index loaded
    compute = VectorQuery.compute
    comparisons = []

    def counted(self):
        comparisons.append(self)
        compute(self)

    monkeypatch.setattr(VectorQuery, "compute", counted)
    with CaptureQueriesContext(connection) as queries:
        context = get_context(alice, "s1", query, query_vector=vector)
    assert context.branch("similarity") and context.branch("search")
    assert len(comparisons) == 1  # the similarity branch and search share one product
    # The session's opening events, working memory's check, relevance, the index's
    # sync (the events forgotten on demand, the vectors stored), similarity (whether
    # its hits exist, their rows), search (whether its hits exist, the words'
    # counts, BM25, the rows not read yet).
    assert len(queries) <= 11


def test_it_asks_the_full_text_query_while_the_index_compares_the_vector(
    alice, history, monkeypatch
):
    import threading

    from memory import fulltext
    from memory.vector_query import VectorQuery

    asked = threading.Event()
    compute, search = VectorQuery.compute, fulltext.search

    def after_the_words(self):
        assert asked.wait(5), "the product was awaited before the full-text query was asked"
        compute(self)

    def words(*args, **kwargs):
        asked.set()
        return search(*args, **kwargs)

    monkeypatch.setattr(VectorQuery, "compute", after_the_words)
    monkeypatch.setattr(fulltext, "search", words)
    context = get_context(alice, "s1", "When do we fly to Lisbon?")
    assert context.branch("similarity") and context.branch("search")


@pytest.mark.django_db(transaction=True)  # the runner's threads close their connections
def test_a_chat_turn_checks_working_memory_with_its_sessions_row(alice, llm):
    """The runner reads working memory's marker with the session: a turn after one
    of this process's needs no rebuild, and one after another process wrote to
    the session rebuilds and shows what it wrote."""
    from asgiref.sync import async_to_sync

    from sessions_app import chat, runner
    from tests.support.scripted_llm import Reply

    session = chat.start_chat(alice)

    def send(text: str) -> None:
        outcome = async_to_sync(runner.submit)(alice, session.key, text, wait=True)
        assert outcome is not None and outcome.status == "completed"

    llm.script(Reply(text="One."), Reply(text="Two."), Reply(text="Three."))
    send("first")
    rebuilds = working_memory.rebuilds
    send("second")
    assert working_memory.rebuilds == rebuilds
    # Another process's answer, written straight to the database.
    Event.objects.create(
        owner=alice,
        session_id=str(session.pk),
        event_type="assistant_response",
        data={"content": "Aside."},
        text="Aside.",
    )
    send("third")
    assert working_memory.rebuilds == rebuilds + 1
    said = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] != "system"]
    assert said == ["first", "One.", "second", "Two.", "Aside.", "third"]
