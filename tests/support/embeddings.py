"""A stand-in for the embedding model: deterministic vectors, no model loaded."""

from __future__ import annotations

import hashlib

import numpy as np

from memory.vectors import EMBEDDING_DIM


def fake_vector(text: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    vector = np.random.default_rng(seed).standard_normal(EMBEDDING_DIM).astype(np.float32)
    return vector / np.linalg.norm(vector)


class CountingEmbed:
    """Stands in for `embed_texts`: deterministic vectors, and a record of every call."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, texts, batch_size: int = 32) -> np.ndarray:
        self.calls.append(list(texts))
        if not texts:
            return np.empty((0, EMBEDDING_DIM), dtype=np.float32)
        return np.stack([fake_vector(text) for text in texts])

    @property
    def texts(self) -> int:
        return sum(len(call) for call in self.calls)

    def reset(self) -> None:
        self.calls.clear()
