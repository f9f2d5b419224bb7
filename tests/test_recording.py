"""Writing events (memory.recording): `record_many`, the bulk writers' way, stores
what `record` stores, and both ask for vectors through `request_embeddings`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from memory import recording
from memory.embeddings import embed_text
from memory.models import Event
from memory.vectors import pack
from memory.working import working_memory
from tests.support.records import take_queued_tasks

WHEN = datetime(2024, 5, 1, 12, 30, tzinfo=UTC)
CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any], bool]] = {
    # name: event type, data, fields, whether a vector comes with it
    "a message": ("user_message", {"content": "My cat Miso loves sardines"}, {}, False),
    "a named speaker's, its text's vector dropped": (
        "user_message",
        {"content": "I moved to Porto", "speaker": "Maya"},
        {"created_at": WHEN},
        True,
    ),
    "an answer with its vector": (
        "assistant_response",
        {"content": "Noted: Miso likes sardines."},
        {"agent": "ops", "legacy_message_id": "m-42", "created_at": WHEN},
        True,
    ),
    "a tool's output": (
        "tool_result",
        {"content": "notes.md  todo.md", "tool_call_id": "c1"},
        {"tool_name": "terminal", "task_id": "t-1"},
        False,
    ),
    "a pinned summary": ("summary", {"content": "Ann plans Lisbon."}, {"importance": 1.0}, False),
    "a session start": ("session_start", {"content": "Imported from OpenClaw."}, {}, False),
    "an empty answer": ("assistant_response", {"content": "", "tool_calls": []}, {}, False),
}
SET_AT_WRITE = {"id", "created_at", "embedded_at"}  # the moment of writing, unless given


def stored(event: Event) -> dict[str, Any]:
    row = Event.objects.get(pk=event.pk)
    fields = {f.attname: getattr(row, f.attname) for f in Event._meta.concrete_fields}
    if fields["embedding"] is not None:
        fields["embedding"] = bytes(fields["embedding"])
    fields["embedded_at"] = fields["embedded_at"] is not None
    return fields


def written(write, capture) -> tuple[dict[str, Any], bool]:
    """The row `write` stores, and whether its vector was requested."""
    take_queued_tasks()
    with capture(execute=True):
        event = write()
    requested = [i for task in take_queued_tasks() for i in task["args"][0]]
    assert requested in ([], [event.pk])
    fields = stored(event)
    event.delete()  # the next write finds the session as this one did
    return fields, bool(requested)


@pytest.mark.parametrize("case", CASES)
def test_it_writes_in_bulk_what_record_writes(alice, case, django_capture_on_commit_callbacks):
    event_type, data, fields, with_vector = CASES[case]
    vector = embed_text(data["content"] or "nothing") if with_vector else None
    recording.record(alice, "s1", "user_message", {"content": "The turn before"})

    def one() -> Event:
        return recording.record(alice, "s1", event_type, dict(data), vector=vector, **fields)

    def bulk() -> Event:
        brought = {"embedding": pack(vector)} if vector is not None else {}
        event = recording.draft(alice, "s1", event_type, dict(data), **fields, **brought)
        recording.record_many([event])
        return event

    alone, alone_requested = written(one, django_capture_on_commit_callbacks)
    many, many_requested = written(bulk, django_capture_on_commit_callbacks)

    compared = SET_AT_WRITE - set(fields)
    assert {k: v for k, v in many.items() if k not in compared} == {
        k: v for k, v in alone.items() if k not in compared
    }
    assert many["embedded_at"] == alone["embedded_at"]
    assert many_requested == alone_requested


def test_it_keys_each_session_by_its_own_turn_before(alice):
    recording.record(alice, "a", "user_message", {"content": "Before in a"})
    events = [
        recording.draft(alice, session, "user_message", {"content": f"{session}{n}"})
        for n in range(2)
        for session in ("a", "b")
    ]
    recording.record_many(events)
    assert [(e.session_id, e.search_context) for e in events] == [
        ("a", "Before in a"),
        ("b", ""),
        ("a", "a0"),
        ("b", "b0"),
    ]


def test_it_keeps_bulk_written_events_in_working_memory(alice):
    recording.record(alice, "s1", "user_message", {"content": "Hello"})
    working_memory.recent(alice, "s1", 10)
    rebuilds = working_memory.rebuilds
    events = [
        recording.draft(alice, "s1", kind, {"content": text})
        for kind, text in [("assistant_response", "Hi!"), ("user_message", "Plan Lisbon")]
    ]
    recording.record_many(events)
    recent = working_memory.recent(alice, "s1", 10)
    assert [e.text for e in recent] == ["Hello", "Hi!", "Plan Lisbon"]
    assert working_memory.rebuilds == rebuilds  # appended, not read again
