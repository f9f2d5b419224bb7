"""The memory search's lexical branch ranks by BM25 on both profiles: SQLite's
FTS5, and PostgreSQL's in SQL over the stored documents (memory.fulltext). What
a rarer word and a shorter memory are worth; ts_rank_cd, PostgreSQL's ranking
before, weighs neither, and these tests fail under it."""

from __future__ import annotations

import pytest
from django.db import connection

from memory import recording
from memory.models import Event
from memory.search import SearchHit, search_memory

pytestmark = pytest.mark.django_db


def remember(owner, text: str):
    # A chat of its own each: a memory's context (the turn before it) counts too.
    session = f"s{Event.objects.count()}"
    return recording.record(
        owner, session, "user_message", {"content": text, "speaker": "Ann"}, embed=False
    )


def found(owner, query: str) -> list[str]:
    hits = search_memory(owner, query, branch="lexical", files=False)
    return [hit.event.text for hit in hits if isinstance(hit, SearchHit)]


def test_a_rare_word_counts_for_more_than_a_common_one(alice):
    for number in range(8):
        remember(alice, f"coffee at the harbour, morning {number}")
    remember(alice, "kayak at the harbour, morning 8")
    hits = found(alice, "coffee kayak")
    assert hits[0] == "kayak at the harbour, morning 8"
    assert len(hits) == 9


def test_the_same_word_counts_for_more_in_a_shorter_memory(alice):
    long = (
        "we talked about the weather, the football results, a film, dinner plans and, "
        "briefly, the greenhouse, before the train left the station"
    )
    remember(alice, long)  # first: ties go by id, so only the length puts it second
    remember(alice, "the greenhouse needs new glass")
    remember(alice, "nothing about plants here")
    assert found(alice, "greenhouse") == ["the greenhouse needs new glass", long]


def test_another_owners_memories_do_not_change_the_ranking_on_postgresql(alice, bob):
    # IDF and lengths are the owner's own: bob's many "kayak" memories would make
    # the word common if they were counted (PostgreSQL keeps totals per owner).
    if connection.vendor != "postgresql":
        pytest.skip("FTS5 counts its whole index: on the one-person profile, one person's")
    for number in range(8):
        remember(alice, f"coffee at the harbour, morning {number}")
        remember(bob, f"kayak at the river, evening {number}")
    remember(alice, "kayak at the harbour, morning 8")
    assert found(alice, "coffee kayak")[0] == "kayak at the harbour, morning 8"
    assert all("river" not in text for text in found(alice, "kayak"))


def test_words_are_stemmed_as_fts5_stems_them(alice):
    # Porter's stemmer (FTS5's) makes "news" and "new" one word and "painted" and
    # "painting" another; PostgreSQL's 'english' (Porter2) keeps "news" apart, and
    # the profiles ranked differently (docs/memory.md).
    remember(alice, "Any news about Oma?")
    remember(alice, "We painted the fence")
    remember(alice, "nothing here")
    assert found(alice, "new") == ["Any news about Oma?"]
    assert found(alice, "painting") == ["We painted the fence"]
