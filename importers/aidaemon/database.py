"""An aidaemon database as an import reads it: the file opened read-only and
immutable, only ordinary tables of ordinary columns, and every statement under
one time budget.

The file is untrusted. A view, a virtual table (FTS5 over a recursive view) or a
generated column standing in for a table computes whatever its author wrote, for
as long as they like; an ordinary table holds only what the file holds.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from importers.report import ImportRefused, ImportStopped

# What one import may spend inside SQLite reading the file, over all its statements
# (a 200 MB database reads in well under a minute); read when checked.
READ_SECONDS = 600.0
STEPS = 1000  # SQLite instructions between two looks at the clock
# PRAGMA table_list's types, as a refusal names them.
NOT_A_TABLE = {"view": "a view", "virtual": "a virtual table", "shadow": "a shadow table"}
GENERATED = (2, 3)  # PRAGMA table_xinfo's `hidden` of a generated column (virtual, stored)


class Database:
    """The open file: its tables by (lower-case) name, and queries that count
    against the import's time budget."""

    def __init__(self, connection: sqlite3.Connection, name: str, tables: set[str]) -> None:
        self.connection = connection
        self.name = name
        self.tables = tables  # the ordinary ones
        self.spent = 0.0  # seconds inside SQLite so far
        self.entered: float | None = None  # when the running call into SQLite began
        self.stopped = False
        connection.set_progress_handler(self.over_budget, STEPS)

    def over_budget(self) -> bool:
        """SQLite's progress handler: True interrupts the statement."""
        if self.entered is not None and self.spent + time.monotonic() - self.entered > READ_SECONDS:
            self.stopped = True
        return self.stopped

    @contextmanager
    def timed(self) -> Iterator[None]:
        """A call into SQLite, counted in the budget; ImportStopped when it ran out."""
        self.entered = time.monotonic()
        try:
            yield
        except sqlite3.OperationalError:
            if self.stopped:
                raise ImportStopped(
                    f"Reading {self.name} took longer than {READ_SECONDS:g} s: stopped."
                ) from None
            raise
        finally:
            self.spent += time.monotonic() - self.entered
            self.entered = None

    def rows(self, sql: str, params: tuple = ()) -> Iterator[sqlite3.Row]:
        """The statement's rows one at a time (constant memory)."""
        with self.timed():
            cursor = self.connection.execute(sql, params)
        while True:
            with self.timed():
                row = cursor.fetchone()
            if row is None:
                return
            yield row

    def value(self, sql: str, params: tuple = ()) -> Any:
        """The first column of the statement's first row."""
        with self.timed():
            return self.connection.execute(sql, params).fetchone()[0]


@contextmanager
def open_database(path: str | Path, expected: Collection[str]) -> Iterator[Database]:
    """The SQLite file at `path`, never written to; ImportRefused when it is not
    one, or when one of the `expected` tables is anything but an ordinary table of
    ordinary columns."""
    file = Path(path)
    if not file.is_file():
        raise ImportRefused(f"{file}: no such file.")
    log = file.with_name(f"{file.name}-wal")
    if log.is_file() and log.stat().st_size:
        raise ImportRefused(
            f"{file.name} has a write-ahead log beside it ({log.name}) holding its latest "
            "writes, which an import does not read: stop aidaemon (it folds the log into "
            f"the database when it closes) or run sqlite3 {file.name} 'PRAGMA "
            "wal_checkpoint(TRUNCATE)', then import again."
        )
    # immutable: no lock taken, no journal or log looked for or made beside it.
    # Python leaves extension loading off.
    connection = sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    connection.row_factory = sqlite3.Row
    # A badly encoded text must cost one character, not the session.
    connection.text_factory = lambda raw: raw.decode("utf-8", "replace")
    try:
        try:
            # No function the file's schema names runs unless SQLite knows it harmless.
            connection.execute("PRAGMA trusted_schema = OFF")
            kinds = {
                row["name"].lower(): row["type"]
                for row in connection.execute("PRAGMA main.table_list")
            }
        except sqlite3.DatabaseError as exc:
            raise ImportRefused(f"{file.name} is not a SQLite database ({exc}).") from None
        present = [name for name in expected if name in kinds]
        for name in present:
            if kinds[name] != "table":
                what = NOT_A_TABLE.get(kinds[name], kinds[name])
                raise ImportRefused(
                    f"{file.name} is refused: its {name} is {what}: only ordinary tables are read."
                )
            generated = [
                row["name"]
                for row in connection.execute(f'PRAGMA main.table_xinfo("{name}")')
                if row["hidden"] in GENERATED
            ]
            if generated:
                raise ImportRefused(
                    f"{file.name} is refused: its {name} table has a generated column "
                    f"({', '.join(generated)}): only ordinary columns are read."
                )
        yield Database(connection, file.name, set(present))
    finally:
        connection.close()
