"""Search keys (memory.search_keys): what an event is found by, apart from what it shows."""

from __future__ import annotations

from io import StringIO

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from memory import recording, search_keys, tasks
from memory.embeddings import embed_text
from memory.models import Event
from memory.search import search_memory
from memory.vector_index import NumpyIndex, index_for
from memory.vector_query import VectorQuery
from memory.vectors import pack, unpack


def say(owner, text, session="s1", event_type="user_message", **data):
    return recording.record(owner, session, event_type, {"content": text, **data})


def test_it_keys_an_event_by_its_speaker_and_the_turn_before(alice):
    say(alice, "How old is Lily turning this year?", speaker="Ben")
    answer = say(alice, "Six, on April 9th.", event_type="assistant_response", speaker="Tom")
    assert answer.text == "Six, on April 9th."  # what is shown stays the text
    assert answer.speaker == "Tom"
    assert answer.search_key == "Tom: Six, on April 9th."
    assert answer.search_context == "How old is Lily turning this year?"
    assert answer.key_version == search_keys.KEY_VERSION
    # Without a named speaker the key is the text itself.
    plain = say(alice, "thanks!")
    assert plain.search_key == "thanks!" and plain.search_context == "Six, on April 9th."


def test_it_finds_an_answer_by_the_question_it_answered(alice):
    say(alice, "How old is your daughter turning this year?")
    answer = say(alice, "Six, on April 9th.", event_type="assistant_response")
    say(alice, "Lovely, I baked a lemon cake yesterday", session="other")
    tasks.embed_missing()
    hits = search_memory(alice, "How old is the daughter turning?", branch="lexical")
    assert answer in [hit.event for hit in hits]
    fused = search_memory(alice, "How old is the daughter turning?")
    assert answer in [hit.event for hit in fused[:2]]


def test_it_never_takes_the_context_from_another_user(alice, bob):
    say(bob, "Bob's secret: the vault code is 7781", session="shared-id")
    first = say(alice, "Hello there", session="shared-id")
    assert first.search_context == ""
    assert not search_memory(alice, "vault code", branch="lexical")


def test_it_keys_bulk_writes_in_order(alice):
    say(alice, "the turn before the import")
    events = [
        Event(owner=alice, session_id="s1", event_type="user_message", text="first imported"),
        Event(owner=alice, session_id="s1", event_type="tool_result", text="tool output"),
        Event(owner=alice, session_id="s1", event_type="assistant_response", text="second"),
    ]
    Event.set_keys_in_order(events)
    Event.objects.bulk_create(events)
    contexts = [e.search_context for e in Event.objects.filter(pk__in=[e.pk for e in events])]
    # Tool output is no turn of the conversation: the answer's context is the question.
    # Nor is it searched: it gets no context, as `record` keys it.
    assert contexts == ["the turn before the import", "", "first imported"]


def test_it_stores_the_vector_of_the_key(alice):
    event = say(alice, "I finally ran the Lisbon half marathon", speaker="Maya")
    tasks.embed_missing()
    event.refresh_from_db()
    stored = unpack(event.embedding)
    assert np.dot(stored, embed_text("Maya: I finally ran the Lisbon half marathon")) > 0.999
    assert np.dot(stored, embed_text(event.text)) < 0.99


def test_it_does_not_keep_the_text_vector_for_a_named_speaker(alice):
    text = "My sister lives in Oslo"
    data = {"content": text, "speaker": "Maya"}
    event = recording.record(alice, "s1", "user_message", data, vector=embed_text(text))
    event.refresh_from_db()
    assert event.embedding is None  # queued instead: the vector must be the key's


def old_recipe(owner, text, session="s1", **data):
    """An event as written before keys existed: no key, version 0, a vector of its text."""
    event = say(owner, text, session, **data)
    Event.objects.filter(pk=event.pk).update(
        speaker="",
        search_key="",
        search_context="",
        key_version=0,
        embedding=pack(embed_text(text)),
        embedded_at=timezone.now(),
    )
    return Event.objects.get(pk=event.pk)


def test_it_rekeys_an_old_recipe_in_the_background_keeping_the_old_vector_meanwhile(alice):
    old_recipe(alice, "What did the vet say about Biscuit?", speaker="Ben")
    answer = old_recipe(alice, "Biscuit needs a lighter diet, nothing else.", speaker="Alice")
    old_vector = bytes(answer.embedding)
    # Before the sweep: found by its text's words and by its old vector.
    assert answer in [h.event for h in search_memory(alice, "lighter diet", branch="lexical")]
    assert answer in [h.event for h in search_memory(alice, "lighter diet", branch="vector")]
    assert tasks.needs_embedding().count() == 2

    assert tasks.embed_missing() == 2
    answer.refresh_from_db()
    assert answer.key_version == search_keys.KEY_VERSION
    assert answer.search_key == "Alice: Biscuit needs a lighter diet, nothing else."
    assert answer.search_context == "What did the vet say about Biscuit?"
    assert bytes(answer.embedding) != old_vector
    assert not tasks.needs_embedding().exists()
    hits = search_memory(alice, "what did the vet say", branch="lexical")
    assert answer in [h.event for h in hits]  # now also by the question before it


def test_it_leaves_every_event_searchable_when_rekeying_stops_halfway(alice):
    events = [old_recipe(alice, f"note {n} about the zebra{n} project") for n in range(40)]
    stopped_after = tasks.embed_missing(limit=tasks.BATCH_SIZE)  # then the worker dies
    assert stopped_after == tasks.BATCH_SIZE
    versions = set(Event.objects.values_list("key_version", flat=True))
    assert versions == {0, search_keys.KEY_VERSION}  # halfway
    assert not Event.objects.filter(embedding__isnull=True).exists()
    for event in events:
        by_words = search_memory(alice, f"zebra{events.index(event)}", branch="lexical")
        assert event in [h.event for h in by_words]
    vector = embed_text("zebra project")
    assert len(index_for(alice.pk).search(vector, 100)) == 40


def test_embed_backfill_counts_stale_keys(alice):
    old_recipe(alice, "an old note")
    out, err = StringIO(), StringIO()
    call_command("embed_backfill", stdout=out, stderr=err)
    assert "Embedded 1 events." in out.getvalue()
    assert "1/1" in err.getvalue()  # the progress bar


def test_the_contextual_index_is_the_same_whatever_the_embedding_order(alice):
    turns = [
        say(alice, text, speaker=speaker)
        for text, speaker in [
            ("I started pottery classes", "Ann"),
            ("Nice, which studio?", "Bo"),
            ("The one on Elm street, Tuesdays", "Ann"),
            ("I might join you", "Bo"),
            ("Bring clay-proof clothes", "Ann"),
        ]
    ]
    for order in ([0, 1, 2, 3, 4], [4, 2, 0, 3, 1]):
        index = NumpyIndex(alice.pk, "main")
        for position in order:
            event = Event.objects.get(pk=turns[position].pk)
            if event.embedding is None:
                tasks.embed_events([event.pk])
                event.refresh_from_db()
            thread = (event.session_id, event.event_type, event.speaker)
            index.put(event.pk, unpack(event.embedding), thread)
        query = embed_text("where are the pottery classes?")
        ranked = index.search(query, 5, contextual=True)
        if order[0] == 0:
            expected = ranked
        assert [i for i, _ in ranked] == [i for i, _ in expected]
        assert [s for _, s in ranked] == pytest.approx([s for _, s in expected], abs=1e-5)
        scored = index.query(query).scores([turns[2].pk], contextual=True)
        assert scored[turns[2].pk] == pytest.approx(dict(ranked)[turns[2].pk], abs=1e-5)
    # Ann's middle turn carries her turns around it, not Bo's.
    plain = dict(index.search(query, 5))
    assert dict(ranked)[turns[2].pk] != pytest.approx(plain[turns[2].pk])


def test_another_users_turns_never_enter_a_contextual_vector(alice, bob):
    mine = say(alice, "I keep bees on the roof", session="same-id")
    tasks.embed_missing()
    query = embed_text("rooftop beekeeping")
    alone = dict(index_for(alice.pk).search(query, 5, contextual=True))
    # Bob writes the same speaker's turns around it, under the same session id.
    say(bob, "Rooftop beekeeping is my passion", session="same-id")
    say(bob, "Beekeeping on rooftops, again", session="same-id")
    tasks.embed_missing()
    after = dict(index_for(alice.pk).search(query, 5, contextual=True))
    assert after == pytest.approx(alone) and list(after) == [mine.pk]


def test_one_query_vector_is_compared_with_the_index_once_for_every_question(alice, monkeypatch):
    first = say(alice, "The boiler was serviced in March")
    tasks.embed_missing()
    index = index_for(alice.pk)
    query = embed_text("when was the boiler serviced?")
    expected = index.search(query, 5, contextual=True)
    compared = index.query(query)
    assert compared.top(5, contextual=True) == expected  # its one product

    def compared_again(self):
        raise AssertionError("the vector was compared with the index again")

    with monkeypatch.context() as patched:
        patched.setattr(VectorQuery, "compute", compared_again)
        # The plain nearest and the scores of given rows, from that product.
        assert [event_id for event_id, _ in compared.top(5)] == [first.pk]
        assert compared.scores([first.pk], contextual=True) == dict(expected)
    newer = say(alice, "The boiler broke down again in May")
    tasks.embed_missing()
    ids = [event_id for event_id, _ in index.search(query, 5, contextual=True)]
    assert set(ids) == {first.pk, newer.pk}  # the next query sees the change


@pytest.mark.skipif(
    connection.vendor != "sqlite",
    reason="common-word pruning is SQLite's (PostgreSQL ranks the newest matches of every word)",
)
def test_words_common_to_most_memories_are_left_out_of_the_lexical_branch(alice):
    from memory import fulltext

    events = [
        Event(owner=alice, session_id=f"s{n}", event_type="user_message", text=f"weather {n}")
        for n in range(300)
    ]
    Event.set_keys_in_order(events)
    Event.objects.bulk_create(events)
    rare = say(alice, "the weather in Tromsø was glacial", session="trip")
    hits = fulltext.search(alice.pk, "main", "weather glacial", 50, memories=301)
    assert [event_id for event_id, _ in hits] == [rare.pk]  # "weather" is in every one
    # Without the count of memories, every word is searched.
    assert len(fulltext.search(alice.pk, "main", "weather glacial", 50)) == 50
    # A query of common words only still searches by its rarest.
    assert len(fulltext.search(alice.pk, "main", "weather", 50, memories=301)) == 50


def test_a_word_found_too_often_to_rank_is_ranked_among_its_newest_matches(alice, bob, monkeypatch):
    from memory import fulltext

    def rank_at_most(matches: int) -> None:  # each profile's bound
        monkeypatch.setattr(fulltext, "SCORED_MATCHES", matches)
        monkeypatch.setattr(fulltext, "POSTGRES_SCORED_MATCHES", matches)

    rank_at_most(20)
    for owner in (alice, bob):  # bob's matches are all newer than alice's
        events = [
            Event(owner=owner, session_id=f"s{n}", event_type="user_message", text=f"cold rain {n}")
            for n in range(60)
        ]
        Event.set_keys_in_order(events)
        Event.objects.bulk_create(events)
    newest = set(
        Event.objects.filter(owner=alice).order_by("-id").values_list("id", flat=True)[:20]
    )
    # Alone, and as the rarest of words that are all too common.
    for query in ("rain", "cold rain"):
        hits = fulltext.search(alice.pk, "main", query, 50, memories=60)
        assert {event_id for event_id, _ in hits} == newest
    rank_at_most(60)
    assert len(fulltext.search(alice.pk, "main", "rain", 50, memories=60)) == 50


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the scope token is SQLite's")
@pytest.mark.django_db
def test_the_scope_token_is_the_one_the_triggers_store():
    from memory import fulltext

    stored = fulltext.SCOPE_SQL.format(row="t")
    with connection.cursor() as cursor:
        for owner_id, agent in [(7, "main"), (123, "Ärztin 助手")]:
            cursor.execute(
                f"SELECT {stored} FROM (SELECT %s AS owner_id, %s AS agent) t", [owner_id, agent]
            )
            assert cursor.fetchone()[0] == fulltext.scope_token(owner_id, agent)
