"""What a memory's neighbours and speaker add to its fused score (memory.turns), on
both profiles: the turns next to a strong find, in its own session only, and the
turns of the speaker a query names."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from memory import recording
from memory.models import Event
from memory.search import SearchHit, search_memory
from memory.turns import DATE_BONUS, NEIGHBOUR_SHARE, SPEAKER_BONUS, with_turn_cues
from memory.when import named_days

pytestmark = pytest.mark.django_db


def say(owner, session: str, text: str, speaker: str = "", **fields) -> Event:
    data = {"content": text, **({"speaker": speaker} if speaker else {})}
    return recording.record(owner, session, "user_message", data, embed=False, **fields)


def test_a_turn_gains_a_share_of_its_best_neighbour_in_its_session(alice, bob):
    question = say(alice, "s1", "What colour is the kayak?")
    answer = say(alice, "s1", "Bright red, with a yellow stripe.")
    elsewhere = say(alice, "s2", "The weather was fine.")  # the next id, another session
    say(bob, "s1", "bob's turn in a session of the same name")
    after = say(alice, "s1", "See you at the lake.")
    scores = {question.pk: 1.0, answer.pk: 0.2, elsewhere.pk: 0.2, after.pk: 0.1}
    cued = with_turn_cues(alice, "main", scores, "kayak colour")
    assert cued[question.pk] == pytest.approx(1.0 + NEIGHBOUR_SHARE * 0.2)
    assert cued[answer.pk] == pytest.approx(0.2 + NEIGHBOUR_SHARE * 1.0)  # the better one
    assert cued[elsewhere.pk] == pytest.approx(0.2)  # adjacent ids, not adjacent turns
    assert cued[after.pk] == pytest.approx(0.1 + NEIGHBOUR_SHARE * 0.2)


def test_a_neighbour_is_the_next_memory_not_a_forgotten_or_tool_event(alice):
    question = say(alice, "s1", "What colour is the kayak?")
    recording.record(alice, "s1", "tool_call", {"name": "ls"}, embed=False)
    say(alice, "s1", "something forgotten", importance=0.0)
    answer = say(alice, "s1", "Bright red.")
    cued = with_turn_cues(alice, "main", {question.pk: 1.0, answer.pk: 0.0}, "kayak")
    assert cued[answer.pk] == pytest.approx(NEIGHBOUR_SHARE)


def test_a_turn_of_the_speaker_the_query_names_gains_the_bonus(alice):
    maya = say(alice, "s1", "the kayak is red", speaker="Maya Lind")
    theo = say(alice, "s1", "the kayak is blue", speaker="Theo")
    unnamed = say(alice, "s2", "the kayak is green")
    scores = {maya.pk: 0.5, theo.pk: 0.5, unnamed.pk: 0.5}
    cued = with_turn_cues(alice, "main", scores, "What did maya lind's kayak look like?")
    share = NEIGHBOUR_SHARE * 0.5
    assert cued == pytest.approx(
        {maya.pk: 0.5 + share + SPEAKER_BONUS, theo.pk: 0.5 + share, unnamed.pk: 0.5}
    )
    # Part of a name is not the name; a word inside another word is not it either.
    for query in ("What did Maya say?", "Theodore's kayak"):
        cued = with_turn_cues(alice, "main", scores, query)
        assert cued[maya.pk] == cued[theo.pk]


def test_a_turn_said_on_a_day_the_query_names_gains_the_bonus(alice):
    def said(day: datetime, session: str) -> Event:
        return say(alice, session, "we painted the fence", created_at=day)

    june, july = (
        said(datetime(2023, 6, 3, 20, tzinfo=UTC), "a"),
        said(datetime(2023, 7, 9, 9, tzinfo=UTC), "b"),
    )
    scores = {june.pk: 0.5, july.pk: 0.5}
    for query, gains in [
        ("What did we paint on 3 June, 2023?", {june.pk}),
        ("What did we paint on June 3rd, 2023?", {june.pk}),
        ("What did we paint in July 2023?", {july.pk}),
        ("What did we paint in 2023?", {june.pk, july.pk}),
        ("What did we paint on 4 June, 2023?", set()),
        ("What did we paint in June?", set()),  # no year: no one day
    ]:
        cued = with_turn_cues(alice, "main", scores, query)
        assert cued == {i: 0.5 + DATE_BONUS * (i in gains) for i in scores}, query


@pytest.mark.parametrize(
    ("text", "days"),
    [
        ("on 1 February, 2023", [(date(2023, 2, 1), date(2023, 2, 1))]),
        (
            "October 13, 2023 and May 2024",
            [
                (date(2023, 10, 13), date(2023, 10, 13)),
                (date(2024, 5, 1), date(2024, 5, 31)),
            ],
        ),
        ("in february 2024", [(date(2024, 2, 1), date(2024, 2, 29))]),
        ("on 31 February, 2023", [(date(2023, 2, 1), date(2023, 2, 28))]),  # the month
        ("on 2023-02-01 or 2023-02-30", [(date(2023, 2, 1), date(2023, 2, 1))]),
        ("in 0000, at 12:30, on 1/2/2023, Friday", []),
    ],
)
def test_it_reads_only_dates_written_out_in_full(text, days):
    assert named_days(text) == days


def test_memory_search_ranks_the_turn_beside_a_strong_find_first(alice):
    # The same words twice, each the first turn of its chat: equal by BM25, and the
    # older first by id. Only the newer is followed by a turn that matches well.
    older = say(alice, "s1", "we talked about the harbour")
    newer = say(alice, "s2", "we talked about the harbour")
    say(alice, "s2", "the harbour ferry leaves the harbour at nine")
    hits = search_memory(alice, "harbour", files=False)
    ranked = [hit.event.pk for hit in hits if isinstance(hit, SearchHit)]
    assert ranked.index(newer.pk) < ranked.index(older.pk)
    lexical = search_memory(alice, "harbour", branch="lexical", files=False)
    assert [h.event.pk for h in lexical].index(older.pk) < [h.event.pk for h in lexical].index(
        newer.pk
    )
