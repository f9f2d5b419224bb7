"""The database's part of a backup: a snapshot of one moment, taken while Neotask
runs, and its way back into an empty database.

SQLite: the online backup API copies the database in one step, that is in one read
transaction; in WAL mode writers carry on meanwhile and the copy is the database as
it was when the step began. PostgreSQL: pg_dump in custom format, run on a snapshot
exported by a REPEATABLE READ transaction that also counts the rows, so the counts
in the manifest are those of the dump.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import sqlite3
import subprocess
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import DatabaseError, connection
from django.db.backends.postgresql.client import DatabaseClient

from importers.backup import BackupError
from importers.backup.manifest import DATABASE_MEMBERS

PACKAGE_HINT = (
    "install the postgresql-client package (Debian/Ubuntu: apt install postgresql-client)"
)
# SQLite's unix VFS: every connection to a WAL database holds a shared lock on this
# byte of the -shm file for as long as it is open (sqlite3.c, UNIX_SHM_DMS).
SHM_DMS_BYTE = 128
SYSTEM_SCHEMAS = ("pg_catalog", "information_schema", "pg_toast")


@dataclass(frozen=True)
class Snapshot:
    vendor: str
    path: Path
    tables: dict[str, int]

    @property
    def member(self) -> str:
        return DATABASE_MEMBERS[self.vendor]


def vendor() -> str:
    if connection.vendor not in DATABASE_MEMBERS:
        raise BackupError(f"Backups support SQLite and PostgreSQL, not {connection.vendor}.")
    return connection.vendor


def sqlite_path() -> Path:
    return Path(connection.settings_dict["NAME"])


def take_snapshot(scratch: Path) -> Snapshot:
    if vendor() == "sqlite":
        return sqlite_snapshot(scratch / "neotask.sqlite3")
    return postgres_snapshot(scratch / "neotask.dump")


def sqlite_snapshot(target: Path) -> Snapshot:
    source_path = sqlite_path()
    if not source_path.is_file():
        raise BackupError(f"There is no database at {source_path} to back up.")
    with (
        closing(sqlite3.connect(source_path, timeout=20)) as source,
        closing(sqlite3.connect(target)) as copy,
    ):
        source.backup(copy)  # pages=-1: all in one step, one read transaction
        copy.execute("PRAGMA journal_mode=DELETE")  # one file, no -wal beside it
        tables = table_counts(copy.cursor(), "sqlite")
    return Snapshot("sqlite", target, tables)


def postgres_snapshot(target: Path) -> Snapshot:
    program = pg_program("pg_dump")
    holder = connection.copy()  # a connection of its own, kept in its transaction
    try:
        holder.set_autocommit(False)
        with holder.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            cursor.execute("SELECT pg_export_snapshot()")
            exported = cursor.fetchone()[0]
            tables = table_counts(cursor, "postgresql")
        arguments, dbname = pg_arguments(holder.settings_dict)
        run_pg(
            [
                program,
                "--format=custom",
                "--compress=1",
                f"--snapshot={exported}",
                f"--file={target}",
                *arguments,
                dbname,
            ],
            holder.settings_dict,
            "pg_dump",
        )
    except DatabaseError as exc:
        raise BackupError(f"PostgreSQL could not be read: {first_line(exc)}") from None
    finally:
        if holder.connection is not None:
            holder.rollback()
        holder.close()
    return Snapshot("postgresql", target, tables)


def table_counts(cursor: Any, vendor: str) -> dict[str, int]:
    """Rows per table: every table of the database, Neotask's and Django's alike."""
    if vendor == "sqlite":
        cursor.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name"
        )
        names = [row[0] for row in cursor.fetchall()]
    else:
        cursor.execute(
            "SELECT schemaname, tablename FROM pg_tables "
            f"WHERE schemaname NOT IN {SYSTEM_SCHEMAS!r} ORDER BY schemaname, tablename"
        )
        names = [t if s == "public" else f"{s}.{t}" for s, t in cursor.fetchall()]
    counts = {}
    for name in names:
        quoted = ".".join(f'"{part}"' for part in name.split(".", 1))
        cursor.execute(f"SELECT count(*) FROM {quoted}")
        counts[name] = cursor.fetchone()[0]
    return counts


# Restoring ---------------------------------------------------------------------------


def check_target(vendor_in_archive: str, force: bool) -> None:
    """Refuse a target Neotask is using, of the other vendor, or holding data (unless forced)."""
    here = vendor()
    if vendor_in_archive != here:
        names = {"sqlite": "SQLite (DATABASE_URL unset)", "postgresql": "PostgreSQL"}
        raise BackupError(
            f"The backup is of a {names[vendor_in_archive]} database and this Neotask uses "
            f"{names[here]}; restore it with the same profile."
        )
    connection.close()
    if here == "sqlite":
        path = sqlite_path()
        if sqlite_in_use(path):
            raise BackupError(f"{path} is open in another process: stop Neotask first.")
        tables = sqlite_tables(path)
    else:
        tables = postgres_tables()
    if tables and not force:
        raise BackupError(
            f"The target database already has {len(tables)} tables ({', '.join(tables[:3])}, "
            "…): restore into an empty one, or pass --force to replace it."
        )


def sqlite_in_use(path: Path) -> bool:
    """Whether another process has the WAL database open: its -shm lock byte is held.
    (This process has no connection to it: check_target closed Django's.)"""
    try:
        descriptor = os.open(f"{path}-shm", os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False  # no one has it open in WAL mode
    try:
        fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, SHM_DMS_BYTE)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            return True
        raise
    else:
        fcntl.lockf(descriptor, fcntl.LOCK_UN, 1, SHM_DMS_BYTE)
        return False
    finally:
        os.close(descriptor)


def sqlite_tables(path: Path) -> list[str]:
    if not path.exists() or path.stat().st_size == 0:
        return []
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as target:
        try:
            return list(table_counts(target.cursor(), "sqlite"))
        except sqlite3.DatabaseError as exc:
            raise BackupError(f"{path} is not a SQLite database ({exc}).") from None


def postgres_tables() -> list[str]:
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            others = cursor.fetchone()[0]
            cursor.execute(
                "SELECT tablename FROM pg_tables "
                f"WHERE schemaname NOT IN {SYSTEM_SCHEMAS!r} ORDER BY tablename"
            )
            tables = [row[0] for row in cursor.fetchall()]
    except DatabaseError as exc:
        raise BackupError(f"PostgreSQL is unreachable: {first_line(exc)}") from None
    finally:
        connection.close()
    if others:
        raise BackupError(
            f"{others} other connections use the database {connection.settings_dict['NAME']}: "
            "stop Neotask first."
        )
    return tables


def archived_counts(snapshot: Path, vendor: str) -> dict[str, int]:
    """Rows per table in the archived database, read without writing anything: what
    a restore checks against the manifest before it touches the target."""
    if vendor == "sqlite":
        try:
            with closing(sqlite3.connect(f"file:{snapshot}?mode=ro", uri=True)) as source:
                return table_counts(source.cursor(), "sqlite")
        except sqlite3.DatabaseError as exc:
            raise BackupError(f"The archived database is damaged ({exc}).") from None
    return dump_counts(snapshot)


COPY = re.compile(r"^COPY (\S+) (?:\(.*\) )?FROM stdin;$")
PARTITION_OF = re.compile(r"^CREATE TABLE (\S+) PARTITION OF (\S+)")
ATTACH = re.compile(r"^ALTER TABLE ONLY (\S+) ATTACH PARTITION (\S+) ")


def dump_counts(snapshot: Path) -> dict[str, int]:
    """Rows per table of a pg_dump archive: its COPY blocks, as pg_restore prints the
    script (no connection). A partitioned table counts its partitions' rows, as
    count(*) does (table_counts)."""
    process = subprocess.Popen(
        [pg_program("pg_restore"), "--file=-", str(snapshot)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    counts: dict[str, int] = {}
    parents: dict[str, str] = {}
    copying: str | None = None
    for raw in process.stdout:
        if copying is not None:
            if raw == b"\\.\n":
                copying = None
            else:
                counts[copying] += 1
            continue
        line = raw.decode("utf-8", "replace").rstrip("\n")
        if match := COPY.match(line):
            copying = table_name(match[1])
            counts.setdefault(copying, 0)
        elif match := PARTITION_OF.match(line):
            parents[table_name(match[1])] = table_name(match[2])
        elif match := ATTACH.match(line):
            parents[table_name(match[2])] = table_name(match[1])
    _, errors = process.communicate()
    if process.returncode:
        detail = errors.decode("utf-8", "replace").strip().splitlines() or ["no detail"]
        raise BackupError(f"pg_restore could not read the archived database: {detail[0]}")
    for child, rows in list(counts.items()):
        parent = parents.get(child)
        while parent is not None:
            counts[parent] = counts.get(parent, 0) + rows
            parent = parents.get(parent)
    return counts


def table_name(qualified: str) -> str:
    """A dump's `public."table"` as table_counts names it."""
    name = qualified.replace('"', "")
    return name.removeprefix("public.")


def restore_database(snapshot: Path, vendor: str, force: bool) -> dict[str, int]:
    """Load the snapshot (all of it or, on failure, nothing) and count the rows."""
    connection.close()
    if vendor == "sqlite":
        return restore_sqlite(snapshot, sqlite_path())
    return restore_postgres(snapshot, force)


def restore_sqlite(snapshot: Path, target: Path) -> dict[str, int]:
    with closing(sqlite3.connect(f"file:{snapshot}?mode=ro", uri=True)) as source:
        try:
            problems = source.execute("PRAGMA integrity_check").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise BackupError(f"The archived database is damaged ({exc}).") from None
        if problems != "ok":
            raise BackupError(f"The archived database is damaged: {problems}")
        with closing(sqlite3.connect(target, timeout=20)) as copy:
            source.backup(copy)  # one transaction: the target is replaced whole or not at all
            copy.execute("PRAGMA journal_mode=WAL")
            return table_counts(copy.cursor(), "sqlite")


def restore_postgres(snapshot: Path, force: bool) -> dict[str, int]:
    program = pg_program("pg_restore")
    arguments, dbname = pg_arguments(connection.settings_dict)
    replace = ["--clean", "--if-exists"] if force else []
    run_pg(
        [
            program,
            "--exit-on-error",
            "--single-transaction",  # a failure leaves the database as it was
            "--no-owner",
            "--no-privileges",
            *replace,
            *arguments,
            f"--dbname={dbname}",
            str(snapshot),
        ],
        connection.settings_dict,
        "pg_restore",
    )
    try:
        with connection.cursor() as cursor:
            return table_counts(cursor, "postgresql")
    finally:
        connection.close()


# PostgreSQL's programs ------------------------------------------------------------------


def pg_program(name: str) -> str:
    found = shutil.which(name)
    if not found:
        raise BackupError(f"{name} is not on PATH: {PACKAGE_HINT}.")
    return found


def pg_arguments(settings_dict: dict[str, Any]) -> tuple[list[str], str]:
    """psql's connection options (user, host, port) as Django builds them, and the
    database name apart: pg_dump takes it as an argument, pg_restore as --dbname."""
    arguments, _ = DatabaseClient.settings_to_cmd_args_env(settings_dict, [])
    dbname = settings_dict["NAME"]
    if arguments[-1] == dbname:
        arguments = arguments[:-1]
    return arguments[1:], dbname


def run_pg(command: list[str], settings_dict: dict[str, Any], name: str) -> None:
    _, env = DatabaseClient.settings_to_cmd_args_env(settings_dict, [])
    done = subprocess.run(
        command, env={**os.environ, **(env or {})}, capture_output=True, text=True, check=False
    )
    if done.returncode:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise BackupError(f"{name} failed: {detail[0] if detail else f'exit {done.returncode}'}")


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
