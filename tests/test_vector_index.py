"""The in-process vector index computes what its definitions say, however it
stores and reads the vectors: one column per vector, loaded in batches, the k
best picked without partitioning every score."""

from __future__ import annotations

import numpy as np
import pytest
from django.utils import timezone

from memory import recording, vector_index
from memory.models import Event
from memory.vector_index import NEIGHBOUR_WEIGHT, NumpyIndex
from memory.vector_query import SAMPLE_STEP, best_rows
from memory.vectors import EMBEDDING_DIM, pack, unpack


def in_full_order(scores: np.ndarray, k: int, min_score: float) -> list[int]:
    """The definition: every row above the floor, best first, ties in row order."""
    above = [row for row in range(len(scores)) if scores[row] > min_score]
    return sorted(above, key=lambda row: (-scores[row], row))[:k]


@pytest.mark.parametrize("size", [0, 1, 49, 50, 51, 1_599, 1_600, 20_000])
@pytest.mark.parametrize("k", [1, 50, 56])
def test_the_k_best_rows_are_those_of_a_full_sort(size, k):
    rng = np.random.default_rng(size * 100 + k)
    scores = (rng.standard_normal(size) * 0.2).astype(np.float32)
    for layout in (scores, np.sort(scores), np.round(scores, 1)):  # sorted; many ties
        for floor in (-1.0, 0.0, 0.3):
            assert best_rows(layout, k, floor).tolist() == in_full_order(layout, k, floor)
    assert best_rows(scores, 0, -1.0).tolist() == []


def test_a_cut_guessed_too_high_still_finds_the_k_best():
    # Every sampled row (each SAMPLE_STEP-th) scores high, almost no other does.
    scores = np.zeros(10_000, dtype=np.float32)
    scores[::SAMPLE_STEP] = 1.0
    scores[5] = 0.5
    best = best_rows(scores, 400, -1.0)
    assert best.tolist() == in_full_order(scores, 400, -1.0)
    assert 5 in best.tolist()


def contextual_cosines(vectors: dict[int, np.ndarray], threads, query) -> dict[int, float]:
    """Each event's cosine to its own vector plus NEIGHBOUR_WEIGHT times its
    speaker's previous and next turns' in the session (memory.vector_index)."""
    cosines = {}
    for turns in threads:
        for place, event_id in enumerate(turns):
            contextual = vectors[event_id].astype(np.float64)
            for other in (place - 1, place + 1):
                if 0 <= other < len(turns):
                    contextual = contextual + NEIGHBOUR_WEIGHT * vectors[turns[other]]
            cosines[event_id] = float(contextual @ query / np.linalg.norm(contextual))
    return cosines


def test_an_index_loaded_in_batches_scores_as_the_definitions_say(alice, bob, monkeypatch):
    monkeypatch.setattr(vector_index, "PUT_BATCH", 7)  # threads cross batches
    rng = np.random.default_rng(11)
    threads: dict[tuple[str, str], list[int]] = {}
    for number in range(40):
        session, speaker = f"s{number % 3}", "Ann" if number % 4 < 2 else "Bo"
        data = {"content": f"turn {number}", "speaker": speaker}
        event = recording.record(alice, session, "user_message", data, embed=False)
        vector = rng.standard_normal(EMBEDDING_DIM).astype(np.float32)
        Event.objects.filter(pk=event.pk).update(
            embedding=pack(vector / np.linalg.norm(vector)), embedded_at=timezone.now()
        )
        threads.setdefault((session, speaker), []).append(event.pk)
    theirs = recording.record(bob, "s0", "user_message", {"content": "x", "speaker": "Ann"})
    Event.objects.filter(pk=theirs.pk).update(
        embedding=pack(np.ones(EMBEDDING_DIM, dtype=np.float32)), embedded_at=timezone.now()
    )
    vectors = {
        event_id: unpack(blob)
        for event_id, blob in Event.objects.filter(owner=alice).values_list("id", "embedding")
    }
    query = rng.standard_normal(EMBEDDING_DIM).astype(np.float32)
    query /= np.linalg.norm(query)
    expected = contextual_cosines(vectors, threads.values(), query)

    index = NumpyIndex(alice.pk, "main")
    compared = index.query(query)
    assert compared.count == 40  # alice's vectors only
    ranked = compared.top(40, contextual=True)
    assert [event_id for event_id, _ in ranked] == sorted(expected, key=lambda i: -expected[i])
    assert dict(ranked) == pytest.approx(expected, abs=1e-5)
    plain = {event_id: float(vector @ query) for event_id, vector in vectors.items()}
    assert dict(compared.top(40)) == pytest.approx(plain, abs=1e-5)
    assert compared.scores(list(expected), contextual=True) == pytest.approx(expected, abs=1e-5)

    # Removing a turn joins its neighbours, and their contextual vectors follow.
    gone = threads[("s0", "Ann")].pop(1)
    index.remove([gone])
    del vectors[gone]
    expected = contextual_cosines(vectors, threads.values(), query)
    assert dict(index.search(query, 39, contextual=True)) == pytest.approx(expected, abs=1e-5)
