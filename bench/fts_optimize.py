"""What memory.forgetting's FTS5 'optimize' costs after one deletion, on an index
shaped like events_search (contentless; key, context, scope; porter unicode61).

    python -m bench.fts_optimize /tmp/fts.db [ROWS]

Builds the index once (ROWS rows of 40 + 40 random words, 1000 to a transaction),
then deletes a row and times the optimize and the WAL checkpoint, three times.
"""

from __future__ import annotations

import random
import sqlite3
import sys
import time
from pathlib import Path

TABLE = "events_search"
SCOPE = "s1a6D61696E"


def build(path: Path, rows: int, texts: dict[int, tuple[str, str]]) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(
        f"CREATE VIRTUAL TABLE {TABLE} USING fts5(key, context, scope, content='', "
        "tokenize='porter unicode61')"
    )
    for start in range(1, rows + 1, 1000):
        db.execute("BEGIN")
        for i in range(start, min(start + 1000, rows + 1)):
            db.execute(
                f"INSERT INTO {TABLE}(rowid, key, context, scope) VALUES (?, ?, ?, ?)",
                (i, *texts[i], SCOPE),
            )
        db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def main(path: Path, rows: int) -> None:
    rng = random.Random(1)
    vocabulary = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 9)))]
    vocabulary += [
        "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 9)))
        for _ in range(20_000)
    ]
    texts = {
        i: (" ".join(rng.choices(vocabulary, k=40)), " ".join(rng.choices(vocabulary, k=40)))
        for i in range(1, rows + 1)
    }
    if not path.exists():
        build(path, rows, texts)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA secure_delete=ON")
    print(f"{rows} rows, {path.stat().st_size / 1e6:.0f} MB")
    for row in rng.sample(range(1, rows + 1), 3):
        db.execute(
            f"INSERT INTO {TABLE}({TABLE}, rowid, key, context, scope) "
            "VALUES ('delete', ?, ?, ?, ?)",
            (row, *texts[row], SCOPE),
        )
        started = time.perf_counter()
        db.execute("BEGIN IMMEDIATE")
        db.execute(f"INSERT INTO {TABLE}({TABLE}) VALUES ('optimize')")
        db.execute("COMMIT")
        optimized = time.perf_counter()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        done = time.perf_counter()
        print(
            f"optimize {1000 * (optimized - started):.0f} ms, "
            f"checkpoint {1000 * (done - optimized):.0f} ms"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 100_000)
