"""Every path of a workspace the server opens, opened without following links.

A sandboxed command can change its workspace at any moment: replace a file or a
folder by a symlink to another user's workspace or the data dir between a check and
an open. So nothing here looks a path up by name twice, and nothing resolves one:
each path is opened component by component from a descriptor of the workspace
(`openat` with O_NOFOLLOW), a folder's descriptor is what the next step opens from,
and a write goes to a temporary file created and renamed relative to the folder's
descriptor. A symlink anywhere on the path is refused (`LinkRefused`); renaming a
folder after it was opened moves it within the workspace, where the descriptor still
points. Other file types (FIFOs, sockets, devices) are refused too: a FIFO would
block the server's read.

Used for the agents' workspaces and for an imported OpenClaw folder alike.
"""

from __future__ import annotations

import errno
import io
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import IO, BinaryIO

DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO the sandbox made must not wait for a writer.
READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# A walk stops here: a command can make folders faster than a page can list them.
MAX_DEPTH = 32
MAX_ENTRIES = 20_000
# Measuring the workspace's size sees every entry, but not deeper than this: each
# level holds a descriptor open. A deeper workspace cannot be measured (TooDeep).
MAX_USAGE_DEPTH = 256


class MemoryPathError(ValueError):
    """A path that is not a memory file of the workspace, or cannot be opened as asked;
    worded for whoever gave it (the agent, the browser)."""


class LinkRefused(MemoryPathError):
    """A symlink on the path: never followed."""


class TooDeep(MemoryPathError):
    """Folders nested past MAX_USAGE_DEPTH: the workspace's size cannot be known."""


class NotFound(MemoryPathError):
    pass


@dataclass(frozen=True)
class FileStat:
    """A file as lstat saw it (a link's own stat, for a link)."""

    path: str  # relative, with "/"
    size: int
    mtime_ns: int
    is_link: bool = False  # listed, never opened

    def matches(self, size: int, mtime_ns: int) -> bool:
        """Whether a stored size and mtime are this file's: then it is taken as unchanged."""
        return (size, mtime_ns) == (self.size, self.mtime_ns)


def parts_of(relative: str) -> tuple[str, ...]:
    parts = PurePosixPath(relative).parts
    if not parts or any(part in ("", ".", "..", "/") for part in parts):
        raise MemoryPathError(f"{relative!r} is not a path inside the workspace.")
    return parts


def link_message(shown: str, where: str) -> str:
    if where == shown:
        return f"{shown} is a symbolic link; links in a workspace are not followed."
    return f"{shown} is inside {where}/, a symbolic link; links in a workspace are not followed."


class WorkspaceFS:
    """A workspace (or any folder the server must not be led out of) held open by a
    descriptor. Use it as a context manager; a missing folder reads as empty."""

    def __init__(self, root: Path) -> None:
        self.root = root
        try:
            self.fd: int | None = os.open(root, DIRECTORY)
        except FileNotFoundError:
            self.fd = None  # nothing written yet: a GET creates nothing

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> WorkspaceFS:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # Folders ---------------------------------------------------------------------

    def open_folder(self, parts: tuple[str, ...], shown: str, create: bool = False) -> int:
        """A new descriptor of the folder `parts` (the root for ()); the caller closes it."""
        if self.fd is None:
            if not create:
                raise NotFound(f"{shown} does not exist.")
            self.root.mkdir(parents=True, exist_ok=True)  # the server's own folders
            self.fd = os.open(self.root, DIRECTORY)
        current = os.dup(self.fd)
        try:
            for depth, part in enumerate(parts, start=1):
                following = self.step(current, part, "/".join(parts[:depth]), shown, create)
                os.close(current)
                current = following
        except BaseException:
            os.close(current)
            raise
        return current

    def step(self, folder: int, name: str, where: str, shown: str, create: bool) -> int:
        for _ in range(2):  # one retry: a folder made or removed meanwhile
            try:
                return os.open(name, DIRECTORY, dir_fd=folder)
            except FileNotFoundError:
                if not create:
                    raise NotFound(f"{shown} does not exist.") from None
                with suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=folder)
            except OSError as exc:
                # O_NOFOLLOW with O_DIRECTORY fails on a link as on a file (ENOTDIR).
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise MemoryPathError(f"{shown} cannot be opened: {exc.strerror}.") from None
                found = self.entry_type(folder, name)
                if found == "link":
                    raise LinkRefused(link_message(shown, where)) from None
                if found != "folder":  # a folder again: swapped back meanwhile, try again
                    raise MemoryPathError(f"{shown}: {where} is not a folder.") from None
        raise MemoryPathError(f"{shown} keeps changing; try again.")

    @contextmanager
    def folder_of(self, relative: str, create: bool = False) -> Iterator[tuple[int, str]]:
        """(descriptor of the file's folder, the file's name)."""
        parts = parts_of(relative)
        folder = self.open_folder(parts[:-1], relative, create)
        try:
            yield folder, parts[-1]
        finally:
            os.close(folder)

    # Files -------------------------------------------------------------------------

    def lstat(self, relative: str) -> os.stat_result | None:
        """The entry's own stat (a link's, not its target's); None if it is not there."""
        try:
            with self.folder_of(relative) as (folder, name):
                return os.stat(name, dir_fd=folder, follow_symlinks=False)
        except (NotFound, FileNotFoundError):
            return None

    def is_file(self, relative: str) -> bool:
        """A regular file, reached without a link."""
        try:
            found = self.lstat(relative)
        except MemoryPathError:
            return False
        return found is not None and stat.S_ISREG(found.st_mode)

    def read(self, relative: str, limit: int) -> tuple[bytes, os.stat_result]:
        """The file's bytes and the stat of what was read; at most `limit` bytes."""
        with self.folder_of(relative) as (folder, name):
            try:
                descriptor = os.open(name, READ, dir_fd=folder)
            except FileNotFoundError:
                raise NotFound(f"{relative} does not exist.") from None
            except OSError as exc:
                if exc.errno == errno.ELOOP or self.entry_type(folder, name) == "link":
                    raise LinkRefused(link_message(relative, relative)) from None
                raise MemoryPathError(f"{relative} cannot be read: {exc.strerror}.") from None
        with os.fdopen(descriptor, "rb") as handle:
            info = os.fstat(descriptor)
            if not stat.S_ISREG(info.st_mode):
                raise MemoryPathError(f"{relative} is not a regular file.")
            if info.st_size > limit:
                raise MemoryPathError(
                    f"{relative} is {info.st_size} bytes, more than the {limit} allowed."
                )
            data = handle.read(limit + 1)  # it may grow while read
        if len(data) > limit:
            raise MemoryPathError(f"{relative} is more than the {limit} bytes allowed.")
        return data, info

    def write(self, relative: str, data: bytes) -> None:
        """Replace the file atomically (a reader sees the old or the new one, never half),
        making its folders; a link or folder in its place is refused, never written through."""
        with self.folder_of(relative, create=True) as (folder, name):
            existing = self.entry_type(folder, name)
            if existing == "link":
                raise LinkRefused(link_message(relative, relative))
            if existing in ("folder", "other"):
                raise MemoryPathError(f"{relative} exists and is not a regular file.")
            try:
                write_at(folder, name, data)
            except OSError as exc:  # a folder put in its place meanwhile, a full disk
                raise MemoryPathError(f"{relative} cannot be written: {exc.strerror}.") from None

    def delete(self, relative: str) -> None:
        with self.folder_of(relative) as (folder, name):
            existing = self.entry_type(folder, name)
            if existing is None:
                raise NotFound(f"{relative} does not exist.")
            if existing == "link":
                raise LinkRefused(link_message(relative, relative))
            if existing in ("folder", "other"):
                raise MemoryPathError(f"{relative} is not a regular file.")
            try:
                # unlinkat removes the name, never what a link there points to.
                os.unlink(name, dir_fd=folder)
            except FileNotFoundError:
                raise NotFound(f"{relative} does not exist.") from None
            except OSError as exc:
                raise MemoryPathError(f"{relative} cannot be deleted: {exc.strerror}.") from None

    @staticmethod
    def entry_type(folder: int, name: str) -> str | None:
        """What is there: "file", "folder", "link", "other" or None (nothing)."""
        try:
            mode = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return None
        except OSError:
            return "other"
        if stat.S_ISLNK(mode):
            return "link"
        if stat.S_ISDIR(mode):
            return "folder"
        return "file" if stat.S_ISREG(mode) else "other"

    # Listing -----------------------------------------------------------------------

    def walk(self, top: str, suffix: str) -> Iterator[FileStat]:
        """The files named `*<suffix>` under the folder `top`, links among them (listed,
        not followed); folders that are links are not entered, hidden names skipped."""
        try:
            folder = self.open_folder(parts_of(top), top)
        except MemoryPathError:
            return
        budget = [MAX_ENTRIES]
        try:
            yield from self.walk_from(folder, top, suffix.lower(), 0, budget)
        finally:
            os.close(folder)

    def walk_from(
        self, folder: int, relative: str, suffix: str, depth: int, budget: list[int]
    ) -> Iterator[FileStat]:
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
        except OSError:
            return
        for entry in entries:
            budget[0] -= 1
            if budget[0] < 0:
                return
            if entry.name.startswith("."):  # editors' and our own temporary files
                continue
            child = f"{relative}/{entry.name}"
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:  # removed meanwhile
                continue
            if stat.S_ISDIR(info.st_mode) and depth < MAX_DEPTH:
                try:
                    inner = os.open(entry.name, DIRECTORY, dir_fd=folder)
                except OSError:  # swapped for a link or removed meanwhile
                    continue
                try:
                    yield from self.walk_from(inner, child, suffix, depth + 1, budget)
                finally:
                    os.close(inner)
            elif entry.name.lower().endswith(suffix) and (
                stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)
            ):
                yield FileStat(child, info.st_size, info.st_mtime_ns, stat.S_ISLNK(info.st_mode))

    def usage(self) -> int:
        """Bytes on disk (as `du` counts them) of everything in the workspace, hidden
        files included; links count as themselves and are never followed."""
        if self.fd is None:
            return 0
        folder = os.dup(self.fd)
        try:
            return self.usage_from(folder, 0)
        finally:
            os.close(folder)

    def usage_from(self, folder: int, depth: int) -> int:
        if depth > MAX_USAGE_DEPTH:
            raise TooDeep(f"The workspace nests folders more than {MAX_USAGE_DEPTH} deep.")
        total = 0
        try:
            entries = list(os.scandir(folder))
        except OSError:  # removed meanwhile
            return 0
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += info.st_blocks * 512
            if stat.S_ISDIR(info.st_mode):
                try:
                    inner = os.open(entry.name, DIRECTORY, dir_fd=folder)
                except OSError:  # swapped for a link or removed meanwhile
                    continue
                try:
                    total += self.usage_from(inner, depth + 1)
                finally:
                    os.close(inner)
        return total

    def file_entry(self, relative: str) -> FileStat | None:
        """`relative` as `walk` would list it, or None if it is not a file or a link."""
        try:
            info = self.lstat(relative)
        except LinkRefused:
            return None  # a folder on the way is a link: not this workspace's file
        if info is None or not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
            return None
        return FileStat(relative, info.st_size, info.st_mtime_ns, stat.S_ISLNK(info.st_mode))


def write_at(folder: int, name: str, data: bytes) -> None:
    with atomic_file(folder, name) as handle:
        handle.write(data)


@contextmanager
def atomic_file(folder: int, name: str) -> Iterator[BinaryIO]:
    """Write `name` in the folder through a temporary file renamed over it, so that a
    reader or a crash sees the old file or the new one, never half of either. The
    rename replaces whatever the name is now (a link included) and never follows it."""
    # Owner-only, as mkstemp makes them: memory files and transcripts are private.
    temporary = f".{name}.{secrets.token_hex(4)}.tmp"
    descriptor = os.open(temporary, CREATE, 0o600, dir_fd=folder)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=folder)
        raise
    os.fsync(folder)  # the rename itself survives a crash


@contextmanager
def atomic_write(path: Path) -> Iterator[IO[str]]:
    """`atomic_file` for a path of the server's own (a transcript export): UTF-8 text."""
    folder = os.open(path.parent, DIRECTORY)
    try:
        with atomic_file(folder, path.name) as raw:
            text = io.TextIOWrapper(raw, encoding="utf-8")
            yield text
            text.flush()
            text.detach()  # atomic_file closes the file
    finally:
        os.close(folder)
