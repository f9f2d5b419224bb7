"""What a memory's place in its conversation adds to its fused score (memory.search).

A conversation answers over several turns: "How old is she turning?" — "Six, on
April 9th", "I painted a horse" — "Love the horse painting!". The evidence for a
question is often the turn next to the one that matches it best, so a memory
gains `NEIGHBOUR_SHARE` of the better fused score of the memories just before and
just after it in its session (among the search's candidates; a turn whose
neighbours were not found gains nothing). And a memory whose speaker the query
names ("What did Maya say about…", a name the event's own data gives: an imported
group chat, the evaluation's named people) gains `SPEAKER_BONUS`; one said on a
day the query names ("on 1 February, 2023", "in July 2023": memory.when) gains
`DATE_BONUS`.

Chosen with `memory_eval` on a fold of LoCoMo's development split (two of its
three conversations) and confirmed on the third, held out, and on our own
dataset (docs/memory.md): neighbours alone helped one fold and hurt the other,
the speaker alone the reverse; both together raised both folds and kept ours.
Named days raised both folds (ours names none).
"""

from __future__ import annotations

from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from core.ownership import Owner
from memory.fulltext import WORD
from memory.models import Event
from memory.when import named_days

NEIGHBOUR_SHARE = 0.3
SPEAKER_BONUS = 0.1
DATE_BONUS = 0.3


def with_turn_cues(
    owner: Owner, owned: QuerySet, scores: dict[int, float], query: str
) -> dict[int, float]:
    """`scores` (event id → fused score, the events of `owned`, the owner's memories
    searched) with what each event's neighbours, speaker and day add: one query,
    for the candidates only."""
    if not scores:
        return scores
    previous = (
        owned.filter(session_id=OuterRef("session_id"), id__lt=OuterRef("id"))
        .order_by("-id")
        .values("id")[:1]
    )
    # The candidates by their ids alone (they are `owned`'s): with `owned`'s own
    # filters SQLite walked the owner's memories by importance instead, 20 ms at
    # 100,000 events rather than 1.
    rows = (
        Event.objects.owned_by(owner)
        .filter(pk__in=list(scores))
        .order_by()
        .annotate(previous=Subquery(previous))
        .values_list("id", "speaker", "created_at", "previous")
    )
    words = {word.lower() for word in WORD.findall(query)}
    days = named_days(query)
    before: dict[int, int] = {}
    after: dict[int, int] = {}
    named: set[int] = set()
    dated: set[int] = set()
    for event_id, speaker, created_at, previous_id in rows:
        if previous_id is not None:
            before[event_id], after[previous_id] = previous_id, event_id
        name = WORD.findall(speaker.lower())
        if name and words.issuperset(name):
            named.add(event_id)
        if days and any(first <= timezone.localdate(created_at) <= last for first, last in days):
            dated.add(event_id)
    cued = {}
    for event_id, score in scores.items():
        neighbours = [scores.get(n, 0.0) for n in (before.get(event_id), after.get(event_id)) if n]
        cued[event_id] = (
            score
            + NEIGHBOUR_SHARE * max(neighbours, default=0.0)
            + SPEAKER_BONUS * (event_id in named)
            + DATE_BONUS * (event_id in dated)
        )
    return cued
