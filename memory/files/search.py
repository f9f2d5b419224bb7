"""Searching memory files: the chunks nearest a query vector.

The chunk vectors of one owner and agent are held by the in-process index
(`vector_index.NumpyIndex` over `CHUNKS`, as events are), or with
`[memory] vector_backend = "lancedb"` by the LanceDB plugin; on PostgreSQL, by
the database (memory.pgvector).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from django.conf import settings

from core.ownership import Owner
from memory.models import MemoryChunk
from memory.pgvector.queries import PgIndex
from memory.pgvector.schema import CHUNKS_TABLE
from memory.vector_index import CHUNKS, IndexCache, NumpyIndex, in_database
from memory.workspace import DEFAULT_AGENT

if TYPE_CHECKING:
    from memory.lancedb_index import LanceChunkIndex


@dataclass
class FileHit:
    path: str
    start_line: int
    end_line: int
    heading: str
    text: str
    score: float  # cosine similarity to the query
    kind: str = field(default="file", init=False)

    @property
    def source(self) -> str:
        return f"{self.path}:{self.start_line}-{self.end_line}"


_chunk_indexes: IndexCache[NumpyIndex | LanceChunkIndex] = IndexCache()


def chunk_index_for(
    owner_id: int, agent: str = DEFAULT_AGENT
) -> NumpyIndex | LanceChunkIndex | PgIndex:
    """The chunk index of the configured backend: in process (numpy) or LanceDB;
    in PostgreSQL (pgvector) on the team profile, whatever the setting."""
    if in_database():
        return PgIndex(owner_id, agent, CHUNKS_TABLE)
    backend = settings.NEOTASK["memory"]["vector_backend"]

    def make() -> NumpyIndex | LanceChunkIndex:
        if backend == "lancedb":
            from memory.lancedb_index import LanceChunkIndex

            return LanceChunkIndex(owner_id, agent)
        return NumpyIndex(owner_id, agent, CHUNKS)

    return _chunk_indexes.get((owner_id, agent, backend), make)


def forget_chunk_indexes() -> None:
    _chunk_indexes.clear()


def search_files(
    owner: Owner, agent: str, query_vector: np.ndarray, k: int, min_score: float = -1.0
) -> list[FileHit]:
    """The `k` chunks of the owner's memory files most similar to the query, best first.
    A read only: what a write path or the minute's job indexed (memory.files)."""
    ranked = chunk_index_for(owner.pk, agent).search(query_vector, k, min_score)
    if not ranked:  # most owners keep no memory files: nothing to read
        return []
    chunks = (
        MemoryChunk.objects.owned_by(owner)
        .filter(agent=agent)
        .select_related("file")
        .in_bulk([chunk_id for chunk_id, _ in ranked])
    )
    return [
        FileHit(c.file.path, c.start_line, c.end_line, c.heading, c.text, score)
        for chunk_id, score in ranked
        if (c := chunks.get(chunk_id)) is not None
    ]
