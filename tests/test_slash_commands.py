"""Slash commands that run the agent's memory and schedule tools directly."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import User

from agent.tools import ToolContext, ToolError, get_tool
from core.markdown import render_markdown
from memory import recording, tasks
from memory.models import Fact
from scheduler.models import ScheduledTask
from sessions_app.commands import HELP, TABLE, parse_command
from sessions_app.models import Session
from tests.support.records import make_task
from tests.support.scripted_llm import Reply
from tests.support.websocket import connect, receive, send, until

pytestmark = pytest.mark.django_db(transaction=True)


async def answer(user: User, key: str, text: str) -> dict:
    """The one frame that answers `text` typed in the chat `key`."""
    ws = await connect(user, key)
    await send(ws, type="message", text=text)
    frame = await receive(ws)
    assert await ws.receive_nothing(timeout=0.2)  # nothing else: no turn started
    await ws.disconnect()
    return frame


def notice(text: str) -> dict:
    return {"type": "notice", "text": text}


def error(message: str) -> dict:
    return {"type": "error", "message": message}


def test_it_reads_each_commands_arguments():
    read = {command.names[0]: command.read for command in TABLE}
    assert read["remember"]("Preference.Tea = green, no sugar") == {
        "category": "Preference",
        "key": "Tea",
        "value": "green, no sugar",
    }
    assert read["remember"]("person.mum.birthday = 3 May = spring") == {
        "category": "person",
        "key": "mum.birthday",
        "value": "3 May = spring",
    }
    assert read["forget"]("preference.tea") == {"category": "preference", "key": "tea"}
    # A colon inside the schedule ("14:30") is not the one that ends it.
    assert read["schedule"]("daily at 14:30: check my mail: all of it") == {
        "schedule": "daily at 14:30",
        "prompt": "check my mail: all of it",
    }
    assert read["pause"]("Morning report") == {"task": "Morning report"}
    assert read["tasks"]("") == {}


@pytest.mark.parametrize(
    "name, argument",
    [
        ("remember", ""),
        ("remember", "preference.tea"),
        ("remember", "preference = green"),
        ("remember", ".tea = green"),
        ("remember", "preference.tea ="),
        ("forget", "tea"),
        ("forget", "preference."),
        ("search", ""),
        ("schedule", "tomorrow at 9am"),
        ("schedule", ": water the plants"),
        ("schedule", "daily at 14:30"),
        ("tasks", "all"),
        ("pause", ""),
        ("resume", ""),
        ("cancel", ""),
    ],
)
def test_it_cannot_read_bad_arguments(name, argument):
    assert {command.names[0]: command for command in TABLE}[name].read(argument) is None


def test_it_lists_every_command_in_help():
    lines = HELP.splitlines()[2:]  # under the table's header and delimiter rows
    assert len(lines) == len(TABLE)
    for usage in [
        "/new or /reset [message]",
        "/remember <category>.<key> = <value>",
        "/forget <category>.<key>",
        "/search <query>",
        "/schedule <when>: <prompt>",
        "/tasks",
        "/pause <task name or id>",
        "/resume <task name or id>",
        "/cancel <task name or id>",
        "/status",
        "/help",
    ]:
        assert any(line.startswith(f"| `{usage}` | ") for line in lines), usage


def test_it_lays_out_help_as_a_table():
    html = render_markdown(HELP)
    assert html.count("<tr>") == len(TABLE) + 1  # a row per command, and the header
    assert "<td><code>/remember &lt;category&gt;.&lt;key&gt; = &lt;value&gt;</code></td>" in html


def test_it_reads_commands_only_by_their_names():
    assert parse_command("/Remember a.b = c") == parse_command("/remember a.b = c")
    assert parse_command("/remembering a.b = c") is None
    assert parse_command("remember a.b = c") is None


async def test_it_remembers_and_updates_a_fact(alice, alice_session):
    assert await answer(alice, alice_session.key, "/remember Preference.Tea = green") == notice(
        "Remembered preference/tea: green"
    )
    assert await answer(alice, alice_session.key, "/remember preference.tea = oolong") == notice(
        "Updated preference/tea: oolong"
    )
    fact = await Fact.objects.aget(owner=alice)
    # Typed by the user: theirs, from their message in this chat.
    assert (fact.category, fact.key, fact.value, fact.source) == (
        "preference",
        "tea",
        "oolong",
        Fact.Source.USER,
    )
    assert (fact.origin, fact.origin_session_id) == (Fact.Origin.MESSAGE, str(alice_session.pk))


async def test_it_answers_bad_arguments_with_the_usage(alice, alice_session, llm):
    cases = {
        "/remember tea is green": "Usage: /remember <category>.<key> = <value>",
        "/forget tea": "Usage: /forget <category>.<key>",
        "/search": "Usage: /search <query>",
        "/schedule tomorrow": "Usage: /schedule <when>: <prompt>",
        "/tasks please": "Usage: /tasks",
        "/pause": "Usage: /pause <task name or id>",
    }
    for typed, usage in cases.items():
        assert await answer(alice, alice_session.key, typed) == error(usage)
    assert not await Fact.objects.aexists()
    assert llm.requests == []


async def test_it_answers_with_the_tools_own_validation(alice, alice_session):
    long_key = "k" * 256
    assert await answer(alice, alice_session.key, f"/remember preference.{long_key} = x") == error(
        "remember_fact: 'key' is longer than 255."
    )
    # The tool's own refusal, word for word, as the model would have read it.
    with pytest.raises(ToolError) as refused:
        await database_sync_to_async(get_tool("schedule_task").run)(
            tool_context(alice, alice_session),
            {"schedule": "whenever it rains", "prompt": "a coat"},
        )
    assert await answer(alice, alice_session.key, "/schedule whenever it rains: a coat") == error(
        str(refused.value)
    )
    assert not await ScheduledTask.objects.aexists()


def tool_context(user: User, session: Session) -> ToolContext:
    return ToolContext(user, str(session.pk), session.agent.name, workspace=Path("/nonexistent"))


async def test_it_forgets_only_the_users_own_fact(alice, bob, alice_session):
    await Fact.objects.acreate(owner=alice, category="preference", key="tea", value="green")
    await Fact.objects.acreate(owner=bob, category="person", key="sister", value="Ana")
    assert await answer(alice, alice_session.key, "/forget preference.tea") == notice(
        "Forgot preference/tea."
    )
    assert await answer(alice, alice_session.key, "/forget person.sister") == error(
        "There is no fact person/sister."
    )
    assert [fact.value async for fact in Fact.objects.all()] == ["Ana"]


async def test_it_searches_the_users_own_memory(alice, bob, alice_session):
    assert await answer(alice, alice_session.key, "/search dog carrots") == notice(
        "Nothing in memory matches that."
    )

    def remember() -> None:
        recording.record(alice, "s1", "user_message", {"content": "My dog Biscuit loves carrots"})
        recording.record(bob, "s2", "user_message", {"content": "Bob's dog Rex loves carrots"})
        tasks.embed_missing()

    await database_sync_to_async(remember)()
    found = (await answer(alice, alice_session.key, "/search dog carrots"))["text"]
    assert "User message: My dog Biscuit loves carrots (source: session s1" in found
    assert "Rex" not in found


async def test_it_schedules_lists_pauses_resumes_and_cancels_a_task(alice, alice_session, llm):
    assert await answer(alice, alice_session.key, "/tasks") == notice(
        "There are no scheduled tasks."
    )
    scheduled = await answer(
        alice, alice_session.key, "/schedule every weekday at 9am: plan my day"
    )
    task = await ScheduledTask.objects.aget(owner=alice)
    assert scheduled["type"] == "notice"
    assert scheduled["text"].startswith(
        f'Scheduled "{task.name}" (id {task.pk}): cron `0 9 * * 1-5`'
    )
    assert (task.prompt, task.original_schedule) == ("plan my day", "every weekday at 9am")

    listed = (await answer(alice, alice_session.key, "/tasks"))["text"]
    assert f'"{task.name}" (id {task.pk})' in listed and "Prompt: plan my day" in listed
    assert await answer(alice, alice_session.key, f"/pause {task.name}") == notice(
        f'Paused "{task.name}" (id {task.pk}).'
    )
    assert (await ScheduledTask.objects.aget(pk=task.pk)).is_paused
    assert await answer(alice, alice_session.key, f"/resume {task.pk}") == notice(
        f'Resumed "{task.name}" (id {task.pk}).'
    )
    assert not (await ScheduledTask.objects.aget(pk=task.pk)).is_paused
    assert await answer(alice, alice_session.key, f"/cancel {task.pk}") == notice(
        f'Cancelled "{task.name}" (id {task.pk}).'
    )
    assert not await ScheduledTask.objects.aexists()
    assert llm.requests == []


async def test_it_refuses_another_users_task_as_not_found(alice, bob, alice_session):
    theirs = await database_sync_to_async(make_task)(bob, "Bob's report")
    for verb in ("pause", "cancel"):
        assert await answer(alice, alice_session.key, f"/{verb} {theirs.pk}") == error(
            f'You have no scheduled task "{theirs.pk}". List them with list_tasks.'
        )
    assert await answer(alice, alice_session.key, "/tasks") == notice(
        "There are no scheduled tasks."
    )
    theirs = await ScheduledTask.objects.aget(pk=theirs.pk)
    assert not theirs.is_paused


async def test_it_answers_while_the_model_is_answering(alice, alice_session, llm):
    release = threading.Event()
    llm.script(Reply(text="Slowly.", hold=release))
    ws = await connect(alice, alice_session.key)
    await send(ws, type="message", text="Tell me something")
    await until(ws, "event")  # the user's message, stored: the turn is under way
    await send(ws, type="message", text="/remember preference.tea = green")
    frames = await until(ws, "notice")
    assert frames[-1]["text"] == "Remembered preference/tea: green"
    assert all(frame["type"] != "done" for frame in frames)
    release.set()
    assert (await until(ws))[-1]["status"] == "completed"
    await ws.disconnect()
    assert len(llm.requests) == 1  # the message's turn only


async def test_it_never_runs_a_command_the_model_writes(alice, alice_session, llm):
    await Fact.objects.acreate(owner=alice, category="preference", key="tea", value="green")
    llm.script(Reply(text="/forget preference.tea"))
    ws = await connect(alice, alice_session.key)
    await send(ws, type="message", text="Say the forget command")
    assert (await until(ws))[-1]["status"] == "completed"
    await ws.disconnect()
    assert await Fact.objects.filter(owner=alice).aexists()
