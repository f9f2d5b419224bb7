"""`manage.py backup` and `manage.py restore`: a backup taken while Neotask writes
restores to the same rows and files; a bad archive or a used target is refused with
a clear error and nothing written."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import json
import sqlite3
import subprocess
import sys
import tarfile
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import close_old_connections, connection

from memory.models import Event
from memory.tasks import embed_events
from memory.workspace import DEFAULT_AGENT, workspace_dir
from tests.support.processes import ROOT, app_env
from tests.support.scripted_llm import Reply
from tests.support.websocket import connect, send, until

on_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the team profile's database"
)
on_sqlite = pytest.mark.skipif(connection.vendor != "sqlite", reason="the embedded profile's")
# Set by the embedding job after the chat wrote them: they may differ at the snapshot.
EMBEDDING_COLUMNS = {"embedding", "embedded_at", "embedding_error", "embedding_retry_at"}


def back_up(output: Path, *args: str) -> str:
    out = io.StringIO()
    call_command("backup", "--output", str(output), *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def restore(archive: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """`manage.py restore` in a process of its own, in `env` (`app_env`: a fresh data
    dir and, on the team profile, a fresh PostgreSQL database)."""
    return subprocess.run(
        [sys.executable, "manage.py", "restore", str(archive), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def workspace_with_files(user) -> Path:
    workspace = workspace_dir(user.pk, DEFAULT_AGENT)
    (workspace / "memory").mkdir()
    (workspace / "MEMORY.md").write_text("# Alice\nPrefers tea.\n")
    (workspace / "memory" / "2026-12-01.md").write_text("Met Bob at the station.\n")
    (workspace / "data.bin").write_bytes(bytes(range(256)) * 64)
    return workspace


def file_hashes(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


# Reading every row of both databases -------------------------------------------------


def open_restored(env: dict[str, str]) -> Any:
    if connection.vendor == "sqlite":
        return sqlite3.connect(Path(env["NEOTASK_DATA_DIR"]) / "neotask.sqlite3")
    import psycopg

    return psycopg.connect(env["DATABASE_URL"])


def open_live() -> Any:
    """The test database through a plain driver connection, as the restored one is
    read (Django's converts SQLite's dates)."""
    if connection.vendor == "sqlite":
        return sqlite3.connect(connection.settings_dict["NAME"])
    import psycopg

    params = connection.settings_dict
    return psycopg.connect(
        dbname=params["NAME"],
        user=params["USER"],
        password=params["PASSWORD"],
        host=params["HOST"],
        port=params["PORT"] or None,
    )


def table_names(cursor: Any) -> list[str]:
    if connection.vendor == "sqlite":
        cursor.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    else:
        cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    return sorted(row[0] for row in cursor.fetchall())


def every_row(cursor: Any) -> dict[str, list[str]]:
    """Each table's rows, as text, in a stable order."""
    rows = {}
    for table in table_names(cursor):
        if connection.vendor == "sqlite":
            cursor.execute(f'SELECT * FROM "{table}"')
            rows[table] = sorted(repr(row) for row in cursor.fetchall())
        else:
            cursor.execute(f'SELECT t::text FROM "{table}" t')
            rows[table] = sorted(row[0] for row in cursor.fetchall())
    return rows


def events_by_id(cursor: Any, columns: list[str]) -> dict[int, tuple]:
    cursor.execute(f"SELECT id, {', '.join(columns)} FROM events")
    return {
        row[0]: tuple(bytes(v) if isinstance(v, memoryview) else v for v in row[1:])
        for row in cursor.fetchall()
    }


def live_rows() -> dict[str, list[str]]:
    with closing(open_live()) as live:
        return every_row(live.cursor())


# Writers -----------------------------------------------------------------------------


class Writer(threading.Thread):
    """Runs `step` over and over in a thread of its own until stopped."""

    def __init__(self, step) -> None:
        super().__init__(daemon=True)
        self.step = step
        self.done = 0
        self.halt = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                self.step()
                self.done += 1
        except BaseException as exc:  # reported by the test
            self.failure = exc
        finally:
            close_old_connections()
            connection.close()

    def wait_for(self, steps: int) -> None:
        while self.done < steps and self.failure is None and self.is_alive():
            self.halt.wait(0.01)

    def stop(self) -> None:
        self.halt.set()
        self.join(60)
        assert self.failure is None, self.failure


TURNS = 10


@pytest.mark.django_db(transaction=True)
async def test_it_restores_a_backup_taken_while_a_chat_streams_and_a_job_embeds(
    tmp_path, owner, session, llm
):
    workspace = await sync_to_async(workspace_with_files)(owner)
    llm.script(*[Reply(deltas=[f"word{n} " for n in range(30)], delay=0.02)] * TURNS)
    before = await sync_to_async(live_rows)()

    def embedding_job() -> None:
        waiting = Event.objects.filter(owner=owner, embedding__isnull=True)
        if not embed_events(list(waiting.values_list("pk", flat=True)[:8])):
            threading.Event().wait(0.01)

    async def chat() -> None:
        socket = await connect(owner, session.key)
        for number in range(TURNS):
            await send(socket, type="message", text=f"question {number}")
            await until(socket, timeout=60)
        await socket.disconnect()

    embedding = Writer(embedding_job)
    embedding.start()
    try:
        chatting = asyncio.create_task(chat())
        while await Event.objects.filter(event_type="assistant_response").acount() < 2:
            await asyncio.sleep(0.01)
        embedding.wait_for(1)
        during = embedding.done
        archive = tmp_path / "backup.tar"
        await sync_to_async(in_own_thread(back_up), thread_sensitive=False)(archive)
        assert not chatting.done()  # the chat streamed throughout the backup
        await chatting
    finally:
        await sync_to_async(embedding.stop, thread_sensitive=False)()
    assert during < embedding.done  # and the job embedded throughout
    await sync_to_async(in_own_thread(check_restored), thread_sensitive=False)(
        archive, tmp_path, workspace, before
    )


def in_own_thread(work):
    """`work` for a thread of its own, which closes the connection it opened."""

    def run(*args: Any) -> Any:
        try:
            return work(*args)
        finally:
            connection.close()

    return run


def check_restored(archive: Path, tmp_path: Path, workspace: Path, before: dict) -> None:
    after = live_rows()
    env = app_env(tmp_path / "restored")
    result = restore(archive, env)
    assert result.returncode == 0, result.stderr
    restored_workspaces = tmp_path / "restored" / "workspaces"
    assert file_hashes(restored_workspaces) == file_hashes(workspace.parent.parent)

    manifest = archived_json(archive, "manifest.json")
    with closing(open_restored(env)) as restored:
        cursor = restored.cursor()
        restored_rows = every_row(cursor)
        # Tables neither the chat nor the job touched (the same rows before and after,
        # and as many at the snapshot: a chat's input row lives only while it streams):
        # every row as it is now.
        counted = manifest["database"]["tables"]
        untouched = {
            table
            for table, rows in after.items()
            if before.get(table) == rows and counted[table] == len(rows)
        }
        assert "auth_user" in untouched and "facts" in untouched
        for table in untouched:
            assert restored_rows[table] == after[table], table
        # Every table: as many rows as the manifest counted in the snapshot.
        for table, count in counted.items():
            assert len(restored_rows[table]) == count, table
        # The events: those the snapshot saw, none missing in between, each as it is
        # now but for the vector the job may have added since.
        columns = [field.column for field in Event._meta.concrete_fields if field.column != "id"]
        plain = [column for column in columns if column not in EMBEDDING_COLUMNS]
        restored_events = events_by_id(cursor, plain)
        restored_vectors = events_by_id(cursor, ["embedding"])
    with closing(open_live()) as live:
        live_events = events_by_id(live.cursor(), plain)
        live_vectors = events_by_id(live.cursor(), ["embedding"])
    last = max(restored_events)
    assert len(live_events) > len(restored_events)  # the chat went on after the snapshot
    assert restored_events == {i: row for i, row in live_events.items() if i <= last}
    types = [row[plain.index("event_type")] for row in restored_events.values()]
    assert 2 <= types.count("assistant_response") < TURNS
    embedded = [i for i, vector in restored_vectors.items() if vector[0] is not None]
    assert embedded, "the job had embedded events before the snapshot"
    for event_id, vector in restored_vectors.items():
        assert vector[0] is None or vector == live_vectors[event_id]

    if connection.vendor == "sqlite":  # and the snapshot is restored row for row
        snapshot = tmp_path / "snapshot.sqlite3"
        snapshot.write_bytes(archived_bytes(archive, "database/neotask.sqlite3"))
        with closing(sqlite3.connect(snapshot)) as archived:
            assert every_row(archived.cursor()) == restored_rows


def archived_bytes(archive: Path, name: str) -> bytes:
    with tarfile.open(archive) as tar:
        member = tar.extractfile(name)
        assert member is not None
        return member.read()


def archived_json(archive: Path, name: str) -> Any:
    return json.loads(archived_bytes(archive, name))


def test_it_never_overwrites_an_archive(tmp_path, alice):
    existing = tmp_path / "backup.tar"
    existing.write_bytes(b"last week's backup")

    with pytest.raises(CommandError, match="already exists"):
        back_up(existing)

    assert existing.read_bytes() == b"last week's backup"
    assert [path.name for path in tmp_path.iterdir()] == ["backup.tar"]


def test_it_leaves_the_secret_key_out_unless_asked(tmp_path, alice):
    back_up(tmp_path / "plain.tar")
    back_up(tmp_path / "with-key.tar", "--include-secret-key")

    with tarfile.open(tmp_path / "plain.tar") as plain:
        assert "secret_key" not in plain.getnames()
    assert archived_bytes(tmp_path / "with-key.tar", "secret_key") == settings.SECRET_KEY.encode()
    assert (tmp_path / "with-key.tar").stat().st_mode & 0o077 == 0


@pytest.mark.django_db(transaction=True)
def test_it_restores_the_secret_key_it_was_given(tmp_path, alice):
    back_up(tmp_path / "with-key.tar", "--include-secret-key")

    env = app_env(tmp_path / "restored")
    result = restore(tmp_path / "with-key.tar", env)

    assert result.returncode == 0, result.stderr
    assert (tmp_path / "restored" / "secret_key").read_text() == settings.SECRET_KEY


@pytest.mark.django_db(transaction=True)
def test_it_records_links_in_a_workspace_and_never_follows_them(tmp_path, alice):
    workspace = workspace_with_files(alice)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("TOP SECRET of another user")
    (workspace / "leak.md").symlink_to(outside / "secret.md")
    (workspace / "memory" / "elsewhere").symlink_to(outside)

    back_up(tmp_path / "backup.tar")

    archive = tmp_path / "backup.tar"
    assert b"TOP SECRET" not in archive.read_bytes()
    skipped = {
        entry["path"]: entry["why"] for entry in archived_json(archive, "manifest.json")["skipped"]
    }
    prefix = f"{alice.pk}/{DEFAULT_AGENT}"
    assert set(skipped) == {f"{prefix}/leak.md", f"{prefix}/memory/elsewhere"}
    assert "not followed" in skipped[f"{prefix}/leak.md"]
    result = restore(archive, app_env(tmp_path / "restored"))
    assert result.returncode == 0, result.stderr
    restored = tmp_path / "restored" / "workspaces" / prefix
    assert sorted(path.name for path in restored.rglob("*")) == [
        "2026-12-01.md",
        "MEMORY.md",
        "data.bin",
        "memory",
    ]


@pytest.mark.django_db(transaction=True)
def test_it_refuses_a_target_holding_data_unless_forced(tmp_path, alice):
    workspace = workspace_with_files(alice)
    archive = tmp_path / "backup.tar"
    back_up(archive)
    env = app_env(tmp_path / "restored")
    assert restore(archive, env).returncode == 0
    (tmp_path / "restored" / "workspaces" / "stray.md").write_text("written since")
    with closing(open_restored(env)) as target:
        target.cursor().execute("INSERT INTO auth_group (name) VALUES ('made since')")
        target.commit()

    again = restore(archive, env)

    assert again.returncode == 1
    assert "already has" in again.stderr and "--force" in again.stderr
    assert "Traceback" not in again.stderr
    assert (tmp_path / "restored" / "workspaces" / "stray.md").exists()
    forced = restore(archive, env, "--force")
    assert forced.returncode == 0, forced.stderr
    restored = tmp_path / "restored" / "workspaces"
    assert file_hashes(restored) == file_hashes(workspace.parent.parent)
    with closing(open_restored(env)) as target:
        assert every_row(target.cursor())["auth_group"] == []


@pytest.mark.django_db(transaction=True)
def test_it_restores_hidden_files_and_odd_names(tmp_path, alice):
    workspace = workspace_with_files(alice)
    (workspace / ".hidden.md").write_text("hidden")
    (workspace / "back\\slash ü.md").write_text("odd")
    (workspace / "empty.md").write_bytes(b"")
    back_up(tmp_path / "backup.tar")

    result = restore(tmp_path / "backup.tar", app_env(tmp_path / "restored"))

    assert result.returncode == 0, result.stderr
    restored = tmp_path / "restored" / "workspaces"
    assert file_hashes(restored) == file_hashes(workspace.parent.parent)
    assert len(file_hashes(restored)) == 6


@pytest.mark.django_db(transaction=True)
def test_it_restores_an_archive_compressed_afterwards(tmp_path, alice):
    workspace = workspace_with_files(alice)
    back_up(tmp_path / "backup.tar")
    compressed = tmp_path / "backup.tar.gz"
    compressed.write_bytes(gzip.compress((tmp_path / "backup.tar").read_bytes()))

    result = restore(compressed, app_env(tmp_path / "restored"))

    assert result.returncode == 0, result.stderr
    restored = tmp_path / "restored" / "workspaces"
    assert file_hashes(restored) == file_hashes(workspace.parent.parent)


def test_it_refuses_workspaces_that_are_not_empty_and_writes_nothing(tmp_path, alice):
    archive = tmp_path / "backup.tar"
    back_up(archive)
    env = app_env(tmp_path / "restored")
    (tmp_path / "restored" / "workspaces").mkdir(parents=True)
    (tmp_path / "restored" / "workspaces" / "notes.md").write_text("mine")

    result = restore(archive, env)

    assert result.returncode == 1
    assert "workspaces is not empty" in result.stderr
    with closing(open_restored(env)) as target:
        assert table_names(target.cursor()) == []


@on_sqlite
def test_it_refuses_a_sqlite_database_another_process_has_open(tmp_path, alice):
    archive = tmp_path / "backup.tar"
    back_up(archive)
    env = app_env(tmp_path / "restored")
    (tmp_path / "restored").mkdir()
    with closing(sqlite3.connect(tmp_path / "restored" / "neotask.sqlite3")) as running:
        running.execute("PRAGMA journal_mode=WAL")
        running.execute("CREATE TABLE serving (a)")
        running.commit()
        running.execute("SELECT * FROM serving").fetchall()  # as a serving process has

        result = restore(archive, env, "--force")

    assert result.returncode == 1
    assert "open in another process: stop Neotask first" in result.stderr


@on_postgresql
def test_it_refuses_a_postgresql_database_others_are_connected_to(tmp_path, alice):
    import psycopg

    archive = tmp_path / "backup.tar"
    back_up(archive)
    env = app_env(tmp_path / "restored")
    with psycopg.connect(env["DATABASE_URL"]):
        result = restore(archive, env, "--force")

    assert result.returncode == 1
    assert "other connections use the database" in result.stderr


@on_postgresql
def test_it_says_when_postgresql_is_unreachable_for_backup_or_restore(tmp_path, alice):
    archive = tmp_path / "backup.tar"
    back_up(archive)
    env = {**app_env(tmp_path / "restored"), "DATABASE_URL": "postgresql://postgres@127.0.0.1:1/x"}

    result = restore(archive, env)
    second = subprocess.run(
        [sys.executable, "manage.py", "backup", "--output", str(tmp_path / "second.tar")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 1
    assert "PostgreSQL is unreachable" in result.stderr
    assert "Traceback" not in result.stderr
    assert second.returncode == 1
    assert "PostgreSQL could not be read: connection failed" in second.stderr
    assert not (tmp_path / "second.tar").exists()


@on_postgresql
def test_it_names_the_package_when_pg_dump_or_pg_restore_is_missing(tmp_path, alice, monkeypatch):
    archive = tmp_path / "backup.tar"
    back_up(archive)
    env = {**app_env(tmp_path / "restored"), "PATH": str(tmp_path)}
    monkeypatch.setenv("PATH", str(tmp_path))

    with pytest.raises(CommandError, match="pg_dump is not on PATH: install the postgresql-client"):
        back_up(tmp_path / "second.tar")
    result = restore(archive, env)

    assert not (tmp_path / "second.tar").exists()
    assert "pg_restore is not on PATH: install the postgresql-client" in result.stderr


# Bad archives --------------------------------------------------------------------------


def rebuilt(archive: Path, out: Path, change) -> Path:
    """A copy of `archive` whose members went through `change(info, data)`, which
    returns the (info, data) pairs to write instead."""
    with tarfile.open(archive) as source, tarfile.open(out, "w") as target:
        for info in source.getmembers():
            handle = source.extractfile(info)
            for new_info, data in change(info, handle.read() if handle else b""):
                new_info.size = len(data)
                target.addfile(new_info, io.BytesIO(data))
    return out


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


def with_extra(name: str, kind: bytes = tarfile.REGTYPE, link: str = ""):
    def change(info, data):
        if info.name == "manifest.json":
            return [(member(name, kind, link), b"planted"), (info, data)]
        return [(info, data)]

    return change


def manifest_changed(**changes):
    def change(info, data):
        if info.name == "manifest.json":
            data = json.dumps({**json.loads(data), **changes}).encode()
        return [(info, data)]

    return change


def content_changed(info, data):
    if info.name.endswith("MEMORY.md"):
        data = data.replace(b"tea", b"TEA")
    return [(info, data)]


def without_manifest(info, data):
    return [] if info.name == "manifest.json" else [(info, data)]


BAD_ARCHIVES = {
    "truncated": (lambda a, o: o.write_bytes(a.read_bytes()[: a.stat().st_size // 2]), "truncated"),
    "not a tar": (lambda a, o: o.write_bytes(b"not an archive" * 100), "not a tar archive"),
    "missing": (lambda a, o: None, "does not exist"),
    "wrong version": (
        lambda a, o: rebuilt(a, o, manifest_changed(format_version=99)),
        "format version is 99",
    ),
    "not ours": (lambda a, o: rebuilt(a, o, manifest_changed(format="x")), "not a Neotask"),
    "changed member": (lambda a, o: rebuilt(a, o, content_changed), "Checksum mismatch"),
    "no manifest": (lambda a, o: rebuilt(a, o, without_manifest), "has no manifest.json"),
    "absolute path": (lambda a, o: rebuilt(a, o, with_extra("/tmp/evil")), "not a safe path"),
    "dot-dot": (
        lambda a, o: rebuilt(a, o, with_extra("workspaces/../../evil")),
        "not a safe path",
    ),
    "symlink member": (
        lambda a, o: rebuilt(a, o, with_extra("workspaces/1/x", tarfile.SYMTYPE, "/etc/passwd")),
        "a link or a special file",
    ),
    "hard link member": (
        lambda a, o: rebuilt(a, o, with_extra("workspaces/1/y", tarfile.LNKTYPE, "secret_key")),
        "a link or a special file",
    ),
    "unexpected member": (lambda a, o: rebuilt(a, o, with_extra("evil.sh")), "not part of"),
    "unlisted member": (
        lambda a, o: rebuilt(a, o, with_extra("workspaces/1/main/extra.md")),
        "does not list",
    ),
}


@pytest.mark.parametrize("case", BAD_ARCHIVES)
def test_it_refuses_a_bad_archive_and_writes_nothing(tmp_path, alice, case):
    workspace_with_files(alice)
    good = tmp_path / "good.tar"
    back_up(good)
    make, message = BAD_ARCHIVES[case]
    bad = tmp_path / "bad.tar"
    make(good, bad)
    env = app_env(tmp_path / "restored")

    result = restore(bad, env)

    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    # Only what starting Django makes (the job cluster's status cache: core.profiles).
    left = {path.name for path in (tmp_path / "restored").iterdir()} - {"cache"}
    assert sorted(left) == ["secret_key", "static"]
    with closing(open_restored(env)) as target:
        assert table_names(target.cursor()) == []
