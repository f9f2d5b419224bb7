from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import CommandError, call_command
from django.test import AsyncClient

from memory import recording
from memory.models import Event
from sessions_app import chat, transcripts
from sessions_app.models import Session
from sessions_app.turns import rollover
from tests.support.commands import export


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def say(session: Session, text: str, event_type: str = "user_message") -> Event:
    return recording.record(session.owner, str(session.pk), event_type, {"content": text})


def test_it_exports_one_line_per_event_with_roles_tool_calls_and_usage(alice, tmp_path):
    session = chat.start_chat(alice)
    sid = str(session.pk)
    say(session, "list my files")
    call = {"id": "call_1", "type": "function", "function": {"name": "terminal"}}
    usage = {"input": 12, "output": 3, "cache_read": 4, "cache_write": 0}
    recording.record(
        alice,
        sid,
        "assistant_response",
        {"content": "", "tool_calls": [call], "usage": usage, "finish_reason": "tool_calls"},
    )
    recording.record(
        alice,
        sid,
        "tool_call",
        {"id": "call_1", "name": "terminal", "arguments": '{"command": "ls"}'},
        tool_name="terminal",
    )
    recording.record(
        alice,
        sid,
        "tool_result",
        {"tool_call_id": "call_1", "name": "terminal", "content": "notes.md", "is_error": False},
        tool_name="terminal",
    )
    say(session, "Stopped by the user.", "system")

    output = export(tmp_path)

    user, assistant, tool_call, tool_result, system = read_lines(tmp_path / f"{sid}.jsonl")
    first = Event.objects.filter(session_id=sid).order_by("id").first()
    assert user == {
        "id": first.pk,
        "session_id": sid,
        "type": "user_message",
        "role": "user",
        "content": "list my files",
        "timestamp": first.created_at.isoformat(),
        "importance": 0.5,
    }
    assert assistant["role"] == "assistant" and assistant["tool_calls"] == [call]
    assert assistant["usage"] == usage and assistant["data"] == {"finish_reason": "tool_calls"}
    assert tool_call["role"] == "assistant" and tool_call["tool_name"] == "terminal"
    assert tool_call["tool_call"] == {
        "id": "call_1",
        "name": "terminal",
        "arguments": '{"command": "ls"}',
    }
    assert tool_result["role"] == "tool" and tool_result["content"] == "notes.md"
    assert tool_result["tool_call_id"] == "call_1" and tool_result["is_error"] is False
    assert system["role"] == "system" and system["importance"] == 0.1
    assert "Exported 1 session" in output and "5 new events appended" in output


def test_it_appends_only_new_events_on_a_rerun(alice, tmp_path):
    session = chat.start_chat(alice)
    say(session, "one")
    say(session, "two")
    export(tmp_path)
    path = tmp_path / f"{session.pk}.jsonl"
    before = path.read_bytes()

    assert "0 new events appended" in export(tmp_path)
    assert path.read_bytes() == before

    say(session, "three")
    assert "1 new event appended" in export(tmp_path)
    after = path.read_bytes()
    assert after.startswith(before)
    lines = read_lines(path)
    assert [line["content"] for line in lines] == ["one", "two", "three"]
    assert len({line["id"] for line in lines}) == 3


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[:-7],  # an append cut off mid-line
        lambda data: data + b'{"id": 99, "type": "user_mes',  # a partial line after good ones
        lambda data: data + b"not json\n",
        lambda data: data + b'{"no_id": true}\n',
    ],
)
def test_it_rewrites_a_transcript_whose_last_line_is_damaged(alice, tmp_path, damage):
    session = chat.start_chat(alice)
    say(session, "one")
    say(session, "two")
    export(tmp_path)
    path = tmp_path / f"{session.pk}.jsonl"
    path.write_bytes(damage(path.read_bytes()))
    say(session, "three")

    output = export(tmp_path)

    lines = read_lines(path)
    assert [line["content"] for line in lines] == ["one", "two", "three"]
    assert "1 damaged transcript rewritten" in output
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{session.pk}.jsonl", "sessions.json"]


def test_it_finds_the_last_line_of_a_long_transcript(tmp_path, monkeypatch):
    monkeypatch.setattr(transcripts, "TAIL_BLOCK", 8)
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": 1, "content": "a long first line"}\n{"id": 42, "content": "x"}\n')
    assert transcripts.last_exported_id(path) == 42
    path.write_text("")
    assert transcripts.last_exported_id(path) == 0
    assert transcripts.last_exported_id(tmp_path / "missing.jsonl") == 0


def test_it_writes_the_sessions_index(alice, tmp_path):
    old = chat.start_chat(alice)
    old.title = "Trip"
    old.compaction_count = 1
    old.save()
    say(old, "before the reset")
    current = rollover(old, "/new")
    Session.objects.filter(pk=current.pk).update(
        input_tokens=100, output_tokens=20, cache_read_tokens=50, cache_write_tokens=5
    )
    current.refresh_from_db()

    export(tmp_path)

    index = json.loads((tmp_path / "sessions.json").read_text())
    assert list(index) == [current.key]
    assert index[current.key] == {
        "session_id": str(current.pk),
        "user": "alice",
        "agent": "main",
        "title": "Trip",
        "status": "active",
        "created_at": current.created_at.isoformat(),
        "updated_at": current.updated_at.isoformat(),
        "last_activity_at": current.last_activity_at.isoformat(),
        "tokens": {"input": 100, "output": 20, "cache_read": 50, "cache_write": 5},
        "compaction_count": 0,
        "continues_from": str(old.pk),
        "transcript": f"{current.pk}.jsonl",
    }
    assert (tmp_path / f"{old.pk}.jsonl").exists()


def test_it_keeps_the_index_pointing_at_the_current_session(alice, tmp_path):
    old = chat.start_chat(alice)
    current = rollover(old, "/new")
    other = chat.start_chat(alice)
    export(tmp_path, "--session", str(other.pk))
    export(tmp_path, "--session", str(current.pk))

    export(tmp_path, "--session", str(old.pk))

    index = json.loads((tmp_path / "sessions.json").read_text())
    assert index[current.key]["session_id"] == str(current.pk)
    assert index[other.key]["session_id"] == str(other.pk)


def test_it_rebuilds_an_unreadable_index(alice, tmp_path):
    session = chat.start_chat(alice)
    (tmp_path / "sessions.json").write_text('{"truncated": ')
    export(tmp_path)
    index = json.loads((tmp_path / "sessions.json").read_text())
    assert list(index) == [session.key]


def test_it_leaves_the_old_index_when_writing_fails(alice, tmp_path, monkeypatch):
    chat.start_chat(alice)
    (tmp_path / "sessions.json").write_text("{}\n")

    def fail(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(transcripts.json, "dump", fail)
    with pytest.raises(CommandError, match="No space left"):
        export(tmp_path)
    assert (tmp_path / "sessions.json").read_text() == "{}\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_it_exports_only_the_chosen_user_or_session(alice, bob, tmp_path):
    first = chat.start_chat(alice)
    second = chat.start_chat(alice)
    bobs = chat.start_chat(bob)

    export(tmp_path / "alice", "--user", "alice")
    export(tmp_path / "by-key", "--session", second.key)
    export(tmp_path / "everyone")

    def exported(folder: str) -> set[str]:
        return {p.stem for p in (tmp_path / folder).glob("*.jsonl")}

    assert exported("alice") == {str(first.pk), str(second.pk)}
    assert exported("by-key") == {str(second.pk)}
    assert exported("everyone") == {str(first.pk), str(second.pk), str(bobs.pk)}


def test_it_rejects_unknown_users_and_sessions_and_a_file_as_out_dir(alice, bob, tmp_path):
    bobs = chat.start_chat(bob)
    with pytest.raises(CommandError, match='There is no user "carol"'):
        export(tmp_path, "--user", "carol")
    with pytest.raises(CommandError, match="No session has the key or id 'agent:main:web:nope'"):
        export(tmp_path, "--session", "agent:main:web:nope")
    with pytest.raises(CommandError, match="No session of user 'alice'"):
        export(tmp_path, "--user", "alice", "--session", str(bobs.pk))
    a_file = tmp_path / "file.txt"
    a_file.write_text("")
    with pytest.raises(CommandError, match="is a file"):
        export(a_file)


def test_it_shows_progress_on_stderr(alice, tmp_path):
    chat.start_chat(alice)
    stderr = StringIO()
    call_command("export_transcripts", str(tmp_path), stdout=StringIO(), stderr=stderr)
    assert "1/1" in stderr.getvalue()


def test_it_downloads_the_transcript_as_an_attachment(alice, alice_client, monkeypatch):
    monkeypatch.setattr(transcripts, "BATCH", 2)  # several batches, joined seamlessly
    session = chat.start_chat(alice)
    for text in ["one", "two", "three", "four", "five"]:
        say(session, text)

    response = alice_client.get(f"/sessions/{session.pk}/transcript.jsonl")

    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "application/jsonl; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="{session.pk}.jsonl"'
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert [json.loads(line)["content"] for line in lines] == [
        "one",
        "two",
        "three",
        "four",
        "five",
    ]


def test_it_hides_other_users_transcripts(alice, bob_client):
    session = chat.start_chat(alice)
    say(session, "secret")
    response = bob_client.get(f"/sessions/{session.pk}/transcript.jsonl")
    assert response.status_code == 404 and b"secret" not in response.content
    assert bob_client.get("/sessions/not-a-uuid/transcript.jsonl").status_code == 404


@pytest.mark.django_db(transaction=True)
async def test_it_streams_the_download_under_asgi(alice):
    session = await sync_to_async(chat.start_chat)(alice)
    await sync_to_async(say)(session, "hi")
    client = AsyncClient()
    await client.aforce_login(alice)

    response = await client.get(f"/sessions/{session.pk}/transcript.jsonl")

    assert response.status_code == 200 and response.is_async
    body = b"".join([chunk async for chunk in response.streaming_content])
    assert json.loads(body)["content"] == "hi"


def test_it_links_the_download_from_the_transcript_and_chat_pages(alice, alice_client):
    session = chat.start_chat(alice)
    link = f'href="/sessions/{session.pk}/transcript.jsonl"'
    assert link in alice_client.get(f"/sessions/{session.pk}/").content.decode()
    assert link in alice_client.get(f"/chat/{session.key}/").content.decode()
