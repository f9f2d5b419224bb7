"""Vector search over an owner's event embeddings.

`VectorIndex` is the interface a backend implements; `NumpyIndex` keeps one
owner-and-agent's vectors in process memory (384 float32 each: 150 MB per
100k events), loaded once and then synced incrementally from `embedded_at`,
so a query costs one small indexed query plus a matrix-vector product.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from datetime import datetime
from typing import Protocol

import numpy as np

from memory.models import Event
from memory.vectors import EMBEDDING_DIM, VectorError, unpack

log = logging.getLogger(__name__)
Hits = list[tuple[int, float]]
MAX_CACHED_INDEXES = 64  # owner/agent pairs kept in memory per process


class VectorIndex(Protocol):
    def search(
        self, vector: np.ndarray, k: int, min_score: float = -1.0
    ) -> list[tuple[int, float]]:
        """(event id, cosine similarity) of the k nearest, best first."""
        ...


class NumpyIndex:
    def __init__(self, owner_id: int, agent: str) -> None:
        self.owner_id = owner_id
        self.agent = agent
        self.lock = threading.Lock()
        self.ids = np.empty(0, dtype=np.int64)
        self.matrix = np.empty((0, EMBEDDING_DIM), dtype=np.float32)
        self.size = 0
        self.position: dict[int, int] = {}
        self.synced_to: datetime | None = None

    def sync(self) -> None:
        """Add the vectors stored since the last sync (all of them the first time)."""
        rows = Event.objects.filter(
            owner_id=self.owner_id, agent=self.agent, embedded_at__isnull=False
        )
        if self.synced_to is not None:
            rows = rows.filter(embedded_at__gt=self.synced_to)
        for event_id, blob, embedded_at in (
            rows.order_by("embedded_at")
            .values_list("id", "embedding", "embedded_at")
            .iterator(chunk_size=2000)
        ):
            self.synced_to = embedded_at
            if blob is None:
                continue
            try:
                vector = unpack(blob)
            except VectorError:
                log.warning("event %s has a corrupt embedding; queued for re-embedding", event_id)
                # Cleared, the embedding sweep computes it again.
                Event.objects.filter(pk=event_id).update(
                    embedding=None, embedded_at=None, embedding_error="corrupt vector replaced"
                )
                continue
            self.put(event_id, vector)

    def put(self, event_id: int, vector: np.ndarray) -> None:
        row = self.position.get(event_id)
        if row is None:
            if self.size == len(self.ids):  # grow by doubling: appends stay cheap
                capacity = max(1024, 2 * len(self.ids))
                self.ids = np.resize(self.ids, capacity)
                matrix = np.zeros((capacity, EMBEDDING_DIM), dtype=np.float32)
                matrix[: self.size] = self.matrix[: self.size]
                self.matrix = matrix
            row = self.position[event_id] = self.size
            self.size += 1
        self.ids[row] = event_id
        self.matrix[row] = vector

    def search(
        self, vector: np.ndarray, k: int, min_score: float = -1.0
    ) -> list[tuple[int, float]]:
        with self.lock:
            self.sync()
            if k <= 0 or self.size == 0:
                return []
            scores = self.matrix[: self.size] @ np.asarray(vector, dtype=np.float32)
            k = min(k, self.size)
            top = np.argpartition(-scores, k - 1)[:k]
            top = top[np.argsort(-scores[top])]
            return [(int(self.ids[i]), float(scores[i])) for i in top if scores[i] > min_score]


_indexes: OrderedDict[tuple[int, str], NumpyIndex] = OrderedDict()
_indexes_lock = threading.Lock()


def index_for(owner_id: int, agent: str = "main") -> VectorIndex:
    """The event-vector index (in process; [memory] vector_backend chooses the
    backend of memory-file vectors only)."""
    key = (owner_id, agent)
    with _indexes_lock:
        index = _indexes.get(key)
        if index is None:
            index = _indexes[key] = NumpyIndex(owner_id, agent)
            while len(_indexes) > MAX_CACHED_INDEXES:
                _indexes.popitem(last=False)
        _indexes.move_to_end(key)
    return index


def forget_indexes() -> None:
    """Drop the cached indexes (tests; deleted users)."""
    with _indexes_lock:
        _indexes.clear()
