"""The team profile for real: two daphne processes and a django-q2 cluster share
one PostgreSQL database and Redis. A chat streams to tabs on either process,
and work that several processes may pick up (embeddings, due scheduled tasks,
consolidation) happens exactly once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from memory.consolidation import PROMPT as CONSOLIDATION_PROMPT
from tests.programs import accounts, events, tasks
from tests.support.processes import (
    ROOT,
    PrivatePostgres,
    PrivateRedis,
    app_env,
    chat_socket,
    free_port,
    logged_in_chat,
    message_frame,
    run_program,
    say,
    spawn_daphne,
    start_qcluster,
    stop_process,
    stop_process_group,
    until_done,
    wait_for_health,
)
from tests.support.scripted_llm import Reply, ScriptedLLM, reply_with_tool

# Several processes share a PostgreSQL and a Redis of the module's own
# (tests/faults/conftest.py), so that the tests run on either profile.
pytestmark = pytest.mark.slow

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
        last = body["messages"][-1]
        if last["role"] == "tool":  # a tool ran: say what it gave
            return Reply(text=f"The tool said: {last['content']}")
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
def stack(
    tmp_path_factory: pytest.TempPathFactory,
    module_postgres: PrivatePostgres,
    module_redis: PrivateRedis,
) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp("multiprocess")
    with RoutedLLM() as llm:
        env = app_env(
            data_dir,
            DATABASE_URL=module_postgres.url,
            REDIS_URL=module_redis.url,
            NEOTASK_LLM_BASE_URL=llm.url,
            NEOTASK_LLM_API_KEY=llm.api_key,
            NEOTASK_TERMINAL_ENABLED="true",
        )
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
                await tab.send(message_frame("/help"))
                assert json.loads(await tab.recv())["type"] == "notice"
            await tab_a.send(message_frame("Hello from process A"))
            return await until_done(tab_a), await until_done(tab_b)

    frames_a, frames_b = asyncio.run(conversation())
    assert "".join(f["text"] for f in frames_b if f["type"] == "delta") == "".join(deltas)
    assert frames_b == frames_a  # same frames, same order, same final `done`
    assert frames_b[-1]["status"] == "completed"
    stored = [f["event"]["event_type"] for f in frames_b if f["type"] == "event"]
    assert stored == ["user_message", "assistant_response"]


def test_it_runs_a_due_task_once_while_processes_race_for_it(stack: Stack) -> None:
    prompt = "Review the year: what went well?"
    stack.llm.answers[prompt] = Reply(text="A good year.")
    task_id = run_program(stack.env, tasks.due, USERNAME, prompt)
    claim = 'UPDATE "scheduled_tasks" SET "next_run_at"'
    outputs = race(stack, [["run_due_tasks"], ["run_due_tasks"]], "scheduled_tasks", claim)
    runs = eventually(
        lambda: run_program(stack.env, tasks.runs, task_id),
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


def test_it_consolidates_each_old_event_once_while_processes_race(stack: Stack) -> None:
    texts = run_program(stack.env, events.old_chat, USERNAME)
    claim = 'UPDATE "events" SET "consolidation_claim"'
    race(stack, [["consolidate"], ["consolidate"]], "events", claim)
    result = eventually(
        lambda: run_program(stack.env, events.consolidated),
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


def test_it_embeds_every_event_exactly_once(stack: Stack) -> None:
    frames = asyncio.run(say(stack.ports[1], stack.cookie, stack.key, "One more, from B"))
    assert frames[-1]["status"] == "completed"

    def accounted(report: dict[str, Any]) -> int:
        # Each write of a vector is counted by what made it: a queued job answers
        # how many of its events it embedded (not those the sweep did first), the
        # sweep its total, a turn 1.
        return report["by_jobs"] + report["swept"] + len(report["in_turn"])

    report = eventually(
        lambda: run_program(stack.env, events.embeddings),
        lambda report: report["missing"] == 0 and accounted(report) >= len(report["events"]),
        "not every event was embedded",
    )
    # Every stored event counts, also those of the module's other tests.
    assert {str(f["event"]["id"]) for f in frames if f["type"] == "event"} <= set(report["events"])
    assert accounted(report) == len(report["events"])  # no event embedded twice
    # Each event was asked for in one job, which ran once; a turn's message not at all.
    assert report["in_turn"], "the chat turns' messages are embedded by the turns"
    runs = {event: report["jobs"].get(event, 0) for event in report["events"]}
    assert runs == {event: int(event not in report["in_turn"]) for event in report["events"]}
    assert report["failures"] == 0


def conversation_of(stack: Stack, key: str) -> list[list[Any]]:
    found = run_program(stack.env, events.of_chats, [key])[key]
    return [[kind, text, data.get("reason")] for kind, text, data in found]


def user_and_chat(stack: Stack, username: str) -> tuple[str, str, str, str]:
    """A new user's cookie, chat key, API token and the chat's session id."""
    cookie, key = logged_in_chat(stack.env, username)
    token, session_id = run_program(stack.env, accounts.api_token, username, key)
    return cookie, key, token, session_id


async def post_message(port: int, token: str, session_id: str, text: str) -> dict[str, Any]:
    import httpx

    async with httpx.AsyncClient(timeout=120) as client:
        response = await client.post(
            f"http://127.0.0.1:{port}/api/v1/sessions/{session_id}/messages",
            json={"text": text},
            headers={"Authorization": f"Bearer {token}"},
        )
    assert response.status_code == 200, response.text
    return response.json()


async def dones(socket: Any, count: int) -> list[dict[str, Any]]:
    """Frames until the `count`th `done`."""
    frames: list[dict[str, Any]] = []
    while count:
        frames += await until_done(socket, seconds=90)
        count -= 1
    return frames


def test_it_runs_one_input_at_a_time_per_chat_from_both_processes_and_the_api(
    stack: Stack,
) -> None:
    """Two tabs on two processes and a program on the API send to one chat at
    once: every message is answered, one turn at a time, each sender's in order."""
    cookie, key, token, session_id = user_and_chat(stack, "one-at-a-time")
    texts = {side: [f"{side} says {n}" for n in range(3)] for side in ("tab A", "tab B")}
    texts["api"] = ["api says 0"]
    for sent in texts.values():
        for text in sent:
            words = ["answer ", "to ", *text.split(" ")]
            stack.llm.answers[text] = Reply(deltas=[w + " " for w in words[2:]], delay=0.05)

    async def at_once() -> tuple[list[dict], list[dict], dict]:
        on_a = chat_socket(stack.ports[0], cookie, key)
        on_b = chat_socket(stack.ports[1], cookie, key)
        async with on_a as tab_a, on_b as tab_b:

            async def send_all(tab: Any, side: str) -> None:
                for text in texts[side]:
                    await tab.send(message_frame(text))

            api = asyncio.create_task(post_message(stack.ports[0], token, session_id, "api says 0"))
            await asyncio.gather(send_all(tab_a, "tab A"), send_all(tab_b, "tab B"))
            seen_a, seen_b = await asyncio.gather(dones(tab_a, 7), dones(tab_b, 7))
            return seen_a, seen_b, await api

    seen_a, seen_b, answered = asyncio.run(at_once())
    assert answered["status"] == "completed"
    assert answered["answer"].split() == ["api", "says", "0"]
    stored = [(kind, text) for kind, text, _ in conversation_of(stack, key)]
    turns = [pair for pair in stored if pair[0] in ("user_message", "assistant_response")]
    # Strictly message, answer, message, answer: never two turns interleaved.
    assert [kind for kind, _ in turns] == ["user_message", "assistant_response"] * 7
    for (_, asked), (_, answer) in zip(turns[::2], turns[1::2], strict=True):
        assert answer.split() == asked.split()
    asked = [text for _, text in turns[::2]]
    assert sorted(asked) == sorted(t for sent in texts.values() for t in sent)
    for side in ("tab A", "tab B"):
        assert [t for t in asked if t.startswith(side)] == texts[side]
    # Both tabs saw the same seven runs, and the messages that waited were shown as queued.
    assert [f["status"] for f in seen_a if f["type"] == "done"] == ["completed"] * 7
    assert [f for f in seen_a if f["type"] == "started"] == [
        f for f in seen_b if f["type"] == "started"
    ]
    assert any(f["type"] == "queued" for f in seen_a)


def test_it_stops_a_turn_from_a_tab_on_the_other_process(stack: Stack) -> None:
    """The API runs a turn in process A; /stop from a tab on process B ends it."""
    cookie, key, token, session_id = user_and_chat(stack, "stopper")
    stack.llm.answers["tell me a long story"] = Reply(
        deltas=[f"word{n} " for n in range(40)], delay=0.2
    )

    async def stopped() -> tuple[dict, list[dict]]:
        async with chat_socket(stack.ports[1], cookie, key) as tab_b:
            api = asyncio.create_task(
                post_message(stack.ports[0], token, session_id, "tell me a long story")
            )
            frames: list[dict] = []
            while not any(f["type"] == "delta" for f in frames):
                frames.append(json.loads(await asyncio.wait_for(tab_b.recv(), 60)))
            await tab_b.send(json.dumps({"type": "stop"}))
            frames += await until_done(tab_b)
            return await api, frames

    answered, frames = asyncio.run(stopped())
    assert answered["status"] == "stopped" and frames[-1]["status"] == "stopped"
    kinds = [kind for kind, _, _ in conversation_of(stack, key)]
    assert kinds[-2:] == ["assistant_response", "system"]  # kept, then "Stopped by the user."


def test_it_runs_a_command_approved_in_a_tab_on_the_other_process(stack: Stack) -> None:
    """The API's turn in process A waits for approval of a command; the click, in a
    tab on process B, reaches it through the chat's control group."""
    cookie, key, token, session_id = user_and_chat(stack, "approver")
    run_program(stack.env, accounts.allow_terminal, "approver")
    command = "echo approved-across"
    stack.llm.answers["run the echo please"] = reply_with_tool("terminal", {"command": command})

    async def approved() -> tuple[dict, list[dict]]:
        async with chat_socket(stack.ports[1], cookie, key) as tab_b:
            api = asyncio.create_task(
                post_message(stack.ports[0], token, session_id, "run the echo please")
            )
            frames: list[dict] = []
            while not any(f["type"] == "approval_request" for f in frames):
                frames.append(json.loads(await asyncio.wait_for(tab_b.recv(), 60)))
            request = frames[-1]
            assert request["command"] == command
            await tab_b.send(
                json.dumps(
                    {"type": "approval", "request_id": request["request_id"], "decision": "once"}
                )
            )
            frames += await until_done(tab_b)
            return await api, frames

    answered, frames = asyncio.run(approved())
    assert answered["status"] == "completed", answered
    assert answered["answer"].endswith("\napproved-across\n")  # what the command printed
    assert {"type": "approval_decided", "decision": "once"}.items() <= next(
        f for f in frames if f["type"] == "approval_decided"
    ).items()


def test_it_takes_over_from_a_worker_killed_mid_turn(stack: Stack, tmp_path: Any) -> None:
    """A third process dies mid-answer: its claim expires, the text it streamed
    is kept and marked, and the message queued behind it runs."""
    cookie, key = logged_in_chat(stack.env, "survivor")
    stack.llm.answers["a slow answer please"] = Reply(
        deltas=[f"part{n} " for n in range(60)], delay=0.2
    )
    stack.llm.answers["are you still there?"] = Reply(text="Yes, still here.")
    port = free_port()
    doomed = spawn_daphne(stack.env, port, open(tmp_path / "doomed.log", "w"))  # noqa: SIM115
    try:
        wait_for_health(port, doomed)

        async def crash() -> list[dict]:
            async with chat_socket(port, cookie, key) as on_doomed:
                await on_doomed.send(message_frame("a slow answer please"))
                streamed = ""
                # Past one lease renewal, which saves the streamed text.
                while streamed.count("part") < 35:
                    frame = json.loads(await asyncio.wait_for(on_doomed.recv(), 60))
                    streamed += frame.get("text", "") if frame["type"] == "delta" else ""
                async with chat_socket(stack.ports[0], cookie, key) as survivor:
                    await survivor.send(message_frame("are you still there?"))
                    doomed.kill()
                    doomed.wait()
                    # The dead turn's end, told by the survivor that took over, and the next.
                    return await dones(survivor, 2)

        frames = asyncio.run(crash())
    finally:
        stop_process(doomed)
    errors = [f["message"] for f in frames if f["type"] == "error"]
    assert any("stopped while answering" in message for message in errors)
    assert frames[-1]["status"] == "completed"
    stored = conversation_of(stack, key)
    assert [row[0] for row in stored] == [
        "user_message",
        "assistant_response",
        "error",
        "user_message",
        "assistant_response",
    ]
    kept = stored[1]
    assert kept[2] == "server_stopped" and kept[1].startswith("part0 part1 ")
    assert stored[3][1] == "are you still there?" and stored[4][1] == "Yes, still here."
