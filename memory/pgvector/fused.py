"""The memory search's two branches and their fusion as one statement in
PostgreSQL (`hybrid`): the nearest by contextual cosine (memory.pgvector.queries)
and the full-text matches (memory.fulltext.POSTGRES_WORDS), fused as
memory.search.fuse does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memory import fulltext
from memory.fulltext import POSTGRES_WORDS
from memory.pgvector.queries import CONTEXTUAL, NEAREST, RESCORED, THREAD, PgIndex, as_literal, run

# The memory search (memory.search) in one statement: the nearest by plain cosine
# re-scored by contextual cosine, the full-text matches, and the fusion of both.
# `vector` holds the best `candidates` of the nearest plus every word match with a
# vector (numpy's top plus `scores` of the words' finds); the fusion is
# memory.search.fuse's, a row found by words alone scored by them alone.
HYBRID = """
WITH nearest AS MATERIALIZED ({nearest}),
words AS MATERIALIZED ({words}),
rescored AS MATERIALIZED ({contextual}),
vector AS (
  (SELECT id, owner_id, similarity FROM rescored
   WHERE id IN (SELECT id FROM nearest) ORDER BY similarity DESC, id LIMIT %(candidates)s)
  UNION
  SELECT id, owner_id, similarity FROM rescored WHERE id IN (SELECT id FROM words)
),
bounds AS (
  SELECT min(similarity) AS low, COALESCE(NULLIF(max(similarity) - min(similarity), 0), 1)
    AS spread, count(*) AS found FROM vector
),
best AS (
  SELECT COALESCE(NULLIF(max(rank), 0), 1) AS best, count(*) AS found FROM words
),
fused AS MATERIALIZED (
  SELECT COALESCE(v.id, w.id) AS id, v.similarity, w.rank,
    CASE
      WHEN best.found = 0 THEN v.similarity
      WHEN bounds.found = 0 THEN w.rank / best.best
      WHEN v.id IS NULL THEN w.rank / best.best
      ELSE %(vector_weight)s * (v.similarity - bounds.low) / bounds.spread
        + (1 - %(vector_weight)s) * COALESCE(w.rank, 0) / best.best
    END AS fused
  FROM vector v
  FULL JOIN words w ON w.id = v.id AND w.owner_id = v.owner_id
  CROSS JOIN bounds CROSS JOIN best
)
SELECT f.id, f.similarity, f.rank, f.fused, {cue_columns}
FROM fused f {cue_join}
ORDER BY f.fused DESC, f.id
"""
# What `cues` asks of the fused rows (memory.turns.CUES: its `candidates`).
FUSED_IDS = "SELECT id FROM fused"
NO_CUES = "NULL, NULL, NULL"


@dataclass
class Fused:
    """The memory search's finds: event id → score, of each branch and fused, best first;
    and the rows `cues` asked for, of each fused row (memory.turns.CueRow)."""

    vector: dict[int, float]
    lexical: dict[int, float]
    fused: dict[int, float]
    cues: list[tuple[int, str, int, int | None]] = field(default_factory=list)


def hybrid(
    index: PgIndex,
    words: list[str],
    vector: np.ndarray,
    candidates: int,
    vector_weight: float,
    cues: tuple[str, dict[str, Any]] | None = None,
) -> Fused:
    """`cues`: a statement over the fused rows' ids (`FUSED_IDS`) and its parameters,
    asked in the same statement (memory.turns.cues_statement)."""
    found = Fused({}, {}, {})
    for row_id, similarity, rank, fused, *cue in run(
        *hybrid_statement(index, words, vector, candidates, vector_weight, cues)
    ):
        if similarity is not None:
            found.vector[row_id] = float(similarity)
        if rank is not None:
            found.lexical[row_id] = float(rank)
        found.fused[row_id] = float(fused)
        if cues is not None:
            speaker, dated, previous = cue
            found.cues.append((row_id, speaker, dated, previous))
    return found


def hybrid_statement(
    index: PgIndex,
    words: list[str],
    vector: np.ndarray,
    candidates: int,
    vector_weight: float,
    cues: tuple[str, dict[str, Any]] | None = None,
) -> tuple[str, dict[str, Any]]:
    table = index.table
    fields = "id, owner_id, session_id, event_type, speaker, v"
    rows = (
        f"(SELECT {fields} FROM nearest UNION ALL SELECT {fields} FROM words "
        "WHERE v IS NOT NULL AND id NOT IN (SELECT id FROM nearest))"
    )
    sql = HYBRID.format(
        nearest=NEAREST.format(table=table, thread=THREAD, exact=index.exact()),
        words=POSTGRES_WORDS.format(table=table),
        contextual=CONTEXTUAL.format(table=table, rows=rows),
        cue_columns="c.speaker, c.dated, c.previous" if cues else NO_CUES,
        cue_join=f"JOIN ({cues[0]}) c ON c.id = f.id" if cues else "",
    )
    params = index.params(
        as_literal(vector),
        nearest=max(candidates, RESCORED),
        searched=bool(words),
        words=" | ".join(words),
        text=" ".join(words),
        candidates=candidates,
        scored=fulltext.POSTGRES_SCORED_MATCHES,
        vector_weight=vector_weight,
        **(cues[1] if cues else {}),
    )
    return sql, params
