"""Which paths are memory files, and reading and writing them.

Paths given by the agent or the browser go through `resolve_memory_path`, which keeps
them inside the workspace (no "..", no absolute paths, no symlink leading out) and to
the memory files themselves. Writes are atomic (a temporary file, then `os.replace`).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO

from django.conf import settings

MEMORY_FILE = "MEMORY.md"
MEMORY_DIR = "memory"
MAX_PATH_CHARS = 512  # MemoryFile.path
MAX_NAME_BYTES = 200  # of the file system's 255, less the temporary file's affixes


class MemoryPathError(ValueError):
    """A path that is not a memory file of the workspace, worded for whoever gave it."""


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


def resolve_memory_path(workspace: Path, path: str) -> tuple[str, Path]:
    """(the normalised relative path, the absolute path) of a memory file in `workspace`."""
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
    root = workspace.resolve()
    full = root.joinpath(*relative.parts)
    # resolve() follows every symlink on the way, including in parent directories.
    if not full.resolve().is_relative_to(root):
        raise MemoryPathError(f"{path!r} is a symlink that points outside the workspace.")
    return relative.as_posix(), full


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


def read_memory_bytes(full: Path, shown: str) -> bytes:
    if not full.is_file():
        raise MemoryPathError(f"{shown} does not exist.")
    size = full.stat().st_size
    if size > max_file_bytes():
        raise MemoryPathError(f"{shown} is {size} bytes, more than the {max_file_bytes()} allowed.")
    return full.read_bytes()


def decode_memory_text(data: bytes, shown: str) -> str:
    reason = skip_reason_for(data)
    if reason:
        raise MemoryPathError(f"{shown} cannot be shown as text: {reason}.")
    return data.decode("utf-8").removeprefix("\ufeff")


def read_memory_file(workspace: Path, path: str) -> tuple[str, str]:
    """(text, sha256 of the bytes) of a memory file."""
    shown, full = resolve_memory_path(workspace, path)
    data = read_memory_bytes(full, shown)
    return decode_memory_text(data, shown), sha256_hex(data)


@contextmanager
def atomic_write(path: Path) -> Iterator[IO[str]]:
    """Write `path` (UTF-8 text) through a temporary file in the same directory, so
    that a reader or a crash sees the old file or the new one, never half of either."""
    # mkstemp's owner-only mode suits what is written here: memory files and
    # transcripts hold private conversations and notes.
    descriptor, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_memory_file(workspace: Path, path: str, text: str) -> str:
    """Replace the file's content atomically; returns the relative path."""
    shown, full = resolve_memory_path(workspace, path)
    data = text.encode("utf-8")
    if len(data) > max_file_bytes():
        raise MemoryPathError(
            f"{shown} would be {len(data)} bytes, more than the {max_file_bytes()} allowed."
        )
    full.parent.mkdir(parents=True, exist_ok=True)
    # A reader (the indexer, the page) sees the old or the new file, never half of one.
    with atomic_write(full) as handle:
        handle.write(text)
    return shown


def append_memory_file(workspace: Path, path: str, text: str) -> str:
    shown, full = resolve_memory_path(workspace, path)
    existing = decode_memory_text(read_memory_bytes(full, shown), shown) if full.exists() else ""
    separator = "\n" if existing and not existing.endswith("\n") else ""
    return write_memory_file(workspace, shown, existing + separator + text)


def new_file_path(name: str) -> str:
    """What the user typed as a new file's name, as a memory path: "ideas" is memory/ideas.md."""
    name = name.strip().replace("\\", "/")
    # An absolute name ("/etc/passwd", "C:/x", "~/x") stays one, for resolve_memory_path to refuse.
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
    shown, full = resolve_memory_path(workspace, path)
    data = read_memory_bytes(full, shown) if full.is_file() else None
    current = sha256_hex(data) if data is not None else ""
    if current != opened_sha256:
        shown_text = data.decode("utf-8", errors="replace") if data is not None else ""
        raise FileConflict(shown_text, current)
    # Browsers send a textarea's line ends as CRLF.
    return write_memory_file(workspace, shown, text.replace("\r\n", "\n"))


def delete_memory_file(workspace: Path, path: str) -> str:
    shown, full = resolve_memory_path(workspace, path)
    if not full.is_file():
        raise MemoryPathError(f"{shown} does not exist.")
    full.unlink()
    return shown
