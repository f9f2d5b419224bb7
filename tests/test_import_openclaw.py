"""Moving in from OpenClaw: `import_openclaw` and its management command, against agent
folders these tests build (sessions.json, JSONL transcripts, MEMORY.md and memory/)."""

from __future__ import annotations

import json
import os
import tracemalloc
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from core.models import Change
from importers.openclaw import import_openclaw, reading, writing
from importers.report import ImportRefused
from memory.models import Event, MemoryFile
from memory.search import search_memory
from memory.tasks import embed_missing
from memory.workspace import workspace_dir
from sessions_app.models import Agent, Session
from tests.support.records import take_queued_tasks

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
MAIN, TELEGRAM, DISCORD, OLD = "3f1c9a52-main", "77ab01-tg", "c0ffee-dc", "0a0a-old"
MEMORY_MD = "# Ann\n\nAnn's cat is called Miso and sleeps on the piano.\n"
NOTES_MD = "# House\n\nThe spare key is under the blue flowerpot by the door.\n"


def at(minutes: int) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def message(entry_id: str, minutes: int, role: str, content: Any, **extra: Any) -> dict:
    return {
        "type": "message",
        "id": entry_id,
        "parentId": None,
        "timestamp": at(minutes),
        "message": {"role": role, "content": content, **extra},
    }


def text(words: str) -> list[dict]:
    return [{"type": "text", "text": words}]


MAIN_LINES: list[Any] = [
    {"type": "session", "id": MAIN, "timestamp": at(0), "cwd": "/home/ann"},
    message("u1", 1, "user", text("Plan my trip to Lisbon in May")),
    message(
        "a1",
        2,
        "assistant",
        [
            {"type": "thinking", "thinking": "secret pondering about trams"},
            {"type": "text", "text": "Let me check the weather."},
            {
                "type": "toolCall",
                "id": "call_1",
                "name": "weather",
                "arguments": {"city": "Lisbon"},
            },
        ],
        usage={"input": 100, "output": 20, "cacheRead": 50, "cacheWrite": 5, "totalTokens": 175},
        stopReason="toolUse",
    ),
    message("r1", 3, "toolResult", text("Sunny, 24°C"), toolCallId="call_1", toolName="weather"),
    {"type": "model_change", "id": "m1", "timestamp": at(3), "provider": "x", "modelId": "y"},
    message(
        "a2",
        4,
        "assistant",
        text("Lisbon in May is sunny: pack light clothes and good walking shoes."),
        usage={"input": 150, "output": 30, "cacheRead": 0, "cacheWrite": 0},
    ),
    {"type": "wormhole", "id": "w1", "timestamp": at(4)},
    "{not json",
    {"type": "compaction", "id": "c1", "timestamp": at(5), "summary": "Ann plans Lisbon in May."},
    message("u2", 6, "user", [*text("And the hotel?"), {"type": "image", "data": "AAAA"}]),
]
# The older, flat form: no header, no ids, plain string content, role "tool".
TELEGRAM_LINES: list[Any] = [
    {"role": "user", "content": "Remind me to water the ficus", "timestamp": at(10)},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "t1",
                "type": "function",
                "function": {"name": "schedule_task", "arguments": '{"schedule": "daily"}'},
            }
        ],
        "timestamp": at(11),
    },
    {
        "role": "tool",
        "content": "Scheduled.",
        "tool_call_id": "t1",
        "name": "schedule_task",
        "timestamp": at(12),
    },
    {"role": "assistant", "content": "Every day I will remind you.", "timestamp": at(13)},
]
DISCORD_LINES: list[Any] = [
    {"type": "session", "id": DISCORD, "timestamp": at(20)},
    message("d1", 21, "user", text("What is the deploy command for the blog?")),
    message("d2", 22, "assistant", text("Run make deploy from the blog folder.")),
]
OLD_LINES: list[Any] = [
    {"type": "session", "id": OLD, "timestamp": at(-600)},
    message("o1", -599, "user", text("My sourdough starter is named Clint")),
]


def jsonl(lines: list[Any]) -> str:
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)


def build_folder(root: Path) -> Path:
    """An OpenClaw agent folder: four transcripts (one sessions.json does not name), a
    sessions.json entry whose transcript is missing, and a workspace with memory files."""
    sessions = root / "sessions"
    sessions.mkdir(parents=True)
    index = {
        "agent:main:main": {
            "sessionId": MAIN,
            "updatedAt": int((T0 + timedelta(minutes=6)).timestamp() * 1000),
            "displayName": "Trip planning",
            "inputTokens": 999,
        },
        "agent:ops:telegram:4242": {"sessionId": TELEGRAM, "updatedAt": 1740820380000},
        "agent:main:discord:channel:dev": {"sessionId": DISCORD},
        "agent:main:slack:gone": {"sessionId": "no-such-transcript"},
    }
    (sessions / "sessions.json").write_text(json.dumps(index), encoding="utf-8")
    for session_id, lines in [
        (MAIN, MAIN_LINES),
        (TELEGRAM, TELEGRAM_LINES),
        (DISCORD, DISCORD_LINES),
        (OLD, OLD_LINES),
    ]:
        (sessions / f"{session_id}.jsonl").write_text(jsonl(lines), encoding="utf-8")
    (root / "workspace" / "memory").mkdir(parents=True)
    (root / "workspace" / "MEMORY.md").write_text(MEMORY_MD, encoding="utf-8")
    (root / "workspace" / "memory" / "notes.md").write_text(NOTES_MD, encoding="utf-8")
    return root


@pytest.fixture
def folder(tmp_path) -> Path:
    return build_folder(tmp_path / "openclaw")


def run(folder: Path, *args: str) -> tuple[str, str]:
    stdout, stderr = StringIO(), StringIO()
    call_command("import_openclaw", str(folder), *args, stdout=stdout, stderr=stderr)
    return stdout.getvalue(), stderr.getvalue()


def events_of(session: Session) -> list[Event]:
    return list(Event.objects.filter(session_id=str(session.pk)).order_by("created_at", "id"))


def row(report: Any, kind: str) -> tuple[Any, ...]:
    """(read, imported, skipped, reasons) of one kind of the report."""
    return next(tuple(rest) for name, *rest in report.rows() if name == kind)


def test_it_imports_every_session_with_its_events_usage_times_and_title(alice, folder):
    report = import_openclaw(folder, alice)

    main = Session.objects.get(owner=alice, key="agent:main:import:main")
    assert main.title == "Trip planning"
    assert main.status == "active" and main.agent.name == "main"
    assert main.created_at == T0 and main.last_activity_at == T0 + timedelta(minutes=6)
    # The messages' own usage, not sessions.json's counter.
    assert (main.input_tokens, main.output_tokens) == (250, 50)
    assert (main.cache_read_tokens, main.cache_write_tokens) == (50, 5)

    start, user, answer, call, result, final, summary, hotel = events_of(main)
    assert [e.event_type for e in events_of(main)] == [
        "session_start",
        "user_message",
        "assistant_response",
        "tool_call",
        "tool_result",
        "assistant_response",
        "summary",
        "user_message",
    ]
    assert start.data["openclaw_session_id"] == MAIN and start.data["cwd"] == "/home/ann"
    assert user.text == "Plan my trip to Lisbon in May" and user.created_at == T0 + timedelta(
        minutes=1
    )
    assert user.data["turn_usage"] == {
        "input": 250,
        "output": 50,
        "cache_read": 50,
        "cache_write": 5,
    }
    assert answer.data["content"] == "Let me check the weather."
    assert "secret pondering" not in json.dumps(answer.data)
    assert answer.data["usage"] == {"input": 100, "output": 20, "cache_read": 50, "cache_write": 5}
    assert answer.data["tool_calls"][0]["function"]["name"] == "weather"
    assert call.tool_name == "weather" and json.loads(call.data["arguments"]) == {"city": "Lisbon"}
    assert result.data == {
        "tool_call_id": "call_1",
        "name": "weather",
        "content": "Sunny, 24°C",
        "is_error": False,
    }
    assert final.created_at == T0 + timedelta(minutes=4) and final.data["usage"]["input"] == 150
    assert summary.text == "Ann plans Lisbon in May." and summary.importance == 0.8
    assert hotel.text == "And the hotel?\n[image]" and "turn_usage" not in hotel.data

    telegram = Session.objects.get(owner=alice, key="agent:main:telegram:4242")
    assert telegram.title == "Remind me to water the ficus"
    kinds = [(e.event_type, e.text) for e in events_of(telegram)][1:]
    assert kinds == [
        ("user_message", "Remind me to water the ficus"),
        ("assistant_response", ""),
        ("tool_call", ""),
        ("tool_result", "Scheduled."),
        ("assistant_response", "Every day I will remind you."),
    ]
    assert Session.objects.filter(owner=alice, key="agent:main:import:discord-channel-dev").exists()
    old = Session.objects.get(owner=alice, key=f"agent:main:import:{OLD}")
    assert old.title == "My sourdough starter is named Clint"

    lines_read, lines_imported, lines_skipped, reasons = row(report, "transcript lines")
    assert (lines_read, lines_imported, lines_skipped) == (19, 16, 3)
    assert "unknown entry type wormhole (1)" in reasons
    assert "model_change (not conversation) (1)" in reasons
    assert f"{MAIN}.jsonl line 8: invalid JSON (1)" in reasons
    assert row(report, "sessions")[:3] == (5, 4, 1)
    assert "transcript missing" in row(report, "sessions")[3]
    assert "thinking (not kept)" in row(report, "message parts")[3]
    notes = "\n".join(report.notes)
    assert "agent:main:main → agent:main:import:main" in notes
    assert "agent:ops:telegram:4242 → agent:main:telegram:4242" in notes
    assert f"transcript {OLD}.jsonl → agent:main:import:{OLD}" in notes
    assert "Memory files taken from workspace/" in notes

    workspace = workspace_dir(alice.pk, "main")
    assert (workspace / "MEMORY.md").read_text(encoding="utf-8") == MEMORY_MD
    assert (workspace / "memory" / "notes.md").read_text(encoding="utf-8") == NOTES_MD
    indexed = MemoryFile.objects.filter(owner=alice, agent="main")
    assert sorted(indexed.values_list("path", flat=True)) == ["MEMORY.md", "memory/notes.md"]
    assert row(report, "memory files")[:3] == (2, 2, 0)


def test_a_second_run_imports_nothing_new(alice, folder):
    run(folder, "--user", "alice")
    before = list(Event.objects.order_by("id").values_list("id", "data"))
    sessions = Session.objects.count()

    output, _ = run(folder, "--user", "alice")

    assert list(Event.objects.order_by("id").values_list("id", "data")) == before
    assert Session.objects.count() == sessions
    main = Session.objects.get(key="agent:main:import:main")
    assert main.input_tokens == 250  # not counted twice
    table = {line.split()[0]: line for line in output.splitlines() if line.split()}
    assert "already imported (4)" in table["sessions"]
    assert "already imported (16)" in table["transcript"]
    assert "already there (2)" in table["memory"]


def test_a_grown_transcript_adds_only_its_new_entries(alice, folder):
    import_openclaw(folder, alice)
    main = Session.objects.get(key="agent:main:import:main")
    count = len(events_of(main))
    later = [
        message("a3", 7, "assistant", text("Try the Alfama district."), usage={"input": 7}),
        message("u3", 8, "user", text("Thanks!")),
    ]
    with (folder / "sessions" / f"{MAIN}.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(jsonl(later))

    report = import_openclaw(folder, alice)

    events = events_of(main)
    assert len(events) == count + 2
    assert [e.text for e in events[-2:]] == ["Try the Alfama district.", "Thanks!"]
    main.refresh_from_db()
    assert main.input_tokens == 257 and main.last_activity_at == T0 + timedelta(minutes=8)
    assert row(report, "sessions")[:3] == (5, 1, 4)
    assert row(report, "events")[:2] == (2, 2)


def test_a_dry_run_reports_everything_and_writes_nothing(alice, folder):
    output, _ = run(folder, "--user", "alice", "--dry-run")

    assert Event.objects.count() == 0
    assert Session.objects.count() == 0
    assert Agent.objects.count() == 0
    assert MemoryFile.objects.count() == 0
    assert not workspace_dir(alice.pk, "main", create=False).exists()
    assert "Dry run: nothing was written." in output
    assert "agent:main:main → agent:main:import:main" in output
    sessions_line = next(line for line in output.splitlines() if line.startswith("sessions"))
    assert sessions_line.split()[1:4] == ["5", "4", "1"]


def test_a_failing_session_is_rolled_back_whole_and_the_others_import(alice, folder, monkeypatch):
    # One event per batch: the failure comes after the session's first batches were written.
    monkeypatch.setattr(writing, "BATCH_EVENTS", 1)
    real_parse = reading.parse_entry

    def failing(entry: dict) -> Any:
        if entry.get("id") == "a2":
            raise RuntimeError("disk on fire")
        return real_parse(entry)

    monkeypatch.setattr(writing, "parse_entry", failing)
    report = import_openclaw(folder, alice)

    assert not Session.objects.filter(key="agent:main:import:main").exists()
    assert not Event.objects.filter(data__openclaw_session_id=MAIN).exists()
    assert not Event.objects.filter(text__contains="Lisbon").exists()
    assert Session.objects.filter(owner=alice).count() == 3
    assert "failed (RuntimeError), nothing of it kept" in row(report, "sessions")[3]
    assert any("disk on fire" in note for note in report.notes)

    monkeypatch.setattr(writing, "parse_entry", real_parse)
    import_openclaw(folder, alice)
    main = Session.objects.get(key="agent:main:import:main")
    assert len(events_of(main)) == 8 and main.input_tokens == 250


def test_it_streams_a_huge_transcript_in_bounded_memory(alice, tmp_path):
    root = tmp_path / "huge"
    (root / "sessions").mkdir(parents=True)
    path = root / "sessions" / "big.jsonl"
    words = "lorem ipsum dolor sit amet " * 600  # ~16 KB a message
    lines = 0
    with path.open("w", encoding="utf-8") as handle:
        handle.write(json.dumps({"type": "session", "id": "big", "timestamp": at(0)}) + "\n")
        while handle.tell() < 50 * 1024 * 1024:
            lines += 1
            role = "user" if lines % 2 else "assistant"
            handle.write(json.dumps(message(f"e{lines}", 1, role, f"{lines} {words}")) + "\n")

    tracemalloc.start()
    try:
        report = import_openclaw(root, alice)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert row(report, "events")[1] == lines
    assert Event.objects.filter(owner=alice).count() == lines + 1  # and the session start
    # The file is 50 MB; reading it whole (or holding its events) would show here.
    assert peak < 20 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB"


def test_it_skips_a_line_longer_than_the_limit_without_holding_it(alice, tmp_path):
    root = tmp_path / "long"
    (root / "sessions").mkdir(parents=True)
    huge = message("x1", 1, "user", "y" * (reading.MAX_LINE_BYTES + 10))
    lines = [huge, message("x2", 2, "user", text("still here"))]
    (root / "sessions" / "s.jsonl").write_text(jsonl(lines), encoding="utf-8")

    report = import_openclaw(root, alice)

    assert list(Event.objects.filter(event_type="user_message").values_list("text", flat=True)) == [
        "still here"
    ]
    assert "s.jsonl line 1: longer than 1024 KB (1)" in row(report, "transcript lines")[3]


def test_it_queues_the_new_events_for_embedding_when_the_session_commits(
    alice, folder, django_capture_on_commit_callbacks
):
    take_queued_tasks()
    with django_capture_on_commit_callbacks(execute=True):
        import_openclaw(folder, alice)

    queued = [task for task in take_queued_tasks() if task["func"] == "memory.tasks.embed_events"]
    ids = sorted(i for task in queued for i in task["args"][0])
    expected = Event.objects.filter(
        owner=alice, event_type__in=["user_message", "assistant_response", "tool_result", "summary"]
    ).exclude(text="")
    assert ids == sorted(expected.values_list("id", flat=True)) and ids


def test_imported_history_shows_in_the_chat_and_is_searchable_by_its_owner_only(
    alice, bob, alice_client, bob_client, folder
):
    run(folder, "--user", "alice")
    embed_missing()

    page = alice_client.get("/chat/agent:main:import:main/")
    assert page.status_code == 200
    content = page.content.decode()
    assert "Plan my trip to Lisbon in May" in content and "pack light clothes" in content
    assert "Imported from OpenClaw" in content and "Trip planning" in content
    assert bob_client.get("/chat/agent:main:import:main/").status_code == 404

    hits = search_memory(alice, "what should I pack for Lisbon", k=5, files=False)
    assert any("pack light clothes" in hit.event.text for hit in hits)
    hits = search_memory(alice, "what is the cat called", k=5)
    file_hits = [hit for hit in hits if hit.kind == "file"]
    assert file_hits and file_hits[0].path == "MEMORY.md" and "Miso" in file_hits[0].text
    assert search_memory(bob, "what should I pack for Lisbon", k=5) == []


def test_it_never_overwrites_a_different_workspace_file(alice, folder):
    workspace = workspace_dir(alice.pk, "main")
    (workspace / "MEMORY.md").write_text("# Mine\n\nWritten in Neotask.\n", encoding="utf-8")
    (workspace / "memory").mkdir()
    (workspace / "memory" / "notes.md").write_text(NOTES_MD, encoding="utf-8")
    outside = folder.parent / "secret.md"
    outside.write_text("# Secret\n", encoding="utf-8")
    os.symlink(outside, folder / "workspace" / "memory" / "leak.md")

    report = import_openclaw(folder, alice)
    again = import_openclaw(folder, alice)

    assert (workspace / "MEMORY.md").read_text(
        encoding="utf-8"
    ) == "# Mine\n\nWritten in Neotask.\n"
    assert (workspace / "memory" / "imported" / "MEMORY.md").read_text(
        encoding="utf-8"
    ) == MEMORY_MD
    assert not (workspace / "memory" / "leak.md").exists()
    assert row(report, "memory files")[:3] == (3, 1, 2)
    reasons = row(report, "memory files")[3]
    assert "already there (1)" in reasons and "symlink (not followed) (1)" in reasons
    assert "MEMORY.md: the workspace has another one; copied to memory/imported/MEMORY.md." in (
        report.notes
    )
    assert row(again, "memory files")[1] == 0


def test_a_key_pointing_at_a_new_session_archives_the_imported_one(alice, folder):
    import_openclaw(folder, alice)
    first = Session.objects.get(key="agent:main:import:main", status="active")
    sessions = folder / "sessions"
    index = json.loads((sessions / "sessions.json").read_text(encoding="utf-8"))
    index["agent:main:main"]["sessionId"] = "fresh"
    (sessions / "sessions.json").write_text(json.dumps(index), encoding="utf-8")
    lines = [{"type": "session", "id": "fresh", "timestamp": at(30)}]
    lines.append(message("f1", 31, "user", text("A new day")))
    (sessions / "fresh.jsonl").write_text(jsonl(lines), encoding="utf-8")

    import_openclaw(folder, alice)

    first.refresh_from_db()
    current = Session.objects.get(key="agent:main:import:main", status="active")
    assert first.status == "archived" and current.continues_from == first
    assert [e.text for e in events_of(current)][1:] == ["A new day"]
    # The old session's transcript is not named any more: it is not imported a second time.
    assert len(events_of(first)) == 8


def test_it_imports_into_the_agent_given_and_a_folder_holding_memory_files_directly(
    alice, tmp_path
):
    root = tmp_path / "flat"
    (root / "memory").mkdir(parents=True)
    (root / "MEMORY.md").write_text(MEMORY_MD, encoding="utf-8")

    output, _ = run(root, "--user", "alice", "--agent", "work")

    assert (workspace_dir(alice.pk, "work") / "MEMORY.md").read_text(encoding="utf-8") == MEMORY_MD
    assert "Memory files taken from the folder itself" in output
    assert Agent.objects.filter(owner=alice, name="work").exists()


def test_the_command_shows_progress_on_stderr_and_the_table_on_stdout(alice, folder):
    output, errors = run(folder, "--user", "alice")
    assert "transcripts" in errors and "100%" in errors
    assert output.splitlines()[0].split() == ["what", "read", "imported", "skipped", "reasons"]


def test_it_refuses_what_it_cannot_import_with_one_line(alice, tmp_path, folder):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x", encoding="utf-8")
    for path, message_part in [
        (tmp_path / "missing", "is not a directory"),
        (tmp_path / "file.txt", "is not a directory"),
        (tmp_path / "empty", "is not an OpenClaw agent folder"),
    ]:
        with pytest.raises(CommandError, match=message_part):
            run(path, "--user", "alice")
    with pytest.raises(CommandError, match='There is no user "nobody"'):
        run(folder, "--user", "nobody")
    with pytest.raises(CommandError, match="agent"):
        run(folder, "--user", "alice", "--agent", "../x")
    with pytest.raises(ImportRefused):
        import_openclaw(tmp_path / "empty", alice)
    assert Session.objects.count() == 0 and Event.objects.count() == 0


def test_it_stores_text_the_databases_refuse_cleaned(alice, tmp_path):
    root = tmp_path / "odd"
    (root / "sessions").mkdir(parents=True)
    # NUL (PostgreSQL refuses it) and a lone surrogate (not UTF-8) as JSON escapes.
    line = '{"type": "message", "id": "n\\u0000", "message": {"role": "user", "content": '
    line += '"nul\\u0000 and \\ud800 surrogate"}}\n'
    (root / "sessions" / "odd.jsonl").write_text(line, encoding="utf-8")

    import_openclaw(root, alice)
    again = import_openclaw(root, alice)

    event = Event.objects.get(event_type="user_message")
    assert event.text == "nul and ? surrogate" and event.legacy_message_id == "n"
    assert row(again, "transcript lines")[1] == 0


def test_it_records_the_memory_files_it_copied_in_the_history(alice, folder):
    report = import_openclaw(folder, alice)
    import_openclaw(folder, alice)  # copies nothing again, records nothing again
    copied = Change.objects.owned_by(alice).filter(subject_kind=Change.Subject.MEMORY_FILE)
    assert len(copied) == report.imported["memory files"] > 0
    assert {(c.actor, c.action, c.old_value) for c in copied} == {
        ("Import (OpenClaw import openclaw)", "created", None)
    }
    assert all(c.new_value["text"] for c in copied)
