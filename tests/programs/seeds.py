"""Rows for the browser tests' pages, owned by the live app's user `tester`, and
their removal: the live app is shared by the browser tests, and what one module
made would be the latest chat, or in the lists, of the next."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db.models import Q
from django.utils import timezone

from agent.models import TerminalAllowedPrefix
from core.models import Change
from importers.models import ImportedArchive, ImportJob
from importers.report import ImportReport
from memory import recording
from memory.files.indexing import index_workspace
from memory.files.paths import write_memory_file
from memory.models import Event, Fact, ForgottenEvent, Macro, MemoryFile
from memory.workspace import workspace_dir
from scheduler.models import ScheduledTask
from sessions_app.models import Agent, ApiToken, ChatClaim, ChatInput, Session
from tests.support.records import OWNED_MODELS, make_rows


def now() -> str:
    return timezone.now().isoformat()


def long_content(question: str, answer: str, long_url: str, long_word: str) -> dict[str, Any]:
    """What every page needs to show something, made long: a chat, a fact, a macro, a
    memory file, a task, a prefix, a token, a finished import. Their ids."""
    owner = User.objects.get(username="tester")
    agent = Agent.objects.default_for(owner)
    session = Session.start(
        owner, agent, "web", "phone-layout", title="Plans for a long trip to Lisbon"
    )
    for kind, text in [("user_message", question), ("assistant_response", answer)]:
        recording.record(owner, str(session.pk), kind, {"content": text})
    recording.record(
        owner,
        str(session.pk),
        "tool_call",
        {"name": "search_memory", "arguments": json.dumps({"query": long_word})},
    )
    fact = Fact.objects.create(
        owner=owner, category="preference", key="favourite_site", value=long_url
    )
    macro = Macro.objects.create(
        owner=owner,
        trigger_tool="search_memory",
        next_tool="remember_fact",
        trigger_args_pattern="query=*",
        confidence=0.8,
        used_count=4,
    )
    write_memory_file(
        workspace_dir(owner.pk, agent.name),
        "memory/trips.md",
        "# Trips\n\nLisbon in June. " + long_url + "\n",
    )
    index_workspace(owner, agent.name)
    task = ScheduledTask.objects.create(
        owner=owner,
        agent=agent,
        name="Water the plants",
        cron_expr="0 9 * * 1-5",
        original_schedule="every weekday at 9am",
        prompt="Remind me to water the plants, as the guide says: " + long_url,
        next_run_at=timezone.now() + timedelta(days=1),
    )
    prefix = TerminalAllowedPrefix.objects.create(
        owner=owner, prefix="git log --oneline --graph --decorate"
    )
    token, _ = ApiToken.issue(owner, "Backup script on the home server")
    report = ImportReport()
    report.saw("events", 120)
    report.added("events", 118)
    report.skip("events", "empty text", 2)
    report.note("Imported 3 sessions from " + long_url)
    job = ImportJob.objects.create(
        owner=owner,
        kind="openclaw",
        filename="my-old-agent-folder.zip",
        status="done",
        report=report.to_dict(),
        finished_at=timezone.now(),
    )
    return {
        "chat": session.key,
        "session": str(session.pk),
        "fact": fact.pk,
        "task": str(task.pk),
        "job": str(job.pk),
        "macro": macro.pk,
        "prefix": prefix.pk,
        "token": token.pk,
    }


def remove_long_content(ids: dict[str, Any]) -> None:
    """What long_content made, and what the phone sent in its chat (the latest)."""
    owner = User.objects.get(username="tester")
    agent = Agent.objects.default_for(owner)
    Event.objects.filter(session_id=ids["session"]).delete()
    Session.objects.filter(pk=ids["session"]).delete()
    made: list[tuple[Any, str]] = [
        (Fact, "fact"),
        (Macro, "macro"),
        (ScheduledTask, "task"),
        (ImportJob, "job"),
        (TerminalAllowedPrefix, "prefix"),
        (ApiToken, "token"),
    ]
    for model, key in made:
        model.objects.filter(pk=ids[key]).delete()
    (workspace_dir(owner.pk, agent.name) / "memory/trips.md").unlink()
    index_workspace(owner, agent.name)


def one_of_each() -> dict[str, Any]:
    """One of each row the pages list (tests.support.records.make_rows), a chat with
    an answer and a tool call, a memory file, a fact, a finished import: their ids."""
    user = User.objects.get(username="tester")
    rows = make_rows(user, "-a11y")
    session, memory_file = rows[Session], rows[MemoryFile]
    assert isinstance(session, Session) and isinstance(memory_file, MemoryFile)
    # Not a turn in progress: nothing may run, and take a reply scripted for another test.
    rows[ChatInput].delete()
    rows[ChatClaim].delete()
    recording.record(
        user,
        str(session.pk),
        "assistant_response",
        {"content": "Your favourite colour is **blue**, noted in your facts."},
    )
    recording.record(
        user, str(session.pk), "tool_call", {"name": "search_memory", "arguments": "{}"}
    )
    write_memory_file(workspace_dir(user.pk, "main"), memory_file.path, "# Notes\n\nhello\n")
    Fact.objects.create(owner=user, category="person", key="name", value="Ada")
    done = ImportJob.objects.create(
        owner=user,
        kind="openclaw",
        filename="openclaw.tar.gz",
        status="done",
        started_at=timezone.now(),
        finished_at=timezone.now(),
        report={"dry_run": False, "rows": [["messages", 10, 9, 1, "empty"]], "notes": ["One note"]},
    )
    return {
        "session": str(session.pk),
        "chat": session.key,
        "fact": rows[Fact].pk,
        "task": str(rows[ScheduledTask].pk),
        "file": memory_file.path,
        "import_job": str(done.pk),
    }


def remove_made_since(since: str, file: str) -> None:
    """Every row of `tester`'s made since `since` (the one_of_each rows and the
    chats of the tests), and the memory file `file`."""
    user = User.objects.get(username="tester")
    made = list(Session.objects.filter(created_at__gte=since).values_list("key", flat=True))
    ChatClaim.objects.filter(key__in=made).delete()
    for model in reversed(OWNED_MODELS):
        if model in (Agent, ChatClaim, Change):  # the history is never deleted
            continue
        made_at = {ForgottenEvent: "forgotten_at", ImportedArchive: "imported_at"}.get(
            model, "created_at"
        )
        model._default_manager.filter(Q(**{f"{made_at}__gte": since})).delete()
    (workspace_dir(user.pk, "main") / file).unlink(missing_ok=True)
    index_workspace(user, "main")
