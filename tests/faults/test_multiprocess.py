"""The team profile for real: two daphne processes and a django-q2 cluster share
one PostgreSQL database and Redis. A chat streams to tabs on either process,
and work that several processes may pick up (embeddings, due scheduled tasks,
consolidation) happens exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from memory.consolidation import PROMPT as CONSOLIDATION_PROMPT
from tests.processes import (
    ROOT,
    app_env,
    chat_socket,
    free_port,
    logged_in_chat,
    manage_json,
    say,
    spawn_daphne,
    start_qcluster,
    stop_process,
    stop_process_group,
    until_done,
    wait_for_health,
)
from tests.scripted_llm import Reply, ScriptedLLM

pytestmark = pytest.mark.skipif(
    not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")),
    reason="team profile only: several processes need a shared PostgreSQL and Redis",
)

USERNAME = "multi"
DEFAULT_ANSWER = "Noted."


class RoutedLLM(ScriptedLLM):
    """Answers each request by what it asks: several processes ask, in no
    particular order."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: dict[str, Reply] = {}

    def next_reply(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            self.requests.append(body)
        if is_consolidation(body):
            summary = {
                "summary": "Ada plans a trip to Porto in May.",
                "facts": [{"category": "plan", "key": "may_trip", "value": "Porto in May"}],
            }
            return Reply(text=json.dumps(summary))
        return self.answers.get(last_user_text(body), Reply(text=DEFAULT_ANSWER))

    def asked(self, matches: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        with self.lock:
            return [body for body in self.requests if matches(body)]


def is_consolidation(body: dict[str, Any]) -> bool:
    return body["messages"][0]["content"] == CONSOLIDATION_PROMPT


def last_user_text(body: dict[str, Any]) -> str:
    users = [m for m in body["messages"] if m["role"] == "user"]
    return str(users[-1]["content"]) if users else ""


@dataclass
class Stack:
    env: dict[str, str]
    llm: RoutedLLM
    ports: tuple[int, int]
    cookie: str
    key: str


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp("multiprocess")
    with RoutedLLM() as llm:
        env = app_env(data_dir, NEOTASK_LLM_BASE_URL=llm.url, NEOTASK_LLM_API_KEY=llm.api_key)
        cookie, key = logged_in_chat(env, USERNAME, migrate=True)
        ports = (free_port(), free_port())
        servers: list[subprocess.Popen] = []
        cluster = None
        try:
            for number, port in enumerate(ports):
                # Logs stay in the test's temp dir, for when something fails.
                log = open(data_dir / f"daphne-{number}.log", "w")  # noqa: SIM115
                servers.append(spawn_daphne(env, port, log))
            cluster = start_qcluster(env, open(data_dir / "qcluster.log", "w"))  # noqa: SIM115
            for port, server in zip(ports, servers, strict=True):
                wait_for_health(port, server)
            yield Stack(env, llm, ports, cookie, key)
        finally:
            for server in servers:
                stop_process(server)
            if cluster is not None:
                stop_process_group(cluster)


def eventually(read: Callable[[], Any], done: Callable[[Any], bool], what: str) -> Any:
    """Read until `done` holds (the cluster works on its own time); the last reading."""
    deadline = time.monotonic() + 90
    while True:
        value = read()
        if done(value):
            return value
        assert time.monotonic() < deadline, f"{what}; last reading: {value}"
        time.sleep(1)


def race(stack: Stack, commands: list[list[str]], table: str, claim: str) -> list[str]:
    """Run the manage.py `commands` at once, each claiming rows of `table` with an
    UPDATE starting with `claim`. A SHARE lock on the table holds every claim at
    its write (reads go on) until each process is waiting there or has given up,
    so that they claim at the same moment. Their outputs."""
    url = stack.env["DATABASE_URL"]
    with psycopg.connect(url) as gate, psycopg.connect(url, autocommit=True) as monitor:
        gate.execute(f'LOCK TABLE "{table}" IN SHARE MODE')
        processes = [
            subprocess.Popen(
                [sys.executable, "manage.py", *command],
                cwd=ROOT,
                env=stack.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for command in commands
        ]

        def waiting() -> int:
            row = monitor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND query LIKE %s",
                [claim + "%"],
            ).fetchone()
            return row[0] if row else 0

        try:
            eventually(
                lambda: waiting() + sum(p.poll() is not None for p in processes),
                lambda met: met >= len(commands),
                "the processes did not meet at the claim",
            )
        finally:
            gate.rollback()  # lifts the lock
            outputs = [process.communicate(timeout=120)[0] for process in processes]
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0, output
    return outputs


def test_it_streams_a_turn_to_tabs_on_both_processes(stack: Stack) -> None:
    deltas = ["Fan", "-out ", "reaches ", "every ", "process."]
    stack.llm.answers["Hello from process A"] = Reply(deltas=deltas)

    async def conversation() -> tuple[list[dict], list[dict]]:
        on_a = chat_socket(stack.ports[0], stack.cookie, stack.key)
        on_b = chat_socket(stack.ports[1], stack.cookie, stack.key)
        async with on_a as tab_a, on_b as tab_b:
            for tab in (tab_a, tab_b):
                # Answered only after the consumer joined the chat's group.
                await tab.send(json.dumps({"type": "message", "text": "/help"}))
                assert json.loads(await tab.recv())["type"] == "notice"
            await tab_a.send(json.dumps({"type": "message", "text": "Hello from process A"}))
            return await until_done(tab_a), await until_done(tab_b)

    frames_a, frames_b = asyncio.run(conversation())
    assert [f["text"] for f in frames_b if f["type"] == "delta"] == deltas
    assert frames_b == frames_a  # same frames, same order, same final `done`
    assert frames_b[-1]["status"] == "completed"
    stored = [f["event"]["event_type"] for f in frames_b if f["type"] == "event"]
    assert stored == ["user_message", "assistant_response"]


DUE_TASK = """
import json
from datetime import timedelta
from django.contrib.auth import get_user_model
from django.utils import timezone
from scheduler.models import ScheduledTask
from sessions_app.models import Agent
owner = get_user_model().objects.get(username={username!r})
task = ScheduledTask.objects.create(
    owner=owner, name="Yearly review", cron_expr="0 9 1 1 *", original_schedule="yearly",
    prompt={prompt!r}, agent=Agent.objects.default_for(owner),
    next_run_at=timezone.now() - timedelta(minutes=5),
)
print(json.dumps(str(task.pk)))
"""

TASK_RUNS = """
import json
from django.utils import timezone
from memory.models import Event
from scheduler.models import ScheduledTask
from sessions_app.models import Session
task = ScheduledTask.objects.get(pk={task_id!r})
events = Event.objects.filter(
    session_id__in=[str(s.pk) for s in Session.objects.filter(key=task.chat_key)]
)
print(json.dumps({{
    "prompts": list(events.filter(event_type="user_message").values_list("text", flat=True)),
    "answers": list(events.filter(event_type="assistant_response").values_list("text", flat=True)),
    "ran": task.last_run_at is not None,
    "next_run_in_future": task.next_run_at > timezone.now(),
}}))
"""


def test_it_runs_a_due_task_once_while_processes_race_for_it(stack: Stack) -> None:
    prompt = "Review the year: what went well?"
    stack.llm.answers[prompt] = Reply(text="A good year.")
    task_id = manage_json(stack.env, DUE_TASK.format(username=USERNAME, prompt=prompt))
    claim = 'UPDATE "scheduled_tasks" SET "next_run_at"'
    outputs = race(stack, [["run_due_tasks"], ["run_due_tasks"]], "scheduled_tasks", claim)
    runs = eventually(
        lambda: manage_json(stack.env, TASK_RUNS.format(task_id=task_id)),
        lambda runs: runs["answers"] and runs["ran"],
        "the task's run did not finish",
    )
    assert len(stack.llm.asked(lambda body: last_user_text(body) == prompt)) == 1
    assert runs == {
        "prompts": [prompt],
        "answers": ["A good year."],
        "ran": True,
        "next_run_in_future": True,
    }
    assert sum("ran 1 task(s)" in output for output in outputs) <= 1  # or the cluster ran it


OLD_CHAT = """
import json
from datetime import timedelta
from django.contrib.auth import get_user_model
from django.utils import timezone
from memory.models import Event
owner = get_user_model().objects.get(username={username!r})
lines = [
    ("user_message", "I am going to Porto in May."),
    ("assistant_response", "Lovely. For how long?"),
    ("user_message", "Two weeks, by train."),
    ("assistant_response", "Then book the night train early."),
]
for number, (kind, text) in enumerate(lines):
    event = Event.record(owner, "old-chat", kind, {{"content": text}})
    Event.objects.filter(pk=event.pk).update(
        created_at=timezone.now() - timedelta(days=2) + timedelta(minutes=number)
    )
print(json.dumps([text for _, text in lines]))
"""

CONSOLIDATED = """
import json
from memory.models import Event, Fact
events = Event.objects.filter(session_id="old-chat")
print(json.dumps({
    "summaries": list(events.filter(event_type="summary").values_list("text", flat=True)),
    "unconsolidated": events.exclude(event_type="summary")
    .filter(consolidated_at__isnull=True).count(),
    "claimed": events.filter(consolidation_claim__isnull=False).count(),
    "facts": list(Fact.objects.filter(key="may_trip").values_list("value", flat=True)),
}))
"""


def test_it_consolidates_each_old_event_once_while_processes_race(stack: Stack) -> None:
    texts = manage_json(stack.env, OLD_CHAT.format(username=USERNAME))
    claim = 'UPDATE "events" SET "consolidation_claim"'
    race(stack, [["consolidate"], ["consolidate"]], "events", claim)
    result = eventually(
        lambda: manage_json(stack.env, CONSOLIDATED),
        lambda result: result["summaries"],
        "no summary was written",
    )
    asked = stack.llm.asked(is_consolidation)
    assert len(asked) == 1
    assert all(text in asked[0]["messages"][1]["content"] for text in texts)
    assert result == {
        "summaries": ["Ada plans a trip to Porto in May."],
        "unconsolidated": 0,
        "claimed": 0,
        "facts": ["Porto in May"],
    }


EMBEDDINGS = """
import json
from django_q.models import Failure, Success
from memory.models import Event
from memory.tasks import EMBEDDED_TYPES
events = Event.objects.filter(event_type__in=EMBEDDED_TYPES).exclude(text="")
jobs = {}
for job in Success.objects.filter(func="memory.tasks.embed_event"):
    jobs.setdefault(str(job.args[0]), []).append(job.result)
# A turn embeds its user message itself (for recall) and stores that vector.
in_turn = events.filter(event_type="user_message", data__has_key="turn_usage")
print(json.dumps({
    "events": [str(pk) for pk in events.values_list("id", flat=True)],
    "in_turn": [str(pk) for pk in in_turn.values_list("id", flat=True)],
    "missing": events.filter(embedding__isnull=True).count(),
    "jobs": jobs,
    "swept": sum(r.result or 0 for r in Success.objects.filter(func="memory.tasks.embed_missing")),
    "failures": Failure.objects.filter(func__startswith="memory.tasks.embed").count(),
}))
"""


def test_it_embeds_every_event_exactly_once(stack: Stack) -> None:
    frames = asyncio.run(say(stack.ports[1], stack.cookie, stack.key, "One more, from B"))
    assert frames[-1]["status"] == "completed"

    def accounted(report: dict[str, Any]) -> int:
        # Each write of a vector is counted by what made it: a queued job answers
        # 1 (or 0 if the sweep was first), the sweep its total, a turn 1.
        jobs = sum(sum(results) for results in report["jobs"].values())
        return jobs + report["swept"] + len(report["in_turn"])

    report = eventually(
        lambda: manage_json(stack.env, EMBEDDINGS),
        lambda report: report["missing"] == 0 and accounted(report) >= len(report["events"]),
        "not every event was embedded",
    )
    # Every stored event counts, also those of the module's other tests.
    assert {str(f["event"]["id"]) for f in frames if f["type"] == "event"} <= set(report["events"])
    assert accounted(report) == len(report["events"])  # no event embedded twice
    # Each event was queued once, and its job ran once; a turn's message not at all.
    assert report["in_turn"], "the chat turns' messages are embedded by the turns"
    runs = {event: len(report["jobs"].get(event, [])) for event in report["events"]}
    assert runs == {event: int(event not in report["in_turn"]) for event in report["events"]}
    assert report["failures"] == 0
