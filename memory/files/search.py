"""Searching memory files: the chunks nearest a query vector.

`ChunkIndex` keeps one owner-and-agent's chunk vectors in process memory; with
`[memory] vector_backend = "lancedb"` the LanceDB plugin holds them instead.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.conf import settings

from memory.files.indexing import index_workspace
from memory.models import MemoryChunk
from memory.vector_sync import StampWindow
from memory.vectors import EMBEDDING_DIM, VectorError, unpack
from memory.workspace import DEFAULT_AGENT

log = logging.getLogger(__name__)

MAX_CACHED_INDEXES = 64


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


class ChunkIndex:
    """One owner-and-agent's chunk vectors in process memory, like `NumpyIndex` for
    events: loaded once, then synced through a `StampWindow`. Chunks also disappear
    (files edited or deleted); a count tells when, and only then are the ids compared."""

    def __init__(self, owner_id: int, agent: str) -> None:
        self.owner_id = owner_id
        self.agent = agent
        self.lock = threading.Lock()
        self.ids = np.empty(0, dtype=np.int64)
        self.matrix = np.empty((0, EMBEDDING_DIM), dtype=np.float32)
        self.position: dict[int, int] = {}
        self.window = StampWindow()

    def rows(self) -> Any:
        return MemoryChunk.objects.filter(
            owner_id=self.owner_id, agent=self.agent, embedded_at__isnull=False
        )

    def sync(self) -> None:
        added = {}
        for batch in self.window.unread(self.rows()):
            for chunk_id, blob, embedded_at in batch.values_list(
                "id", "embedding", "embedded_at"
            ).iterator(2000):
                self.window.read(chunk_id, embedded_at)
                added[chunk_id] = blob
        self.add(added)
        if self.rows().count() != len(self.position):
            self.reconcile()

    def reconcile(self) -> None:
        present = set(self.rows().values_list("id", flat=True))
        keep = [i for i, chunk_id in enumerate(self.ids) if int(chunk_id) in present]
        self.ids, self.matrix = self.ids[keep], self.matrix[keep]
        self.position = {int(chunk_id): i for i, chunk_id in enumerate(self.ids)}
        missing = present - self.position.keys()
        if missing:  # committed more than `vector_sync.SETTLE` after its stamp
            self.add(dict(self.rows().filter(pk__in=missing).values_list("id", "embedding")))

    def add(self, blobs: dict[int, Any]) -> None:
        vectors = {}
        for chunk_id, blob in blobs.items():
            try:
                vectors[chunk_id] = unpack(blob)
            except (VectorError, TypeError):
                log.warning("memory chunk %s has a corrupt vector; it is embedded again", chunk_id)
                MemoryChunk.objects.filter(pk=chunk_id).update(embedding=None, embedded_at=None)
        updates = [i for i in vectors if i in self.position]
        for chunk_id in updates:
            self.matrix[self.position[chunk_id]] = vectors.pop(chunk_id)
        if vectors:
            start = len(self.ids)
            self.ids = np.concatenate([self.ids, np.fromiter(vectors, dtype=np.int64)])
            self.matrix = np.concatenate([self.matrix, np.stack(list(vectors.values()))])
            self.position.update({chunk_id: start + i for i, chunk_id in enumerate(vectors)})

    def search(
        self, vector: np.ndarray, k: int, min_score: float = -1.0
    ) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) of the k nearest, best first."""
        with self.lock:
            self.sync()
            if k <= 0 or len(self.ids) == 0:
                return []
            scores = self.matrix @ np.asarray(vector, dtype=np.float32)
            k = min(k, len(self.ids))
            top = np.argpartition(-scores, k - 1)[:k]
            top = top[np.argsort(-scores[top])]
            return [(int(self.ids[i]), float(scores[i])) for i in top if scores[i] > min_score]


_indexes: OrderedDict[tuple[int, str, str], Any] = OrderedDict()
_indexes_lock = threading.Lock()


def chunk_index_for(owner_id: int, agent: str = DEFAULT_AGENT) -> Any:
    """The chunk index of the configured backend: in process (numpy) or LanceDB."""
    backend = settings.NEOTASK["memory"]["vector_backend"]
    key = (owner_id, agent, backend)
    with _indexes_lock:
        index = _indexes.get(key)
        if index is None:
            if backend == "lancedb":
                from memory.lancedb_index import LanceChunkIndex

                index = _indexes[key] = LanceChunkIndex(owner_id, agent)
            else:
                index = _indexes[key] = ChunkIndex(owner_id, agent)
            while len(_indexes) > MAX_CACHED_INDEXES:
                _indexes.popitem(last=False)
        _indexes.move_to_end(key)
    return index


def forget_chunk_indexes() -> None:
    with _indexes_lock:
        _indexes.clear()


def search_files(
    owner: Any, agent: str, query_vector: np.ndarray, k: int, min_score: float = -1.0
) -> list[FileHit]:
    """The `k` chunks of the owner's memory files most similar to the query, best first;
    the workspace is checked for changes first."""
    try:
        index_workspace(owner, agent)
    except Exception:
        # Search still answers from what was indexed before.
        log.exception("indexing the workspace of user %s, agent %s failed", owner.pk, agent)
    ranked = chunk_index_for(owner.pk, agent).search(query_vector, k, min_score)
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
