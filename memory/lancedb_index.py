"""The LanceDB plugin: memory-file chunk vectors in a LanceDB table on disk.

`pip install .[lancedb]` and `[memory] vector_backend = "lancedb"`. Same
interface as the in-process index of chunks (`search(vector, k, min_score)`), and
the same reading of the rows (`vector_index.CHUNKS`: corrupt vectors cleared); the
database stays the truth: the table (one per owner and agent, under
DATA_DIR/lancedb/) is synced through a `StampWindow`, and a table that is missing,
unreadable or out of step is rebuilt from the database with a log line while
search keeps answering.
"""

from __future__ import annotations

import logging
import shutil
import threading
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from memory.vector_index import CHUNKS
from memory.vector_sync import SETTLE, StampWindow
from memory.vectors import EMBEDDING_DIM

log = logging.getLogger(__name__)


class LanceDBMissing(RuntimeError):
    """The backend was chosen but the plugin is not installed."""


def connect(path: Path) -> Any:
    try:
        import lancedb
    except ImportError:
        raise LanceDBMissing(
            '[memory] vector_backend = "lancedb" needs the plugin: pip install ".[lancedb]" '
            '(or set vector_backend = "numpy")'
        ) from None
    path.mkdir(parents=True, exist_ok=True)
    return lancedb.connect(str(path))


def schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [pa.field("id", pa.int64()), pa.field("vector", pa.list_(pa.float32(), EMBEDDING_DIM))]
    )


def as_table(rows: list[tuple[int, np.ndarray]]) -> Any:
    import pyarrow as pa

    ids = pa.array([row_id for row_id, _ in rows], pa.int64())
    flat = pa.array(np.concatenate([v for _, v in rows]) if rows else [], pa.float32())
    return pa.table(
        {"id": ids, "vector": pa.FixedSizeListArray.from_arrays(flat, EMBEDDING_DIM)},
        schema=schema(),
    )


class LanceChunkIndex:
    def __init__(self, owner_id: int, agent: str) -> None:
        self.owner_id = owner_id
        self.agent = agent
        self.lock = threading.Lock()
        self.root = Path(settings.DATA_DIR) / "lancedb"
        self.name = f"chunks_{owner_id}_{agent}"
        self.table: Any = None
        self.window = StampWindow()

    def rows(self) -> Any:
        return CHUNKS.stored(self.owner_id, self.agent)

    def unread(self) -> list[tuple[int, np.ndarray]]:
        found = []
        for batch in self.window.unread(self.rows()):
            for chunk_id, vector, embedded_at, _ in CHUNKS.vectors(batch):
                found.append((chunk_id, vector))
                self.window.read(chunk_id, embedded_at)
        return found

    def rebuild(self, why: str) -> None:
        log.warning("rebuilding the LanceDB table %s from the database: %s", self.name, why)
        shutil.rmtree(self.root / f"{self.name}.lance", ignore_errors=True)
        self.window = StampWindow()
        db = connect(self.root)
        self.table = db.create_table(self.name, data=as_table(self.unread()), mode="overwrite")

    def open(self) -> None:
        try:
            db = connect(self.root)
            self.table = db.open_table(self.name)
            count = self.table.count_rows()
        except LanceDBMissing:
            raise
        except Exception as exc:  # missing or unreadable: rebuilt below
            return self.rebuild(f"{type(exc).__name__}: {exc}")
        if count != self.rows().count():
            return self.rebuild(f"{count} vectors in the table, {self.rows().count()} chunks")
        newest = self.rows().order_by("-embedded_at").values_list("embedded_at", flat=True).first()
        self.window = StampWindow()
        if newest is not None:
            # An earlier process wrote the table: what committed late after its last
            # sync is read again.
            self.window.settle(newest - SETTLE)

    def sync(self) -> None:
        if self.table is None:
            self.open()
        rows = self.unread()
        if rows:
            (
                self.table.merge_insert("id")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute(as_table(rows))
            )
        if self.table.count_rows() != self.rows().count():
            # Chunks of edited or deleted files are gone from the database.
            present = list(self.rows().values_list("id", flat=True))
            if present:
                self.table.delete(f"id NOT IN ({', '.join(map(str, present))})")
            else:
                self.table.delete("id >= 0")

    def purge(self) -> None:
        """After a deletion: drop the deleted chunks' rows, then rewrite the table's
        fragments without them and remove the older versions that still hold them
        (LanceDB deletes by marking rows; a version keeps its files until cleaned up).
        Another process reading an older version fails once, and rebuilds (`search`)."""
        with self.lock, warnings.catch_warnings():
            warnings.filterwarnings("ignore", "optimize.cleanup_older_than=0", UserWarning)
            self.sync()
            self.table.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)

    def search(
        self, vector: np.ndarray, k: int, min_score: float = -1.0
    ) -> list[tuple[int, float]]:
        with self.lock:
            try:
                self.sync()
                if k <= 0 or self.table.count_rows() == 0:
                    return []
                found = (
                    self.table.search(np.asarray(vector, dtype=np.float32))
                    .metric("cosine")
                    .limit(k)
                    .to_list()
                )
            except LanceDBMissing:
                raise
            except Exception as exc:  # the files changed under us: rebuild, then answer
                self.rebuild(f"{type(exc).__name__}: {exc}")
                found = (
                    self.table.search(np.asarray(vector, dtype=np.float32))
                    .metric("cosine")
                    .limit(k)
                    .to_list()
                )
        hits = [(int(row["id"]), 1.0 - float(row["_distance"])) for row in found]
        return [(chunk_id, score) for chunk_id, score in hits if score > min_score]
