"""Tools over the agent's memory files (MEMORY.md, memory/**/*.md), confined to its workspace."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent.tools.registry import Ran, Tool, ToolContext, ToolError, register
from memory.files.history import record_file_change, text_now
from memory.files.indexing import index_path, index_workspace
from memory.files.paths import (
    MemoryPathError,
    append_memory_file,
    read_memory_file,
    write_memory_file,
)
from memory.models import MemoryFile

MAX_TEXT = 200_000  # characters per write or append; the file size limit applies as well
READ_CHARS = 20_000  # what a read shows at most: the model's context is small
PATH = {
    "type": "string",
    "maxLength": 512,
    "description": "MEMORY.md, or a .md file under memory/, e.g. memory/people.md",
}
TEXT = {"type": "string", "maxLength": MAX_TEXT}


def confined(action: Callable[[ToolContext, dict[str, Any]], str]) -> Callable:
    """Path and size problems become ToolErrors the model can act on."""

    def run(context: ToolContext, arguments: dict[str, Any]) -> str:
        try:
            return action(context, arguments)
        except MemoryPathError as exc:
            raise ToolError(str(exc)) from None

    return run


def reindex(context: ToolContext, path: str) -> None:
    index_path(context.owner, context.agent_name, path)


@confined
def read_file(context: ToolContext, arguments: dict[str, Any]) -> str:
    text, _ = read_memory_file(context.workspace, arguments["path"])
    if len(text) > READ_CHARS:
        return text[:READ_CHARS] + f"\n[… {len(text) - READ_CHARS} more characters not shown]"
    return text or "(the file is empty)"


def recorded(context: ToolContext, path: str, before: str | None) -> None:
    after = text_now(context.workspace, path)
    record_file_change(context.owner, context.agent_name, path, context.actor, before, after)


@confined
def append_file(context: ToolContext, arguments: dict[str, Any]) -> str:
    before = text_now(context.workspace, arguments["path"])
    path = append_memory_file(context.workspace, arguments["path"], arguments["text"])
    recorded(context, path, before)
    reindex(context, path)
    return f"Appended {len(arguments['text'])} characters to {path}."


@confined
def write_file(context: ToolContext, arguments: dict[str, Any]) -> str:
    before = text_now(context.workspace, arguments["path"])
    path = write_memory_file(context.workspace, arguments["path"], arguments["text"])
    recorded(context, path, before)
    reindex(context, path)
    return f"Wrote {path} ({len(arguments['text'])} characters)."


def list_files(context: ToolContext, arguments: dict[str, Any]) -> str:
    index_workspace(context.owner, context.agent_name)
    rows = MemoryFile.objects.owned_by(context.owner).filter(agent=context.agent_name)
    lines = [
        f"{row.path} ({row.size} bytes"
        + (f", not indexed: {row.skip_reason})" if row.skip_reason else ")")
        for row in rows
    ]
    return "\n".join(lines) if lines else "There are no memory files yet (MEMORY.md, memory/*.md)."


def files(verb: str) -> Callable[[list[Ran]], str]:
    """What calls did to which files: "Read MEMORY.md", "Wrote notes.md, MEMORY.md"."""
    return lambda calls: f"{verb} " + ", ".join(dict.fromkeys(c.arguments["path"] for c in calls))


register(
    Tool(
        name="read_memory_file",
        description="Read one of your memory files (MEMORY.md or memory/*.md).",
        parameters={"type": "object", "properties": {"path": PATH}, "required": ["path"]},
        run=read_file,  # its answer is outside text: a file may hold a document
        confirm=files("Read"),
    )
)
register(
    Tool(
        name="append_memory_file",
        description=(
            "Add text at the end of a memory file (created if missing): notes worth keeping "
            "across sessions."
        ),
        parameters={
            "type": "object",
            "properties": {"path": PATH, "text": TEXT},
            "required": ["path", "text"],
        },
        run=append_file,
        outside_text=False,
        lasting=True,
        confirm=files("Added to"),
    )
)
register(
    Tool(
        name="write_memory_file",
        description="Replace the whole content of a memory file (created if missing).",
        parameters={
            "type": "object",
            "properties": {"path": PATH, "text": TEXT},
            "required": ["path", "text"],
        },
        run=write_file,
        outside_text=False,
        lasting=True,
        confirm=files("Wrote"),
    )
)
register(
    Tool(
        name="list_memory_files",
        description="List your memory files with their sizes.",
        parameters={"type": "object", "properties": {}},
        run=list_files,
        outside_text=False,
        confirm=lambda calls: "Listed your memory files",
    )
)
