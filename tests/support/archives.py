"""A user with one of everything an export holds, and export archives read back
as content to compare (ids and import timestamps aside)."""

from __future__ import annotations

import io
import json
import re
import zipfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

from agent.models import TerminalAllowedPrefix
from importers.archive import layout
from memory import recording
from memory.files.paths import write_memory_file
from memory.models import Fact, Macro
from memory.workspace import workspace_dir
from scheduler.models import ScheduledTask
from sessions_app.models import Agent, Session

USAGE = {"input": 120, "output": 30, "cache_read": 40, "cache_write": 5}
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def build_user_data(user: User, marker: str = "") -> None:
    """Two agents; a chat of two sessions (the second continuing the first) with a
    tool call, its result and usage; a scheduled task with its run's chat; facts,
    macros, terminal rules and memory files. `marker` goes into every text."""
    main = Agent.objects.default_for(user)
    main.system_prompt = f"Be brief.{marker}"
    main.save()
    coder = Agent.objects.create(owner=user, name="coder", system_prompt=f"Write code.{marker}")
    first = Session.start(
        user, main, "web", "plans", title=f"Plans{marker}", status=Session.Status.ARCHIVED
    )
    sid = str(first.pk)
    recording.record(user, sid, "user_message", {"content": f"Book the lake house{marker}"})
    call = {"id": "call_1", "type": "function", "function": {"name": "terminal"}}
    recording.record(
        user,
        sid,
        "assistant_response",
        {"content": "", "tool_calls": [call], "usage": USAGE, "finish_reason": "tool_calls"},
    )
    told = recording.record(
        user,
        sid,
        "tool_call",
        {"id": "call_1", "name": "terminal", "arguments": '{"command": "ls"}'},
        tool_name="terminal",
    )
    recording.record(
        user,
        sid,
        "tool_result",
        {"tool_call_id": "call_1", "name": "terminal", "content": f"notes.md{marker}"},
        tool_name="terminal",
        importance=1.0,
    )
    first.add_usage(recording_usage())
    second = Session.objects.create(
        owner=user,
        agent=main,
        key=first.key,
        channel="web",
        chat="plans",
        title=first.title,
        continues_from=first,
        compaction_count=1,
    )
    recording.record(
        user, str(second.pk), "compaction", {"content": f"They booked the house{marker}"}
    )
    recording.record(user, str(second.pk), "assistant_response", {"content": f"Done{marker}"})
    Session.start(user, coder, "web", "code", title=f"Code{marker}")
    task = ScheduledTask.objects.create(
        owner=user,
        agent=coder,
        name=f"Standup{marker}",
        cron_expr="0 9 * * 1-5",
        original_schedule="weekdays at 9",
        prompt=f"Summarise yesterday{marker}",
        is_trusted=True,
        next_run_at=timezone.now() + timedelta(days=1),
    )
    run = Session.start(user, coder, "cron", str(task.pk), title=f"Standup runs{marker}")
    recording.record(user, str(run.pk), "assistant_response", {"content": f"Standup{marker}"})
    Fact.objects.create(owner=user, category="home", key="city", value=f"Lyon{marker}")
    Fact.objects.create(
        owner=user,
        category="work",
        key="editor",
        value=f"vim{marker}",
        source="agent",
        origin=Fact.Origin.TURN,
        origin_event=told,
        origin_session_id=sid,
    )
    Macro.objects.create(
        owner=user,
        trigger_tool="terminal",
        next_tool=f"write_file{marker}",
        next_args={"path": "x"},
        confidence=0.75,
        used_count=3,
    )
    TerminalAllowedPrefix.objects.create(owner=user, prefix=f"ls{marker}")
    write_memory_file(workspace_dir(user.pk, "main"), "MEMORY.md", f"# Me\nTea{marker}\n")
    write_memory_file(
        workspace_dir(user.pk, "coder"), "memory/stack/python.md", f"# Py\n3.11{marker}\n"
    )


def recording_usage() -> Any:
    from agent.llm import Usage

    return Usage(**USAGE)


def members(archive: bytes | Path) -> dict[str, bytes]:
    source = io.BytesIO(archive) if isinstance(archive, bytes) else archive
    with zipfile.ZipFile(source) as opened:
        return {name: opened.read(name) for name in opened.namelist()}


def lines(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.decode().splitlines()]


def content(archive: bytes | Path) -> dict[str, Any]:
    """What an archive says, without ids (each replaced by its first-seen order)
    and the times an import sets (macros', rules' and agents' creation)."""
    found = members(archive)
    names: dict[str, str] = {}

    def anonymous(match: re.Match[str]) -> str:
        return names.setdefault(match.group(), f"<id {len(names)}>")

    sessions: list[Any] = []
    places: dict[Any, str] = {}  # a session's or an event's archive id → its place
    for name in sorted(
        found,
        key=lambda n: lines(found[n])[0]["created_at"] if n.startswith(layout.SESSIONS_DIR) else "",
    ):
        if not name.startswith(layout.SESSIONS_DIR):
            continue
        records = lines(found[name])
        for number, record in enumerate(records):
            places[record.pop("id", None)] = f"<{len(sessions)}.{number}>"
            record.pop("session_id", None)
        sessions.append(json.loads(UUID.sub(anonymous, json.dumps(records))))
    result: dict[str, Any] = {"sessions": sessions}
    for name in layout.RECORD_FILES:
        records = lines(found[name])
        for record in records:
            record.pop("id", None)
            if name == layout.FACTS:
                for link in ("origin_event_id", "origin_session_id"):
                    record[link] = places.get(record[link] or None, record[link])
            else:
                record.pop("created_at", None)
        result[name] = records
    result["agents"] = [
        {k: v for k, v in agent.items() if k != "created_at"}
        for agent in json.loads(found[layout.AGENTS])
    ]
    result["memory"] = {
        name: data for name, data in found.items() if name.startswith(layout.MEMORY_DIR)
    }
    manifest = json.loads(found[layout.MANIFEST])
    result["counts"] = manifest["counts"]
    return result
