"""Vector search in PostgreSQL (pgvector), for the team profile.

On PostgreSQL no process holds vectors: `embedding_vec vector(384)` sits beside
the packed float32 `embedding` of events and memory-file chunks, kept equal to it
by a trigger (every write path sets `embedding`; a corrupt or wrong-length one is
cleared for the embedding jobs to compute again, rather than failing the write),
and an HNSW index (cosine) finds the nearest. Deletion is immediate: a deleted
row is gone from the index too, so nothing like the numpy index's sync or
forgotten-event log is needed. Migration `memory 0014_pgvector` adds the
columns, triggers and indexes; the single-user SQLite profile keeps the
in-process numpy index (memory.vector_index).

Every query is scoped to an owner and an agent. HNSW filters after it searches,
so an owner holding a small share of the rows would get few or no rows from the
graph's first `ef_search` candidates: every query runs with
`hnsw.iterative_scan = relaxed_order`, which keeps scanning until the filter has
let through enough, and re-sorts what it finds.

Contextual scores (memory.vector_index: an event's vector plus half of each of
its speaker's neighbouring turns in the session) cannot be indexed as such; the
`RESCORED` nearest by plain cosine are re-scored with their neighbours in SQL.
`memory_eval` gave the same figures as the numpy index on both datasets
(docs/memory.md). The memory search's two branches, their fusion and what the
candidates' turns add (memory.turns) run as one statement (`hybrid`), the
full-text branch reading the stored `search_document` from a narrow table of
its own (WORDS_SETUP, migration `memory 0015`).

- memory.pgvector.schema: the columns, triggers and indexes (the migrations' DDL);
- memory.pgvector.queries: the owner-scoped nearest-row queries (`PgIndex`, `PgQuery`);
- memory.pgvector.fused: the memory search as one statement (`hybrid`).
"""
