"""Hostile import files: a small upload must not compute for hours or expand into the
database. Each file is built here and imported through the real entry points (the
upload page and its job, the import_aidaemon and import_openclaw commands)."""

from __future__ import annotations

import io
import json
import re
import sqlite3
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Sum, TextField
from django.db.models.functions import Cast, Length

from importers.aidaemon import reading
from importers.jobs import run_import
from importers.models import ImportJob
from memory.models import Event
from sessions_app.models import Session
from tests.support.imports import SCHEMA, upload, zipped
from tests.support.records import take_queued_tasks

ROWS, ROW_BYTES = 200, 100 * 1024  # what the small files below expand to
MAX_EVENT_BYTES = 64 * 1024  # what docs/data.md promises an imported message keeps at most
BUDGET = "importers.aidaemon.database.READ_SECONDS"
MESSAGE_COLUMNS = "id, session_id, role, content, created_at"
# A message a row, counted by a recursive CTE: for ever, or ROWS times.
ENDLESS = """
    WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n)
    SELECT x, 'm' || x, 's1', 'user', 'hello', '2025-01-01T00:00:00Z' FROM n
"""
EXPANDING = f"""
    WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < {ROWS})
    SELECT x, 'm' || x, 's1', 'user', printf('%.*c', {ROW_BYTES}, 'x'),
           '2025-01-01T00:00:00Z' FROM n
"""


def fts_over_view(rows: str) -> str:
    """`messages` as an FTS5 table whose content is a view computing `rows`."""
    return f"""
        CREATE VIEW source(rowid, {MESSAGE_COLUMNS}) AS {rows};
        CREATE VIRTUAL TABLE messages USING fts5({MESSAGE_COLUMNS},
            content='source', content_rowid='rowid');
    """


HOSTILE_SCHEMAS = {
    "an FTS5 table over a recursive view": (fts_over_view(ENDLESS), "is a virtual table"),
    "an FTS5 table over an expanding view": (fts_over_view(EXPANDING), "is a virtual table"),
    "a view": (f"CREATE VIEW messages(n, {MESSAGE_COLUMNS}) AS {EXPANDING};", "is a view"),
    "a generated column": (
        "CREATE TABLE messages (id TEXT, session_id TEXT, role TEXT, created_at TEXT, "
        f"content TEXT GENERATED ALWAYS AS (printf('%.*c', {ROW_BYTES}, 'x')) VIRTUAL);"
        + "".join(
            f"INSERT INTO messages (id, session_id, role, created_at) "
            f"VALUES ('m{n}', 's1', 'user', '2025-01-01T00:00:00Z');"
            for n in range(ROWS)
        ),
        "has a generated column (content)",
    ),
}


def hostile_db(path: Path, schema: str) -> Path:
    with sqlite3.connect(path) as db:
        db.executescript(schema)
    db.close()
    return path


def stored_bytes() -> int:
    """What the events take in the database: their text and their data as JSON."""
    sizes = Event.objects.aggregate(
        text=Sum(Length("text")), data=Sum(Length(Cast("data", TextField())))
    )
    return (sizes["text"] or 0) + (sizes["data"] or 0)


def upload_and_run(client: Any, kind: str, name: str, content: bytes) -> ImportJob:
    """Upload through the page, then run the job as the worker does."""
    take_queued_tasks()
    response = upload(client, kind, name, content)
    assert response.status_code == 302, response.content.decode()
    [queued] = take_queued_tasks()
    run_import(*queued["args"])
    return ImportJob.objects.get(pk=queued["args"][0])


# aidaemon: only ordinary tables are read


@pytest.mark.parametrize("case", HOSTILE_SCHEMAS)
def test_it_fails_an_upload_whose_messages_is_not_an_ordinary_table(
    alice, alice_client, tmp_path, case
):
    schema, problem = HOSTILE_SCHEMAS[case]
    path = hostile_db(tmp_path / "aidaemon.db", schema)
    assert path.stat().st_size < 64 * 1024  # a small file passes the upload's checks

    job = upload_and_run(alice_client, "aidaemon", "aidaemon.db", path.read_bytes())

    assert job.status == "failed", job.report
    assert problem in job.error and "only ordinary" in job.error
    assert job.error.startswith("aidaemon.db is refused: its messages")
    assert not Event.objects.exists() and not Session.objects.exists()
    assert not job.upload_dir.exists()
    page = alice_client.get(f"/import/{job.pk}/").content.decode()
    assert "The import failed: aidaemon.db is refused" in page


@pytest.mark.parametrize("case", HOSTILE_SCHEMAS)
def test_the_command_refuses_what_is_not_an_ordinary_table(alice, tmp_path, case):
    schema, problem = HOSTILE_SCHEMAS[case]
    path = hostile_db(tmp_path / "aidaemon.db", schema)

    with pytest.raises(CommandError, match=re.escape(problem)):
        call_command("import_aidaemon", str(path), user="alice", stdout=io.StringIO())

    assert not Event.objects.exists()


def test_it_refuses_a_database_whose_write_ahead_log_it_would_not_read(alice, tmp_path):
    path = hostile_db(tmp_path / "aidaemon.db", SCHEMA + "PRAGMA journal_mode=WAL;")
    live = sqlite3.connect(path)  # aidaemon still running: its last writes are in the log
    live.execute(
        f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES ('m1', 's1', 'user', 'hi', '2025-01-01')"
    )
    live.commit()
    try:
        with pytest.raises(CommandError, match=r"write-ahead log .*aidaemon\.db-wal"):
            call_command("import_aidaemon", str(path), user="alice", stdout=io.StringIO())
    finally:
        live.close()  # the log folded in and removed, as when aidaemon stops

    call_command("import_aidaemon", str(path), user="alice", stdout=io.StringIO())
    assert Event.objects.get().text == "hi"


# aidaemon: rows and messages of a bounded size


def big_messages_db(path: Path) -> Path:
    """ROWS messages and ROWS events of ROW_BYTES each, one message of 3 MB and one event
    whose data is 3 MB: ordinary tables, a file as large as what it holds."""
    big = "x" * ROW_BYTES
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA)
        db.executemany(
            f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES (?, 's1', 'user', ?, ?)",
            [
                (f"m{n}", f"{n} {big}", f"2025-01-01T00:{n // 60:02}:{n % 60:02}Z")
                for n in range(ROWS)
            ]
            + [("huge", "h" * (3 * 1024 * 1024), "2025-01-02T00:00:00Z")],
        )
        db.executemany(
            "INSERT INTO events (session_id, event_type, data, created_at) VALUES ('s2', ?, ?, ?)",
            [
                (
                    "assistant_response",
                    json.dumps({"content": f"{n} {big}", "tool_calls": []}),
                    f"2025-01-03T00:{n // 60:02}:{n % 60:02}Z",
                )
                for n in range(ROWS)
            ]
            + [
                (
                    "user_message",
                    json.dumps({"content": "h" * (3 * 1024 * 1024)}),
                    "2025-01-04T00:00:00Z",
                )
            ],
        )
    db.close()
    return path


def test_it_cuts_each_oversized_message_and_says_so(alice, tmp_path):
    path = big_messages_db(tmp_path / "aidaemon.db")
    out = io.StringIO()

    call_command("import_aidaemon", str(path), user="alice", stdout=out)

    events = Event.objects.filter(owner=alice)
    texts = events.exclude(event_type="session_start").values_list("text", flat=True)
    assert len(texts) == 2 * ROWS + 1  # the 3 MB event's data is not read: skipped
    for text in texts:
        assert len(text.encode()) <= MAX_EVENT_BYTES
        assert "[cut on import" in text
    for data in events.values_list("data", flat=True):
        assert len(json.dumps(data, ensure_ascii=False).encode()) <= MAX_EVENT_BYTES
    # At most the limit each, in text and in data: not the 90 MB they would take whole.
    assert stored_bytes() <= 2 * (2 * ROWS + 1) * MAX_EVENT_BYTES
    table = out.getvalue()
    assert f"{ROWS + 1} messages longer than 64 KB were cut" in table
    assert f"{ROWS} events longer than 64 KB were cut" in table
    assert "data longer than 1024 KB" in table


def test_it_stops_reading_past_its_time_budget_and_keeps_the_sessions_it_finished(
    alice, tmp_path, monkeypatch
):
    path = tmp_path / "aidaemon.db"
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA)
        db.executemany(
            f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES (?, ?, 'user', ?, ?)",
            [
                (f"{session}{n}", session, f"{session} {n}", f"2025-01-0{day}T00:00:{n % 60:02}Z")
                for day, session in ((1, "early"), (2, "late"))
                for n in range(3000)
            ],
        )
    db.close()
    real = reading.message_event

    def clock_runs_out(row: dict[str, Any], owner: Any) -> Event:
        # The budget is spent while the second session is being read.
        if row["session_id"] == "late":
            monkeypatch.setattr(BUDGET, 0.0)
        return real(row, owner)

    monkeypatch.setattr("importers.aidaemon.writing.message_event", clock_runs_out)
    out = io.StringIO()

    with pytest.raises(CommandError, match=r"Reading aidaemon\.db took longer than 0 s"):
        call_command("import_aidaemon", str(path), user="alice", stdout=out)

    assert Session.objects.get().key == "agent:main:import:early"  # finished: kept whole
    assert Event.objects.count() == 3000
    assert not Event.objects.filter(text__startswith="late").exists()  # rolled back whole
    assert "sessions" in out.getvalue()  # the report of what was done


def test_a_job_past_its_time_budget_fails_with_the_reason(
    alice, alice_client, tmp_path, monkeypatch
):
    path = tmp_path / "aidaemon.db"
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA)
        db.executemany(
            f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES (?, ?, 'user', 'hi', ?)",
            [(f"m{n}", f"s{n}", "2025-01-01T00:00:00Z") for n in range(2000)],
        )
    db.close()
    monkeypatch.setattr(BUDGET, 0.0)

    job = upload_and_run(alice_client, "aidaemon", "aidaemon.db", path.read_bytes())

    assert job.status == "failed"
    assert "Reading aidaemon.db took longer than 0 s: stopped" in job.error
    assert not Event.objects.exists()
    assert not job.upload_dir.exists()


# OpenClaw: lines and messages of a bounded size, and no zip bombs


def entry(n: int, content: str) -> str:
    message = {"role": "user" if n % 2 else "assistant", "content": content}
    return json.dumps({"type": "message", "id": f"e{n}", "message": message}) + "\n"


def test_it_cuts_oversized_transcript_messages_and_passes_over_a_huge_line(alice, tmp_path):
    root = tmp_path / "agent"
    (root / "sessions").mkdir(parents=True)
    with (root / "sessions" / "s.jsonl").open("w") as transcript:
        transcript.write(entry(0, "y" * (100 * 1024 * 1024)))  # one line of 100 MB
        for n in range(1, ROWS + 1):
            transcript.write(entry(n, f"{n} " + "x" * ROW_BYTES))
    out = io.StringIO()

    tracemalloc.start()
    try:
        call_command("import_openclaw", str(root), user="alice", stdout=out)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert peak < 16 * 1024 * 1024  # the 100 MB line was never held whole
    texts = Event.objects.exclude(event_type="session_start").values_list("text", flat=True)
    assert len(texts) == ROWS
    assert all(len(text.encode()) <= MAX_EVENT_BYTES for text in texts)
    assert stored_bytes() <= 2 * (ROWS + 1) * MAX_EVENT_BYTES
    table = out.getvalue()
    assert f"{ROWS} events longer than 64 KB were cut" in table
    assert "s.jsonl line 1: longer than 1024 KB" in table


def test_it_refuses_a_zip_that_expands_far_beyond_its_size(alice, alice_client):
    lines = "".join(entry(n, "x" * ROW_BYTES) for n in range(ROWS))
    content = zipped({"agent/sessions/s.jsonl": lines.encode()})
    assert len(content) < 64 * 1024 < len(lines)  # 20 MB in a small upload

    response = upload(alice_client, "openclaw", "agent.zip", content)

    assert response.status_code == 400
    assert "times its size" in response.content.decode()
    assert not ImportJob.objects.exists() and not Event.objects.exists()
