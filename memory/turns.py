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

from datetime import date, datetime, time, timedelta

from django.db import connection
from django.utils import timezone

from core.ownership import Owner
from memory.fulltext import WORD
from memory.models import UNRECALLED_IMPORTANCE, Event, EventType
from memory.when import named_days

NEIGHBOUR_SHARE = 0.3
SPEAKER_BONUS = 0.1
DATE_BONUS = 0.3

# The candidates' speakers, whether each was said within the named days, and the
# memory just before each in its session: the next recalled memory of the owner
# and agent (what memory.models.RECALLED selects), found backwards along the
# (owner, session, id) index. Written out rather than built by the ORM: building
# and compiling the query took 2 ms of a search's CPU at 100,000 events, running
# it 1.5. Scoped to the owner by its own parameter, as memory.fulltext's are.
CUES_SQL = """
SELECT e.id, e.speaker, {dated} AS dated, (
  SELECT p.id FROM {table} p
  WHERE p.owner_id = e.owner_id AND p.session_id = e.session_id AND p.id < e.id
    AND p.agent = %s AND p.event_type IN ({recalled}) AND p.importance > %s
  ORDER BY p.id DESC LIMIT 1
) AS previous
FROM {table} e
WHERE e.owner_id = %s AND e.id IN ({ids})
"""


def with_turn_cues(
    owner: Owner, agent: str, scores: dict[int, float], query: str
) -> dict[int, float]:
    """`scores` (event id → fused score, the owner's memories with `agent`) with what
    each event's neighbours, speaker and day add: one statement, for the
    candidates only."""
    if not scores:
        return scores
    days = [bounds(first, last) for first, last in named_days(query)]
    adapt = connection.ops.adapt_datetimefield_value
    dated = " OR ".join(["(e.created_at >= %s AND e.created_at < %s)"] * len(days)) or "0 = 1"
    sql = CUES_SQL.format(
        table=Event._meta.db_table,
        dated=f"CASE WHEN {dated} THEN 1 ELSE 0 END",
        recalled=", ".join(["%s"] * len(EventType.RECALLABLE)),
        ids=", ".join(["%s"] * len(scores)),
    )
    params = [
        *(adapt(moment) for span in days for moment in span),
        agent,
        *EventType.RECALLABLE,
        UNRECALLED_IMPORTANCE,
        owner.pk,
        *scores,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    words = {word.lower() for word in WORD.findall(query)}
    before: dict[int, int] = {}
    after: dict[int, int] = {}
    named: set[int] = set()
    on_day: set[int] = set()
    for event_id, speaker, was_dated, previous_id in rows:
        if previous_id is not None:
            before[event_id], after[previous_id] = previous_id, event_id
        name = WORD.findall(speaker.lower())
        if name and words.issuperset(name):
            named.add(event_id)
        if was_dated:
            on_day.add(event_id)
    cued = {}
    for event_id, score in scores.items():
        neighbours = [scores.get(n, 0.0) for n in (before.get(event_id), after.get(event_id)) if n]
        cued[event_id] = (
            score
            + NEIGHBOUR_SHARE * max(neighbours, default=0.0)
            + SPEAKER_BONUS * (event_id in named)
            + DATE_BONUS * (event_id in on_day)
        )
    return cued


def bounds(first: date, last: date) -> tuple[datetime, datetime]:
    """The named days as moments: from the first's midnight to the midnight after
    the last, in the server's time zone (where a day begins for its users)."""
    zone = timezone.get_current_timezone()
    start = datetime.combine(first, time.min, tzinfo=zone)
    return start, datetime.combine(last + timedelta(days=1), time.min, tzinfo=zone)
