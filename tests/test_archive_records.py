"""The export archive's records, declared once: what the export writes of a row is
what an import checks, and a line it refuses is refused in the reader's words."""

from __future__ import annotations

import json

import pytest

from agent.models import TerminalAllowedPrefix
from importers.archive.records import (
    AgentRecord,
    BadRecord,
    EventRecord,
    FactRecord,
    MacroRecord,
    Record,
    RuleRecord,
    SessionRecord,
    TaskRecord,
)
from memory.models import Fact, Macro
from scheduler.models import ScheduledTask
from sessions_app.models import Agent, Session
from tests.support.archives import USAGE, build_user_data

KINDS: list[tuple[type, type[Record]]] = [
    (Agent, AgentRecord),
    (Session, SessionRecord),
    (Fact, FactRecord),
    (Macro, MacroRecord),
    (ScheduledTask, TaskRecord),
    (TerminalAllowedPrefix, RuleRecord),
]


@pytest.mark.parametrize(("model", "kind"), KINDS, ids=lambda value: value.__name__)
def test_what_the_export_writes_the_import_takes(alice, model, kind):
    build_user_data(alice)
    rows = list(model.objects.filter(owner=alice))
    assert rows

    for row in rows:
        line = json.loads(json.dumps(kind.of(row)))
        assert list(line) == list(kind.model_fields)  # every field, in declared order
        kind.check(line)


def test_timestamps_are_written_as_the_rows_say_them(alice):
    build_user_data(alice)
    fact = Fact.objects.filter(owner=alice).first()

    line = FactRecord.of(fact)

    assert line["created_at"] == fact.created_at.isoformat()  # +00:00, not Z


def test_a_session_line_gives_its_key_and_usage(alice):
    build_user_data(alice)
    session = Session.objects.filter(owner=alice, chat="plans").first()
    Session.objects.filter(pk=session.pk).update(input_tokens=USAGE["input"])
    session.refresh_from_db()

    head = SessionRecord.check(SessionRecord.of(session))

    assert str(head.session_key) == session.key
    assert head.usage.input == USAGE["input"]


@pytest.mark.parametrize(
    ("kind", "line", "message"),
    [
        (
            FactRecord,
            {"category": "x", "value": "y", "source": "user"},
            "'key' must be a non-empty",
        ),
        (FactRecord, {"category": "x", "key": "k", "value": "y"}, "'source' must be one of"),
        (RuleRecord, {"prefix": "ls", "active": "yes"}, "'active' must be true or false"),
        (
            MacroRecord,
            {"trigger_tool": "a", "next_tool": "b", "confidence": 2},
            "'confidence' is out",
        ),
        (AgentRecord, {"name": "../x", "system_prompt": ""}, "'../x' is not an agent name"),
        (AgentRecord, ["main"], "an agent must be an object"),
        (EventRecord, {"type": "chatter"}, "'type' must be an event type, not 'chatter'"),
        (
            EventRecord,
            {"type": "user_message", "timestamp": "2024-01-01T10:00:00", "importance": 0.5},
            "'timestamp' must be a timestamp with its time zone",
        ),
        (SessionRecord, {"type": "event"}, "the first line must be the session"),
        (TaskRecord, {"id": "1", "name": "x", "time_zone": "Mars/Olympus"}, "'cron_expr' must be"),
    ],
)
def test_a_bad_line_is_refused_in_the_readers_words(kind, line, message):
    with pytest.raises(BadRecord, match=message):
        kind.check(line)
