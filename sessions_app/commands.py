"""The chat's slash commands, in one table: each one's names, arguments, help line
and how it runs.

/new, /reset and /compact change the chat, so they queue as a `ChatInput` and
run in order (sessions_app.runner); /help, /status and /stop answer at once.
The rest run one of the agent's memory or schedule tools directly, looked up in
the tools' registry and called with the chat's owner, session and agent, so
that their validation and their confirmations are the tools' own and memory and
schedules are usable with any model, or none, answering. Like /status they
answer the sender at once and are not stored in the chat. Only what the user
typed is read as a command, never a model's output, and no tool that asks for
approval (the terminal) is among them.
A message's whole path, end to end: docs/chat-runtime.md#now-or-queued.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from agent.frames import Emit, Error, Frame, Notice
from agent.tools import ToolContext, call_tool
from core.markdown import render_markdown
from core.ownership import Owner
from sessions_app import meter
from sessions_app.broadcast import STOP, signal
from sessions_app.chat import ChatError, find_chat
from sessions_app.models import ChatClaim

# A command's argument as its tool's arguments; None when it cannot be read.
Reader = Callable[[str], dict[str, Any] | None]


def nothing(argument: str) -> dict[str, Any] | None:
    return None if argument else {}


def whole(name: str) -> Reader:
    """The whole argument as the tool's argument `name`."""
    return lambda argument: {name: argument} if argument else None


def fact_key(argument: str) -> dict[str, Any] | None:
    category, dot, key = argument.partition(".")
    if not (dot and category.strip() and key.strip()):
        return None
    return {"category": category.strip(), "key": key.strip()}


def fact_and_value(argument: str) -> dict[str, Any] | None:
    name, equals, value = argument.partition("=")
    found = fact_key(name.strip())
    if not (equals and found and value.strip()):
        return None
    return {**found, "value": value.strip()}


# The first colon followed by a space ends the schedule, which may hold one ("at 14:30").
SCHEDULE = re.compile(r"(?s)(?P<schedule>.+?):\s+(?P<prompt>\S.*)")


def schedule(argument: str) -> dict[str, Any] | None:
    found = SCHEDULE.fullmatch(argument)
    if found is None or not found["schedule"].strip():
        return None
    return {"schedule": found["schedule"].strip(), "prompt": found["prompt"].strip()}


@dataclass(frozen=True)
class SlashCommand:
    names: tuple[str, ...]
    arguments: str  # as the help shows them, e.g. "<category>.<key> = <value>"
    help: str
    queued: bool = False  # it changes the chat: it runs in order, as a ChatInput
    tool: str = ""  # the agent's tool it runs, with its arguments from `read`
    read: Reader = nothing

    @property
    def usage(self) -> str:
        names = " or ".join(f"/{name}" for name in self.names)
        return f"{names} {self.arguments}".strip()


TASK = "<task name or id>"
TABLE = [
    SlashCommand(
        ("new", "reset"),
        "[message]",
        "start a fresh session (history is kept); the rest of the line is sent",
        queued=True,
    ),
    SlashCommand(
        ("compact",),
        "",
        "summarise older messages into a fresh session to free context",
        queued=True,
    ),
    SlashCommand(("status",), "", "model, tokens used and context use"),
    SlashCommand(("stop",), "", "stop the answer being written"),
    SlashCommand(
        ("remember",),
        "<category>.<key> = <value>",
        "save a fact (a new value replaces the old one)",
        tool="remember_fact",
        read=fact_and_value,
    ),
    SlashCommand(
        ("forget",), "<category>.<key>", "delete a saved fact", tool="forget_fact", read=fact_key
    ),
    SlashCommand(
        ("search",),
        "<query>",
        "search past conversations and memory files",
        tool="search_memory",
        read=whole("query"),
    ),
    SlashCommand(
        ("schedule",),
        "<when>: <prompt>",
        'schedule a prompt, e.g. "/schedule every weekday at 9am: plan my day"',
        tool="schedule_task",
        read=schedule,
    ),
    SlashCommand(("tasks",), "", "list the scheduled tasks", tool="list_tasks"),
    SlashCommand(("pause",), TASK, "pause a scheduled task", tool="pause_task", read=whole("task")),
    SlashCommand(("resume",), TASK, "resume a paused task", tool="resume_task", read=whole("task")),
    SlashCommand(
        ("cancel",), TASK, "delete a scheduled task", tool="cancel_task", read=whole("task")
    ),
    SlashCommand(("help",), "", "this list"),
]
NOTHING_RUNNING = "Nothing is running."
BY_NAME = {name: command for command in TABLE for name in command.names}
# Markdown: the chat shows it as a table (answer_now).
HELP = "| Command | What it does |\n|---|---|\n" + "\n".join(
    f"| `{command.usage}` | {command.help} |" for command in TABLE
)


@dataclass(frozen=True)
class Command:
    """A command as typed: its name (an alias stays as typed) and the rest of the line."""

    name: str
    argument: str

    @property
    def slash(self) -> SlashCommand:
        return BY_NAME[self.name]


def parse_command(text: str) -> Command | None:
    """`/reset hello` → Command("reset", "hello"); None for ordinary text,
    including text that merely starts with a slash, like a path."""
    if not text.startswith("/"):
        return None
    word, _, rest = text[1:].partition(" ")
    name = word.strip().lower()
    return Command(name, rest.strip()) if name in BY_NAME else None


async def run_tool(owner: Owner, key: str, command: Command) -> Frame:
    """The command's tool run in the chat `key`: its answer as a notice, or
    what was wrong (the usage, or the tool's own error) as an error."""
    slash = command.slash
    arguments = slash.read(command.argument)
    if arguments is None:
        return Error(f"Usage: {slash.usage}")
    try:
        session = await database_sync_to_async(find_chat)(owner, key)
    except ChatError as exc:
        return Error(str(exc))
    context = ToolContext.for_session(owner, str(session.pk), session.agent.name, by_person=True)
    # As JSON, like the model's: through the same schema check its calls get.
    output = await call_tool(context, slash.tool, json.dumps(arguments))
    return Error(output.error) if output.error else Notice(output.text)


async def answer_now(owner: Owner, key: str, command: Command, reply: Emit | None) -> None:
    """A command that does not change the chat (/help, /status, /stop, a tool's):
    answered at once to its sender (`reply`), never queued."""
    if reply is None:
        return
    if command.slash.tool:
        return await reply(await run_tool(owner, key, command))
    if command.name == "help":
        return await reply(await laid_out(HELP))
    if command.name == "status":
        try:
            session = await database_sync_to_async(find_chat)(owner, key)
        except ChatError as exc:
            return await reply(Error(str(exc)))
        return await reply(await laid_out(await meter.status(session)))
    if not await database_sync_to_async(ChatClaim.objects.is_held)(owner.pk, key):
        return await reply(Notice(NOTHING_RUNNING))
    await signal(owner.pk, key, STOP)


async def laid_out(markdown: str) -> Notice:
    """A notice with structure (/help, /status), which the chat shows as lists and
    tables: its text is Markdown, rendered safe (off the event loop: a long one
    renders in another process)."""
    html = await sync_to_async(render_markdown, thread_sensitive=False)(markdown)
    return Notice(markdown, html=html)
