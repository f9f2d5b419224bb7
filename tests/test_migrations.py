from __future__ import annotations

import json
import struct
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from memory.fulltext import ensure_index
from memory.vectors import EMBEDDING_DIM, unpack

BEFORE = [("memory", "0002_events_facts_macros")]
AFTER_DATA = [("memory", "0003_messages_to_events")]


def test_it_has_no_pending_model_changes(db):
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


@pytest.fixture
def migrating_db(transactional_db):
    """A real database that the test migrates back and forth; left at the latest."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    ensure_index()  # `migrate` does this after rebuilding tables; the executor does not


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def insert_legacy_rows(apps) -> list[float]:
    Message = apps.get_model("memory", "Message")
    vector = [((i % 7) - 3) / 10 for i in range(EMBEDDING_DIM)]
    Message.objects.create(
        id="m-user",
        session_id="s1",
        role="user",
        content="Book a table for two",
        created_at="2024-03-01T09:00:00Z",
        importance=0.9,
        embedding=json.dumps(vector).encode(),
    )
    Message.objects.create(
        id="m-call",
        session_id="s1",
        role="assistant",
        content=None,
        tool_calls_json=json.dumps(
            [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "terminal", "arguments": '{"command": "ls"}'},
                }
            ]
        ),
        created_at="2024-03-01 09:00:05",  # SQLite's datetime('now') format
    )
    Message.objects.create(
        id="m-tool",
        session_id="s1",
        role="tool",
        content="notes.txt",
        tool_call_id="call_1",
        tool_name="terminal",
        created_at="2024-03-01T09:00:06+00:00",
        importance=0.3,
        embedding=b"[1.0, 2.0]",  # wrong dimension: dropped, re-embedded later
        consolidated_at="2024-03-02T00:00:00Z",
    )
    Message.objects.create(
        id="m-answer",
        session_id="s2",
        role="assistant",
        content="Done: booked.",
        created_at="2024-03-01T09:00:07Z",
    )
    return vector


def test_it_moves_legacy_messages_into_events_once(migrating_db):
    apps = migrate(BEFORE)
    vector = insert_legacy_rows(apps)

    apps = migrate(AFTER_DATA)
    # Back to before the data migration (messages kept) and forward again:
    # the second run must not duplicate anything.
    migrate(BEFORE)
    apps = migrate(AFTER_DATA)

    Event = apps.get_model("memory", "Event")
    User = apps.get_model("auth", "User")
    events = {e.legacy_message_id: e for e in Event.objects.all()}
    assert sorted(events) == ["m-answer", "m-call", "m-tool", "m-user"]
    assert Event.objects.count() == 4

    legacy = User.objects.get(username="legacy")
    assert not legacy.is_active
    assert {e.owner_id for e in events.values()} == {legacy.pk}

    user = events["m-user"]
    assert user.event_type == "user_message"
    assert user.session_id == "s1"
    assert user.text == "Book a table for two"
    assert user.importance == 0.9
    assert user.created_at.isoformat() == "2024-03-01T09:00:00+00:00"
    stored = unpack(user.embedding)
    assert stored.tolist() == pytest.approx(vector)
    assert len(bytes(user.embedding)) == EMBEDDING_DIM * struct.calcsize("<f")

    call = events["m-call"]
    assert call.event_type == "assistant_response"
    assert call.data["tool_calls"][0]["function"]["name"] == "terminal"
    assert call.created_at.isoformat() == "2024-03-01T09:00:05+00:00"
    assert call.importance == 0.5

    tool = events["m-tool"]
    assert tool.event_type == "tool_result"
    assert tool.data["tool_call_id"] == "call_1"
    assert tool.tool_name == "terminal"
    assert tool.embedding is None
    assert tool.consolidated_at.isoformat() == "2024-03-02T00:00:00+00:00"

    apps = migrate([("memory", "0004_drop_messages")])
    assert "messages" not in connection.introspection.table_names()
    assert apps.get_model("memory", "Event").objects.count() == 4


def test_it_gives_legacy_rows_to_an_existing_superuser(migrating_db):
    apps = migrate(BEFORE)
    User = apps.get_model("auth", "User")
    admin = User.objects.create(username="root", is_superuser=True, is_staff=True)
    insert_legacy_rows(apps)
    apps = migrate(AFTER_DATA)
    Event = apps.get_model("memory", "Event")
    assert set(Event.objects.values_list("owner_id", flat=True)) == {admin.pk}
    assert not User.objects.filter(username="legacy").exists()


def test_it_creates_no_legacy_user_without_legacy_rows(migrating_db):
    migrate(BEFORE)
    apps = migrate(AFTER_DATA)
    assert not apps.get_model("auth", "User").objects.filter(username="legacy").exists()


def test_it_switches_off_the_rules_the_allow_list_refuses(migrating_db):
    apps = migrate([("agent", "0003_prefix_active")])
    owner = apps.get_model("auth", "User").objects.create(username="owner")
    Prefix = apps.get_model("agent", "TerminalAllowedPrefix")
    for prefix, active in [("find", True), ("git status", True), ("nmap", True), ("tar", False)]:
        Prefix.objects.create(owner=owner, prefix=prefix, active=active)

    apps = migrate([("agent", "0004_allow_list")])
    Prefix = apps.get_model("agent", "TerminalAllowedPrefix")
    rules = {r.prefix: (r.active, r.switched_off_because) for r in Prefix.objects.all()}
    upgrade = "Switched off by the upgrade to the allow-list"
    assert rules == {
        "find": (
            False,
            f"{upgrade}: find can run programs (-exec, -execdir, -ok) and delete files.",
        ),
        "git status": (True, ""),
        "nmap": (
            False,
            f"{upgrade}: nmap is not one of the programs a rule may cover (ls, cat, head, tail, "
            "wc, grep, stat, du, df, pwd, date, echo, sort, uniq, diff, "
            "git status/log/diff/show/branch).",
        ),
        "tar": (False, ""),  # imported, off already: the page says why it stays off
    }
