"""Moving in from aidaemon: `import_aidaemon` and its command, on a database
the tests build with aidaemon's table definitions."""

from __future__ import annotations

import io
import json
import sqlite3
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from agent.approvals import is_allowed
from agent.models import TerminalAllowedPrefix
from importers.aidaemon import import_aidaemon, reading, writing
from importers.report import ImportRefused
from memory.embeddings import embed_text
from memory.models import Event, Fact, Macro
from memory.search import search_memory
from memory.tasks import embed_missing, needs_embedding
from memory.vectors import pack
from scheduler.models import ScheduledTask
from scheduler.schedule import next_run
from sessions_app.models import Agent, Session
from tests.support.imports import CAT, CAT_ID, DISCORD, SCHEMA, TELEGRAM, build_db, event, message
from tests.support.records import take_queued_tasks


@pytest.fixture
def aidaemon_db(tmp_path) -> Path:
    return build_db(tmp_path / "aidaemon.db")


@pytest.fixture
def neotask_facts(alice) -> None:
    Fact.objects.create(owner=alice, category="preferences", key="language", value="English")
    Fact.objects.create(owner=alice, category="pets", key="dog", value="Fido", source="agent")


def counts(report) -> dict[str, tuple[int, int, int]]:
    return {kind: (read, added, skipped) for kind, read, added, skipped, _ in report.rows()}


def reasons(report, kind: str) -> str:
    return next(why for name, *_, why in report.rows() if name == kind)


def session_events(key: str) -> list[Event]:
    session = Session.objects.get(key=key)
    return list(Event.objects.filter(session_id=str(session.pk)).order_by("created_at", "id"))


def test_it_imports_a_whole_aidaemon_database(alice, aidaemon_db, neotask_facts):
    report = import_aidaemon(aidaemon_db, alice)

    assert counts(report) == {
        "sessions": (2, 2, 0),
        "messages": (5, 4, 1),
        "events": (6, 3, 3),
        "facts": (4, 3, 1),
        "macros": (2, 1, 1),
        "scheduled tasks": (4, 3, 1),
        "terminal prefixes": (2, 2, 0),
    }
    assert "created_at is not a timestamp (1)" in reasons(report, "messages")
    assert "same message as a messages row (1)" in reasons(report, "events")
    assert "event type 'llm_call' has no Neotask equivalent (1)" in reasons(report, "events")
    assert "data is not JSON (1)" in reasons(report, "events")

    telegram = session_events(f"agent:main:import:{TELEGRAM}")
    assert [(e.event_type, e.text) for e in telegram] == [
        ("user_message", CAT),
        ("assistant_response", "Noted: Miso likes sardines."),
        ("assistant_response", ""),
        ("tool_call", ""),
        ("tool_result", "notes.md  todo.md"),
    ]
    cat, noted, calling, call, result = telegram
    assert cat.created_at == datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
    assert noted.created_at == datetime(2025, 3, 1, 9, 0, 5, tzinfo=UTC)
    assert cat.importance == 0.5 and cat.owner == alice and cat.agent == "main"
    # The right dimension is kept as the vector; the wrong one waits for embedding.
    assert bytes(cat.embedding) == pack(embed_text(CAT)) and cat.embedded_at is not None
    assert noted.embedding is None and needs_embedding().filter(pk=noted.pk).exists()
    # Tool calls in the form the agent sends back to the model; the chat names the tool.
    assert calling.data["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "terminal", "arguments": '{"command": "ls"}'},
        }
    ]
    assert call.data == {"id": "call_1", "name": "terminal", "arguments": '{"command": "ls"}'}
    assert result.data["name"] == "terminal" and result.data["tool_call_id"] == "call_1"
    session = Session.objects.get(key=f"agent:main:import:{TELEGRAM}")
    assert session.title == CAT and session.owner == alice
    assert session.created_at == cat.created_at

    discord_key = f"agent:main:import:{writing.chat_for(DISCORD)}"
    assert f"aidaemon session {DISCORD!r} → chat {discord_key}" in report.notes
    question, answer = session_events(discord_key)
    assert question.text == "What is the capital of Portugal?"
    assert answer.data["usage"] == {"input": 120, "output": 3, "cache_read": 0, "cache_write": 0}
    assert answer.created_at == datetime(2025, 3, 2, 10, 0, 2, tzinfo=UTC)

    facts = {(f.category, f.key): (f.value, f.source) for f in Fact.objects.owned_by(alice)}
    assert facts == {
        ("pets", "cat"): ("Miso", "agent"),
        ("preferences", "editor"): ("vim", "user"),
        ("preferences", "language"): ("English", "user"),
        ("pets", "dog"): ("Rex", "agent"),
    }
    assert "you set another value in Neotask: kept yours (1)" in reasons(report, "facts")

    [macro] = Macro.objects.owned_by(alice)
    assert (macro.trigger_args_pattern, macro.next_args) == ("git status", {"command": "git diff"})
    assert (macro.confidence, macro.used_count) == (0.8, 5)
    assert "next_args is not JSON (1)" in reasons(report, "macros")

    tasks = {task.name: task for task in ScheduledTask.objects.owned_by(alice)}
    assert set(tasks) == {"Morning briefing", "Weekly review", "Dentist reminder"}
    briefing, review, dentist = (
        tasks["Morning briefing"],
        tasks["Weekly review"],
        tasks["Dentist reminder"],
    )
    assert briefing.original_schedule == "weekdays at 9am"
    assert briefing.next_run_at > timezone.now()  # recomputed, not aidaemon's old one
    assert briefing.next_run_at == next_run("0 9 * * 1-5", briefing.created_at, "UTC")
    # Trusted in aidaemon, untrusted here: trust is not carried in by a file.
    assert (review.is_paused, review.is_trusted, review.is_oneshot) == (True, False, False)
    assert not any(task.is_trusted for task in tasks.values())
    assert "Task 'Weekly review' was trusted in aidaemon: imported untrusted" in report.table()
    assert dentist.is_oneshot and not dentist.is_paused
    assert dentist.next_run_at == datetime(2099, 3, 5, 14, 30, tzinfo=UTC)
    assert briefing.agent == Agent.objects.get(owner=alice, name="main")
    assert "is not a valid cron expression" in reasons(report, "scheduled tasks")

    prefixes = TerminalAllowedPrefix.objects.owned_by(alice).values_list("prefix", "active")
    assert sorted(prefixes) == [("git status", False), ("ls", False)]
    assert "2 terminal prefix(es) imported switched off" in report.table()
    assert not is_allowed(alice, "ls")


def test_it_imports_nothing_twice(alice, aidaemon_db):
    first = import_aidaemon(aidaemon_db, alice)
    rows = Event.objects.count(), Fact.objects.count(), ScheduledTask.objects.count()

    second = import_aidaemon(aidaemon_db, alice)

    assert sum(first.imported.values()) > 0
    assert sum(second.imported.values()) == 0
    assert (Event.objects.count(), Fact.objects.count(), ScheduledTask.objects.count()) == rows
    assert Session.objects.count() == 2
    assert "already imported (2)" in reasons(second, "sessions")
    assert "already imported (4)" in reasons(second, "messages")
    assert "already imported (4)" in reasons(second, "facts")
    assert "already imported (3)" in reasons(second, "scheduled tasks")


def test_it_imports_only_what_is_new_in_a_grown_database(alice, aidaemon_db):
    import_aidaemon(aidaemon_db, alice)
    with sqlite3.connect(aidaemon_db) as db:
        db.execute(
            "INSERT INTO events (session_id, event_type, data, created_at) VALUES (?, ?, ?, ?)",
            (TELEGRAM, "user_message", json.dumps({"content": "And my dog?"}), "2025-03-04"),
        )

    report = import_aidaemon(aidaemon_db, alice)

    assert report.imported == {"events": 1, "sessions": 1}
    assert session_events(f"agent:main:import:{TELEGRAM}")[-1].text == "And my dog?"


def test_it_writes_nothing_on_a_dry_run(alice, aidaemon_db):
    dry = import_aidaemon(aidaemon_db, alice, dry_run=True)

    for model in (Session, Agent, Event, Fact, Macro, ScheduledTask, TerminalAllowedPrefix):
        assert not model.objects.exists(), model
    assert "Dry run: nothing was written." in dry.table()
    # What it announced is what a real run does.
    assert import_aidaemon(aidaemon_db, alice).rows() == dry.rows()


def test_it_skips_a_bad_row_and_keeps_the_rest_of_its_session(alice, tmp_path):
    rows = {
        "messages": [
            message("m1", "s1", "user", "Plant the tomatoes.", "2025-05-01 08:00:00"),
            message("m2", "s1", "user", "Water them.", "not a time"),
            message("m3", "s1", "assistant", "Done.", "2025-05-01T08:00:02Z"),
        ],
    }
    report = import_aidaemon(build_db(tmp_path / "a.db", rows), alice)

    assert [e.text for e in session_events("agent:main:import:s1")] == [
        "Plant the tomatoes.",
        "Done.",
    ]
    assert counts(report)["messages"] == (3, 2, 1)


def test_it_rolls_back_a_session_that_fails_and_imports_the_others(alice, tmp_path, monkeypatch):
    rows = {
        "messages": [
            message("a1", "fine", "user", "Buy oat milk.", "2025-05-01 08:00:00"),
            message("b1", "doomed", "user", "First words.", "2025-05-01 09:00:00"),
            message("b2", "doomed", "user", "explode", "2025-05-01 09:00:01"),
            message("b3", "doomed", "user", "Last words.", "2025-05-01 09:00:02"),
        ],
    }
    real = reading.message_event

    def failing(row: dict[str, Any], owner: Any) -> Event:
        if row["content"] == "explode":
            raise RuntimeError("the disk is on fire")
        return real(row, owner)

    monkeypatch.setattr(writing, "message_event", failing)
    path = build_db(tmp_path / "a.db", rows)
    report = import_aidaemon(path, alice)

    assert [e.text for e in session_events("agent:main:import:fine")] == ["Buy oat milk."]
    assert not Session.objects.filter(key="agent:main:import:doomed").exists()
    assert not Event.objects.filter(text="First words.").exists()
    assert counts(report)["sessions"] == (2, 1, 1)
    assert any(
        "'doomed' was not imported" in note and "the disk is on fire" in note
        for note in report.notes
    )
    # Once the cause is gone, the session comes over whole.
    monkeypatch.setattr(writing, "message_event", real)
    import_aidaemon(path, alice)
    assert [e.text for e in session_events("agent:main:import:doomed")] == [
        "First words.",
        "explode",
        "Last words.",
    ]


def test_it_refuses_a_file_that_is_not_sqlite(alice, tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("just some text, certainly not a database\n" * 100)

    with pytest.raises(ImportRefused, match=r"notes\.db is not a SQLite database"):
        import_aidaemon(path, alice)


def test_it_refuses_a_database_without_aidaemon_tables(alice, tmp_path):
    path = build_db(tmp_path / "other.db", {}, schema="CREATE TABLE recipes (name TEXT);")

    with pytest.raises(ImportRefused, match="none of aidaemon's tables"):
        import_aidaemon(path, alice)


def test_it_imports_the_tables_present_and_says_which_are_missing(alice, tmp_path):
    schema = "CREATE TABLE facts (category TEXT, key TEXT, value TEXT);"
    rows = {"facts": [{"category": "home", "key": "city", "value": "Porto"}]}
    report = import_aidaemon(build_db(tmp_path / "facts.db", rows, schema), alice)

    assert Fact.objects.get(owner=alice).value == "Porto"
    assert "No messages table: nothing of it to import." in report.notes
    assert "No scheduled_tasks table: nothing of it to import." in report.notes


def test_it_ignores_extra_columns_and_skips_a_table_missing_one(alice, tmp_path):
    schema = (
        "CREATE TABLE messages (id TEXT, session_id TEXT, role TEXT, content TEXT, "
        "created_at TEXT, channel TEXT, reactions TEXT);"
        "CREATE TABLE facts (category TEXT, key TEXT, confidence REAL);"
    )
    rows = {
        "messages": [message("x1", "s9", "user", "Hello there.", "2025-01-01", channel="sms")],
        "facts": [{"category": "a", "key": "b", "confidence": 0.5}],
    }
    report = import_aidaemon(build_db(tmp_path / "odd.db", rows, schema), alice)

    assert [e.text for e in session_events("agent:main:import:s9")] == ["Hello there."]
    assert counts(report)["facts"] == (1, 0, 1)
    assert "Not imported: the facts table has no column value." in report.notes


def test_it_streams_a_huge_session_in_constant_memory(alice, tmp_path):
    count, size = 3000, 4000  # 12 MB of text in one session
    path = tmp_path / "huge.db"
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA)
        db.executemany(
            "INSERT INTO messages (id, session_id, role, content, created_at) "
            "VALUES (?, 'huge', 'user', ?, ?)",
            (
                (
                    f"m{n}",
                    f"{n} " + "x" * size,
                    f"2025-01-01T{n // 3600:02}:{n // 60 % 60:02}:{n % 60:02}Z",
                )
                for n in range(count)
            ),
        )

    tracemalloc.start()
    try:
        report = import_aidaemon(path, alice)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert report.imported["messages"] == count
    assert Event.objects.filter(owner=alice).count() == count
    assert peak < 8 * 1024 * 1024  # a few batches, never the whole session


def test_it_shows_the_imported_history_in_the_chat_and_the_pages(alice, alice_client, aidaemon_db):
    import_aidaemon(aidaemon_db, alice)

    chat = alice_client.get(f"/chat/agent:main:import:{TELEGRAM}/")
    assert chat.status_code == 200
    assert CAT in chat.content.decode() and "notes.md  todo.md" in chat.content.decode()
    assert "Miso" in alice_client.get("/memory/facts/").content.decode()
    tasks = alice_client.get("/tasks/").content.decode()
    assert "Morning briefing" in tasks and "Dentist reminder" in tasks


def test_it_makes_the_imported_history_searchable(alice, alice_client, aidaemon_db):
    import_aidaemon(aidaemon_db, alice)
    embed_missing()  # what the queued jobs and the sweep do

    assert not needs_embedding().filter(owner=alice).exists()
    hits = search_memory(alice, "what does my cat like to eat", k=3, files=False)
    assert CAT in [hit.event.text for hit in hits]
    assert "Lisbon." in alice_client.get("/memory/?q=capital+of+Portugal").content.decode()


def test_it_imports_for_the_given_user_only(alice, bob, bob_client, aidaemon_db):
    import_aidaemon(aidaemon_db, alice)

    for model in (Session, Event, Fact, Macro, ScheduledTask, TerminalAllowedPrefix):
        assert model.objects.exists() and not model.objects.owned_by(bob).exists(), model
    assert bob_client.get(f"/chat/agent:main:import:{TELEGRAM}/").status_code == 404

    # Bob importing the same file gets his own copy, tasks included.
    import_aidaemon(aidaemon_db, bob)
    assert ScheduledTask.objects.owned_by(bob).count() == 3
    assert ScheduledTask.objects.count() == 6


def test_it_imports_into_the_named_agent(alice, aidaemon_db):
    import_aidaemon(aidaemon_db, alice, agent_name="helper")

    session = Session.objects.get(key=f"agent:helper:import:{TELEGRAM}")
    assert session.agent.name == "helper"
    assert set(Event.objects.values_list("agent", flat=True)) == {"helper"}
    with pytest.raises(ImportRefused, match="agent 'no spaces' must be"):
        import_aidaemon(aidaemon_db, alice, agent_name="no spaces")


def test_the_command_prints_the_summary(alice, aidaemon_db):
    out, err = io.StringIO(), io.StringIO()

    call_command("import_aidaemon", str(aidaemon_db), user="alice", stdout=out, stderr=err)

    table = out.getvalue()
    assert table.splitlines()[0].split() == ["what", "read", "imported", "skipped", "reasons"]
    assert "messages" in table and "already imported" not in table
    assert "row" in err.getvalue()  # the progress bar
    out = io.StringIO()
    call_command("import_aidaemon", str(aidaemon_db), user="alice", dry_run=True, stdout=out)
    assert "already imported" in out.getvalue() and "Dry run" in out.getvalue()


def test_the_command_says_what_is_wrong_in_one_line(alice, tmp_path):
    with pytest.raises(CommandError, match='There is no user "carol"'):
        call_command("import_aidaemon", str(tmp_path / "x.db"), user="carol")
    with pytest.raises(CommandError, match="no such file"):
        call_command("import_aidaemon", str(tmp_path / "x.db"), user="alice")


def test_it_stores_text_postgresql_would_refuse(alice, tmp_path):
    # A NUL character and a lone surrogate: either would fail the whole session's insert.
    raw = '{"content": "Sardi\\u0000nes \\ud83d!"}'
    rows = {"events": [event("s1", "user_message", raw, "2025-01-01T00:00:00Z")]}

    report = import_aidaemon(build_db(tmp_path / "odd.db", rows), alice)

    assert report.imported["events"] == 1
    [stored] = session_events("agent:main:import:s1")
    assert stored.text == "Sardines ?!" and stored.data == {"content": "Sardines ?!"}


def test_it_pauses_a_one_time_task_whose_time_has_passed(alice, tmp_path):
    task = {
        "id": "late",
        "name": "Call the bank",
        "cron_expr": "0 10 2 1 *",
        "original_schedule": "on January 2nd at 10am",
        "prompt": "Remind me to call the bank.",
        "is_oneshot": 1,
        "next_run_at": "2025-01-02 10:00:00",
    }
    report = import_aidaemon(build_db(tmp_path / "a.db", {"scheduled_tasks": [task]}), alice)

    imported = ScheduledTask.objects.get(owner=alice)
    assert imported.is_paused and imported.next_run_at == datetime(2025, 1, 2, 10, tzinfo=UTC)
    assert "One-time task 'Call the bank': its time has passed, imported paused." in report.notes


def test_it_reports_a_row_that_fails_to_write_and_goes_on(alice, aidaemon_db, monkeypatch):
    def broken(**fields: Any) -> Macro:
        raise RuntimeError("constraint trouble")

    monkeypatch.setattr(Macro.objects, "create", broken)
    report = import_aidaemon(aidaemon_db, alice)

    assert "failed: RuntimeError: constraint trouble (1)" in reasons(report, "macros")
    assert counts(report)["scheduled tasks"] == (4, 3, 1)  # the rest goes on


def test_it_queues_the_events_without_a_vector_for_embedding(
    alice, aidaemon_db, django_capture_on_commit_callbacks
):
    take_queued_tasks()
    with django_capture_on_commit_callbacks(execute=True):
        import_aidaemon(aidaemon_db, alice)

    queued = take_queued_tasks()
    assert {job["func"] for job in queued} == {"memory.tasks.embed_events"}
    ids = sorted(i for job in queued for i in job["args"][0])
    assert ids == sorted(needs_embedding().values_list("id", flat=True))
    assert Event.objects.get(legacy_message_id=CAT_ID).pk not in ids  # kept its vector
