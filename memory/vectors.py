"""How embeddings are stored: packed little-endian float32, 384 dimensions."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

EMBEDDING_DIM = 384
DTYPE = np.dtype("<f4")


class VectorError(ValueError):
    """A stored or given vector that cannot be used."""


def pack(vector: Sequence[float] | np.ndarray) -> bytes:
    array = np.asarray(vector, dtype=DTYPE)
    if array.shape != (EMBEDDING_DIM,):
        raise VectorError(f"expected {EMBEDDING_DIM} dimensions, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise VectorError("vector holds NaN or infinite values")
    return array.tobytes()


def unpack(blob: bytes | memoryview) -> np.ndarray:
    raw = bytes(blob)
    if len(raw) != EMBEDDING_DIM * DTYPE.itemsize:
        raise VectorError(f"blob of {len(raw)} bytes is not {EMBEDDING_DIM} float32 values")
    return np.frombuffer(raw, dtype=DTYPE)
