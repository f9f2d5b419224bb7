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
# parameter, as memory.fulltext's are. `candidates` selects the ids: a list here,
# on PostgreSQL the fused rows of the search's own statement
# (memory.pgvector.fused), which saves a round trip and the rows' second lookup.
CUES = """
SELECT c.id, c.speaker, {dated} AS dated, CASE WHEN c.nth > 1 THEN (
  SELECT p.id FROM {table} p
  WHERE p.owner_id = c.owner_id AND p.session_id = c.session_id AND p.id < c.id
    AND p.agent = %(agent)s AND p.event_type IN ({recalled}) AND p.importance > %(floor)s
  ORDER BY p.id DESC LIMIT 1
) END AS previous
FROM (
  SELECT id, owner_id, session_id, speaker, created_at,
    row_number() OVER (PARTITION BY session_id ORDER BY id) AS nth
  FROM {table} WHERE owner_id = %(owner)s AND id IN ({candidates})
) c
"""

# (event id, speaker, said on a named day, the memory just before it or None)
CueRow = tuple[int, str, int, int | None]


def cues_statement(owner: Owner, agent: str, query: str, candidates: str) -> tuple[str, dict]:
    """CUES for the days `query` names, with its named parameters."""
    params: dict = {"owner": owner.pk, "agent": agent, "floor": UNRECALLED_IMPORTANCE}
    spans = []
    adapt = connection.ops.adapt_datetimefield_value
    for number, (first, last) in enumerate(named_days(query)):
        start, end = bounds(first, last)
        params[f"from{number}"], params[f"to{number}"] = adapt(start), adapt(end)
        spans.append(f"(c.created_at >= %(from{number})s AND c.created_at < %(to{number})s)")
    for number, event_type in enumerate(EventType.RECALLABLE):
        params[f"type{number}"] = event_type
    sql = CUES.format(
        table=Event._meta.db_table,
        dated=f"CASE WHEN {' OR '.join(spans) or '0 = 1'} THEN 1 ELSE 0 END",
        recalled=", ".join(f"%(type{n})s" for n in range(len(EventType.RECALLABLE))),
        candidates=candidates,
    )
    return sql, params


def with_turn_cues(
    owner: Owner, agent: str, scores: dict[int, float], query: str
) -> dict[int, float]:
    """`scores` (event id → fused score, the owner's memories with `agent`) with what
    each event's neighbours, speaker and day add: one statement, for the
    candidates only."""
    if not scores:
        return scores
    ids = ", ".join(f"%(id{n})s" for n in range(len(scores)))
    sql, params = cues_statement(owner, agent, query, ids)
    params.update((f"id{n}", event_id) for n, event_id in enumerate(scores))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cued(scores, cursor.fetchall(), query)


def cued(scores: dict[int, float], rows: list[CueRow], query: str) -> dict[int, float]:
    """`scores` plus what the cues' rows (CUES) add."""
    words = {word.lower() for word in WORD.findall(query)}
    names: dict[str, bool] = {}  # speaker → whether the query names them
    neighbour: dict[int, float] = {}  # the better score of a candidate next to it
    result = dict(scores)
    for event_id, speaker, was_dated, previous_id in rows:
        if previous_id in scores:  # two candidates, one just after the other
            for one, other in ((event_id, previous_id), (previous_id, event_id)):
                neighbour[one] = max(neighbour.get(one, 0.0), scores[other])
        if speaker not in names:
            name = WORD.findall(speaker.lower())
            names[speaker] = bool(name) and words.issuperset(name)
        result[event_id] += SPEAKER_BONUS * names[speaker] + DATE_BONUS * bool(was_dated)
    for event_id, score in neighbour.items():
        result[event_id] += NEIGHBOUR_SHARE * score
    return result


def bounds(first: date, last: date) -> tuple[datetime, datetime]:
    """The named days as moments: from the first's midnight to the midnight after
    the last, in the server's time zone (where a day begins for its users)."""
    zone = timezone.get_current_timezone()
    start = datetime.combine(first, time.min, tzinfo=zone)
    return start, datetime.combine(last + timedelta(days=1), time.min, tzinfo=zone)
