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
# (owner, session, id) index — looked up only for a candidate with an earlier
# one in its session (most have none: no neighbour to gain from). Written out
# rather than built by the ORM: building and compiling the query took 2 ms of a
# search's CPU at 100,000 events, running it 0.6. Scoped to the owner by its own
# parameter, as memory.fulltext's are.
CUES_SQL = """
WITH c AS (
  SELECT id, owner_id, session_id, speaker, created_at FROM {table}
  WHERE owner_id = %s AND id IN ({ids})
)
SELECT c.id, c.speaker, {dated} AS dated, CASE WHEN EXISTS (
  SELECT 1 FROM c o WHERE o.session_id = c.session_id AND o.id < c.id
) THEN (
  SELECT p.id FROM {table} p
  WHERE p.owner_id = c.owner_id AND p.session_id = c.session_id AND p.id < c.id
    AND p.agent = %s AND p.event_type IN ({recalled}) AND p.importance > %s
  ORDER BY p.id DESC LIMIT 1
) END AS previous
FROM c
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
    dated = " OR ".join(["(c.created_at >= %s AND c.created_at < %s)"] * len(days)) or "0 = 1"
    sql = CUES_SQL.format(
        table=Event._meta.db_table,
        dated=f"CASE WHEN {dated} THEN 1 ELSE 0 END",
        recalled=", ".join(["%s"] * len(EventType.RECALLABLE)),
        ids=", ".join(["%s"] * len(scores)),
    )
    params = [
        owner.pk,
        *scores,
        *(adapt(moment) for span in days for moment in span),
        agent,
        *EventType.RECALLABLE,
        UNRECALLED_IMPORTANCE,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    words = {word.lower() for word in WORD.findall(query)}
    names: dict[str, bool] = {}  # speaker → whether the query names them
    neighbour: dict[int, float] = {}  # the better score of a candidate next to it
    cued = dict(scores)
    for event_id, speaker, was_dated, previous_id in rows:
        if previous_id in scores:  # two candidates, one just after the other
            for one, other in ((event_id, previous_id), (previous_id, event_id)):
                neighbour[one] = max(neighbour.get(one, 0.0), scores[other])
        if speaker not in names:
            name = WORD.findall(speaker.lower())
            names[speaker] = bool(name) and words.issuperset(name)
        cued[event_id] += SPEAKER_BONUS * names[speaker] + DATE_BONUS * bool(was_dated)
    for event_id, score in neighbour.items():
        cued[event_id] += NEIGHBOUR_SHARE * score
    return cued


def bounds(first: date, last: date) -> tuple[datetime, datetime]:
    """The named days as moments: from the first's midnight to the midnight after
    the last, in the server's time zone (where a day begins for its users)."""
    zone = timezone.get_current_timezone()
    start = datetime.combine(first, time.min, tzinfo=zone)
    return start, datetime.combine(last + timedelta(days=1), time.min, tzinfo=zone)
