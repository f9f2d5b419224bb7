"""Isolation of exports, cleanup and scheduled tasks: bob's export and cleanup never
include alice's sessions, his scheduling tools cannot see or touch her task, and the
runner runs her task as her, in her chat."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from agent.tools import ToolError
from memory.models import Event
from scheduler.due_tasks import run_due_tasks, run_now
from scheduler.models import ScheduledTask
from sessions_app.models import Agent, Session
from tests.support.commands import export
from tests.support.scripted_llm import Reply
from tests.support.tools import use_tool
from tests.support.web import client_for
from tests.support.world import leaks, secret, snapshot


def exported_text(out_dir: Path) -> str:
    return "\n".join(f"{p.name}\n{p.read_text()}" for p in sorted(out_dir.iterdir()))


def test_it_exports_only_bobs_sessions_for_bob(world, bob, tmp_path):
    out = tmp_path / "export"
    export(out, "--user", "bob")
    names = {path.name for path in out.iterdir()}
    bobs = {f"{session.pk}.jsonl" for session in Session.objects.filter(owner=bob)}
    assert names == bobs | {"sessions.json"}
    assert not leaks(exported_text(out), world)


@pytest.mark.parametrize("which", ["chat", "archived", "cron"])
def test_it_refuses_to_export_alices_session_for_bob(world, tmp_path, which):
    session = getattr(world, which)
    out = tmp_path / "export"
    for reference in (str(session.pk), session.key):
        with pytest.raises(CommandError, match="No session of user 'bob' has the key or id"):
            export(out, "--user", "bob", "--session", reference)
    assert not out.exists() or not leaks(exported_text(out), world)


def test_it_downloads_only_bobs_transcripts(world, bob, bob_client):
    mine = Session.objects.filter(owner=bob).first()
    response = bob_client.get(f"/sessions/{mine.pk}/transcript.jsonl")
    assert response.status_code == 200
    assert not leaks(b"".join(response.streaming_content).decode(), world)
    # Alice's own transcript is what bob's 404 withholds.
    alices = client_for(world.user)
    response = alices.get(f"/sessions/{world.chat.pk}/transcript.jsonl")
    assert secret("vault") in b"".join(response.streaming_content).decode()


def test_it_cleans_up_only_bobs_sessions_for_bob(world, bob):
    before = snapshot(world.user)
    Session.objects.filter(owner=bob).update(last_activity_at=timezone.now() - timedelta(days=90))
    out = StringIO()
    call_command("cleanup_sessions", "--user", "bob", "--dry-run", "--include-archived", stdout=out)
    assert not leaks(out.getvalue(), world)
    call_command("cleanup_sessions", "--user", "bob", "--include-archived", stdout=out)
    assert not leaks(out.getvalue(), world)
    assert not Session.objects.filter(owner=bob).exists()
    assert snapshot(world.user) == before  # her 90-day-old archived session included


# Scheduled tasks -----------------------------------------------------------------


def test_it_lists_none_of_alices_tasks_to_bobs_agent(world, bob):
    assert use_tool(bob, "list_tasks") == "There are no scheduled tasks."
    use_tool(bob, "schedule_task", schedule="daily at 8am", prompt="tea", name="Tea")
    assert not leaks(use_tool(bob, "list_tasks"), world)


@pytest.mark.parametrize("tool", ["pause_task", "resume_task", "cancel_task"])
def test_it_keeps_bobs_agent_off_alices_task(world, bob, tool):
    ScheduledTask.objects.filter(pk=world.task.pk).update(is_paused=tool == "resume_task")
    before = snapshot(world.user)
    for reference in (str(world.task.pk), world.task.name):
        with pytest.raises(ToolError, match="You have no scheduled task") as refused:
            use_tool(bob, tool, task=reference)
        assert not leaks(str(refused.value), world, asked=reference)
    assert snapshot(world.user) == before


@pytest.mark.django_db(transaction=True)
def test_it_runs_alices_task_as_alice_in_her_chat(world, bob, llm):
    """Even when bob holds a session under her task's chat key (an import, the admin)."""
    decoy = Session.start(bob, Agent.objects.default_for(bob), "cron", str(world.task.pk))
    bobs_events = list(Event.objects.filter(owner=bob).values_list("pk", flat=True))
    ScheduledTask.objects.filter(pk=world.task.pk).update(next_run_at=timezone.now())
    llm.script(Reply(text=f"The code is 4417. {secret('run-answer')}"), Reply(text="Again."))

    report = run_due_tasks()
    assert [(run.owner, run.status) for run in report.runs] == [("alice", "completed")]
    assert run_now(str(world.task.pk)).status == "completed"

    for request in llm.requests:
        prompt = str(request["messages"])
        assert secret("task-prompt") in prompt and secret("fact-value") in prompt
        assert "gym" not in prompt and "Tea." not in prompt  # nothing of bob's
    answers = Event.objects.filter(event_type="assistant_response", text__contains="4417")
    assert [(event.owner_id, event.session_id) for event in answers] == [
        (world.user.pk, str(world.cron.pk))
    ]
    assert list(Event.objects.filter(owner=bob).values_list("pk", flat=True)) == bobs_events
    assert not Event.objects.filter(session_id=str(decoy.pk)).exists()
