"""Changes to memory files in their owner's history. The files live on disk, not
in rows, so each writer (the files pages, the agent's file tools) reads the text
before and after and records the two here."""

from __future__ import annotations

from pathlib import Path

from core.history import Actor, record_change
from core.models import Change
from core.ownership import Owner
from memory.files.paths import MemoryPathError, read_memory_file


def text_now(workspace: Path, path: str) -> str | None:
    """The file's text, or None if it is not there or not text (a link, binary):
    what a change is told from."""
    try:
        text, _ = read_memory_file(workspace, path)
    except MemoryPathError:  # NotFound is one
        return None
    return text


def record_file_change(
    owner: Owner,
    agent: str,
    path: str,
    actor: Actor,
    before: str | None,
    after: str | None,
    *,
    forgotten: bool = False,
) -> None:
    """`forgotten`: lines were forgotten, so the text before is not kept
    (the change is recorded with the text left)."""
    if before is None and after is None:
        return
    if forgotten:
        action = Change.Action.CHANGED
    elif before is None:
        action = Change.Action.CREATED
    elif after is None:
        action = Change.Action.DELETED
    else:
        action = Change.Action.CHANGED
    subject = f"{agent}:{path}"
    record_change(
        owner,
        actor,
        Change.Subject.MEMORY_FILE,
        subject,
        subject,
        action,
        None if before is None or forgotten else {"text": before},
        None if after is None else {"text": after},
    )
