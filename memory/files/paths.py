"""Which paths are memory files, and reading and writing them.

Paths given by the agent or the browser go through `memory_path`, which keeps them
inside the workspace (no "..", no absolute paths) and to the memory files themselves,
without looking at the disk; `workspace_fs` then opens them without following links.
Writes are atomic (a temporary file renamed over the old one).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path, PurePosixPath

from django.conf import settings

from memory.files.quota import check_room
from memory.files.workspace_fs import MemoryPathError, NotFound, WorkspaceFS

MEMORY_FILE = "MEMORY.md"
MEMORY_DIR = "memory"
MAX_PATH_CHARS = 512  # MemoryFile.path
MAX_NAME_BYTES = 200  # of the file system's 255, less the temporary file's affixes


def is_memory_path(relative: PurePosixPath) -> bool:
    """MEMORY.md at the top, or a .md file anywhere under memory/."""
    if relative.parts == (MEMORY_FILE,):
        return True
    return (
        len(relative.parts) >= 2
        and relative.parts[0] == MEMORY_DIR
        and relative.suffix.lower() == ".md"
        and not any(part.startswith(".") for part in relative.parts)
    )


def memory_path(path: str) -> str:
    """The normalised relative path of a memory file, checked as text only."""
    text = (path or "").strip().replace("\\", "/")
    if not text:
        raise MemoryPathError("A path is needed, e.g. MEMORY.md or memory/notes.md.")
    if "\x00" in text:
        raise MemoryPathError("A path cannot contain NUL characters.")
    relative = PurePosixPath(text)
    if relative.is_absolute() or text.startswith("~") or re.match(r"^[A-Za-z]:", text):
        raise MemoryPathError(
            f"{path!r} is an absolute path; give one relative to the workspace, "
            "e.g. memory/notes.md."
        )
    if ".." in relative.parts:
        raise MemoryPathError(f"{path!r} leads out of the workspace ('..' is not allowed).")
    try:
        name_bytes = max((len(part.encode()) for part in relative.parts), default=0)
    except UnicodeEncodeError:  # a lone surrogate, from a model's JSON: no file can have it
        raise MemoryPathError(f"{path!r} is not valid Unicode.") from None
    # Longer names fail in the file system (with our temporary file's affixes) or the database.
    if len(text) > MAX_PATH_CHARS or name_bytes > MAX_NAME_BYTES:
        raise MemoryPathError(
            f"The path is too long: at most {MAX_PATH_CHARS} characters, and "
            f"{MAX_NAME_BYTES} bytes for each file or folder name."
        )
    if not is_memory_path(relative):
        raise MemoryPathError(
            f"{path!r} is not a memory file: use MEMORY.md or a .md file under memory/."
        )
    return relative.as_posix()


def max_file_bytes() -> int:
    return settings.NEOTASK["memory"]["file_max_bytes"]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def skip_reason_for(data: bytes) -> str:
    """Why these bytes cannot be a memory file's text; "" when they can."""
    if len(data) > max_file_bytes():
        return f"larger than {max_file_bytes()} bytes"
    if b"\x00" in data:
        return "binary (contains NUL bytes)"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not valid UTF-8 (at byte {exc.start})"
    return ""


def read_memory_bytes(workspace: Path, shown: str) -> bytes:
    with WorkspaceFS(workspace) as files:
        data, _ = files.read(shown, max_file_bytes())
    return data


def decode_memory_text(data: bytes, shown: str) -> str:
    reason = skip_reason_for(data)
    if reason:
        raise MemoryPathError(f"{shown} cannot be shown as text: {reason}.")
    return data.decode("utf-8").removeprefix("\ufeff")


def read_memory_file(workspace: Path, path: str) -> tuple[str, str]:
    """(text, sha256 of the bytes) of a memory file."""
    shown = memory_path(path)
    data = read_memory_bytes(workspace, shown)
    return decode_memory_text(data, shown), sha256_hex(data)


def memory_file_exists(workspace: Path, path: str) -> bool:
    """Whether anything (a file, a link, a folder) has the name; nothing is followed."""
    shown = memory_path(path)
    with WorkspaceFS(workspace) as files:
        try:
            return files.lstat(shown) is not None
        except MemoryPathError:  # a folder on the way is a link or a file: the name is taken
            return True


def write_memory_file(workspace: Path, path: str, text: str) -> str:
    """Replace the file's content atomically; returns the relative path."""
    shown = memory_path(path)
    data = text.encode("utf-8")
    if len(data) > max_file_bytes():
        raise MemoryPathError(
            f"{shown} would be {len(data)} bytes, more than the {max_file_bytes()} allowed."
        )
    check_room(workspace, shown, len(data))
    with WorkspaceFS(workspace) as files:
        files.write(shown, data)
    return shown


def append_memory_file(workspace: Path, path: str, text: str) -> str:
    shown = memory_path(path)
    try:
        existing = decode_memory_text(read_memory_bytes(workspace, shown), shown)
    except NotFound:
        existing = ""
    separator = "\n" if existing and not existing.endswith("\n") else ""
    return write_memory_file(workspace, shown, existing + separator + text)


def new_file_path(name: str) -> str:
    """What the user typed as a new file's name, as a memory path: "ideas" is memory/ideas.md."""
    name = name.strip().replace("\\", "/")
    # An absolute name ("/etc/passwd", "C:/x", "~/x") stays one, for memory_path to refuse.
    absolute = name.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", name)
    if name and name != MEMORY_FILE and not name.startswith(f"{MEMORY_DIR}/") and not absolute:
        name = f"{MEMORY_DIR}/{name}"
    if name and not name.lower().endswith(".md"):
        name += ".md"
    return name


class FileConflict(Exception):
    """The file changed since the editor opened it."""

    def __init__(self, current_text: str, current_sha256: str) -> None:
        super().__init__("The file changed since you opened it.")
        self.current_text = current_text
        self.current_sha256 = current_sha256


def save_if_unchanged(workspace: Path, path: str, text: str, opened_sha256: str) -> str:
    """Write `text` only if the file still has the content the editor started from
    (sha256 "" for a file that did not exist); otherwise raise FileConflict."""
    shown = memory_path(path)
    try:
        data: bytes | None = read_memory_bytes(workspace, shown)
    except NotFound:
        data = None
    current = sha256_hex(data) if data is not None else ""
    if current != opened_sha256:
        shown_text = data.decode("utf-8", errors="replace") if data is not None else ""
        raise FileConflict(shown_text, current)
    # Browsers send a textarea's line ends as CRLF.
    return write_memory_file(workspace, shown, text.replace("\r\n", "\n"))


def delete_memory_file(workspace: Path, path: str) -> str:
    shown = memory_path(path)
    with WorkspaceFS(workspace) as files:
        files.delete(shown)
    return shown
