"""Uploaded import files: their size limits, and unpacking an OpenClaw zip safely."""

from __future__ import annotations

import shutil
import stat
import zipfile
from pathlib import Path, PurePosixPath
from typing import IO

from importers.report import ImportRefused

# An upload larger than this is refused before it is read. Bigger databases
# import from the shell: `python manage.py import_aidaemon`.
MAX_UPLOAD_BYTES = 200 * 1024 * 1024
# What a zip may unpack to, and how many entries it may hold: a zip bomb
# stops at the limit instead of filling the disk.
MAX_UNPACKED_BYTES = 2 * 1024 * 1024 * 1024
MAX_ENTRIES = 100_000
# Nor more than this many times its own size (transcripts compress 5 to 20 times,
# deflate at most about 1,000), beyond a first SMALL_UNPACKED_BYTES: a small upload
# does not become a large import.
MAX_EXPANSION = 100
SMALL_UNPACKED_BYTES = 16 * 1024 * 1024
CHUNK = 1024 * 1024
SQLITE_HEADER = b"SQLite format 3\x00"


def megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):,.0f} MB"


def check_size(size: int) -> None:
    if size > MAX_UPLOAD_BYTES:
        raise ImportRefused(
            f"The file is {megabytes(size)}; uploads are limited to {megabytes(MAX_UPLOAD_BYTES)}. "
            "Import a bigger file from the shell (python manage.py import_aidaemon / "
            "import_openclaw)."
        )


def entry_problem(info: zipfile.ZipInfo) -> str | None:
    """Why this entry must not be unpacked, if it must not."""
    name = info.filename
    parts = PurePosixPath(name).parts
    if name.startswith(("/", "\\")) or (parts and ":" in parts[0]):
        return "an absolute path"
    if "\\" in name or "\x00" in name:
        return "a path with backslashes or NUL characters"
    if ".." in parts:
        return "a path leading out of the folder (..)"
    if stat.S_ISLNK(info.external_attr >> 16):
        return "a symbolic link"
    return None


def unpack_limit(zip_size: int) -> int:
    """What a zip of `zip_size` bytes may unpack to."""
    return min(MAX_UNPACKED_BYTES, max(SMALL_UNPACKED_BYTES, MAX_EXPANSION * zip_size))


def too_large(unpacked: int, zip_size: int, more: str = "") -> ImportRefused:
    """The refusal of a zip that unpacks to `unpacked` bytes (`more`: "more than ")."""
    limit = unpack_limit(zip_size)
    if limit == MAX_UNPACKED_BYTES:
        return ImportRefused(
            f"The zip unpacks to {more}{megabytes(unpacked)}; at most {megabytes(limit)}."
        )
    return ImportRefused(
        f"The zip unpacks to {more}{megabytes(unpacked)}, more than {MAX_EXPANSION} times its "
        f"size ({zip_size / 1024:,.0f} KB): at most {megabytes(limit)} is unpacked from it."
    )


def check_zip(archive: zipfile.ZipFile, zip_size: int) -> None:
    """Refuse the whole zip (of `zip_size` bytes) if any entry is unsafe or it
    unpacks too large."""
    entries = archive.infolist()
    if len(entries) > MAX_ENTRIES:
        raise ImportRefused(f"The zip holds {len(entries):,} entries; at most {MAX_ENTRIES:,}.")
    for info in entries:
        if problem := entry_problem(info):
            raise ImportRefused(f"The zip is refused: {info.filename!r} is {problem}.")
    unpacked = sum(info.file_size for info in entries)
    if unpacked > unpack_limit(zip_size):
        raise too_large(unpacked, zip_size)


def open_zip(file: Path | IO[bytes]) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(file)
    except (zipfile.BadZipFile, OSError):
        raise ImportRefused("The file is not a zip archive.") from None


def unpack_zip(path: Path, target: Path) -> Path:
    """Unpack the zip at `path` into `target`; the folder to import: the
    zip's single top folder if it has one, else `target`."""
    zip_size = path.stat().st_size
    limit = unpack_limit(zip_size)
    with open_zip(path) as archive:
        check_zip(archive, zip_size)
        written = 0
        root = target.resolve()
        for info in archive.infolist():
            destination = (target / info.filename).resolve()
            if not destination.is_relative_to(root):
                raise ImportRefused(f"The zip is refused: {info.filename!r} leads out of it.")
            if info.is_dir():
                destination.mkdir(parents=True, exist_ok=True)
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as source, destination.open("wb") as out:
                # Counted as written: the sizes a zip declares can lie.
                while chunk := source.read(CHUNK):
                    written += len(chunk)
                    if written > limit:
                        raise too_large(written, zip_size, "more than ")
                    out.write(chunk)
    children = list(target.iterdir())
    if len(children) == 1 and children[0].is_dir():
        return children[0]
    return target


def looks_like_sqlite(head: bytes) -> bool:
    return head.startswith(SQLITE_HEADER)


def remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
