"""Opening an export archive and checking it whole before anything is imported:
its members (names, kinds, count, sizes, what they unpack to), its manifest
(format, version, the member list) and every member's sha256. Reading a
member's records afterwards checks each line as it goes."""

from __future__ import annotations

import hashlib
import stat
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from importers import uploads
from importers.archive import layout
from importers.manifests import (
    chunks_of,
    differences,
    digest,
    is_entry_map,
    load_json,
    matches,
    read_at_most,
)
from importers.report import ImportRefused


def refused(message: str) -> ImportRefused:
    return ImportRefused(f"The archive is refused: {message}")


def member_problem(info: zipfile.ZipInfo) -> str | None:
    """Why this member must not be read, if it must not."""
    if problem := uploads.entry_problem(info):
        return problem
    # Only the permission bits, for members a zip tool wrote without a file type.
    kind = stat.S_IFMT(info.external_attr >> 16)
    if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
        return "a device file, FIFO or other special file"
    if info.file_size > layout.MAX_MEMBER_BYTES:
        return f"larger than {uploads.megabytes(layout.MAX_MEMBER_BYTES)}"
    return None


class Archive:
    """A zip in the export layout, checked by `check` before any record is read."""

    def __init__(self, source: Path | IO[bytes], size: int | None = None) -> None:
        """`source`: the archive's path, or an open file of `size` bytes (an upload)."""
        self.size = source.stat().st_size if isinstance(source, Path) else size or 0
        try:
            self.zip = zipfile.ZipFile(source)
        except (zipfile.BadZipFile, OSError, ValueError):
            raise ImportRefused(
                "The file is not a Neotask export: not a zip archive, or a truncated one."
            ) from None
        self.manifest: dict[str, Any] = {}
        # The sha256 of manifest.json: it lists every member's sha256, so it names
        # the archive's content (ImportedArchive).
        self.digest = ""

    def __enter__(self) -> Archive:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.zip.close()

    @property
    def members(self) -> list[str]:
        """The data members (the manifest's list, checked against the zip)."""
        return list(self.manifest["members"])

    def check(self) -> None:
        """ImportRefused unless the archive is whole, safe and of a version this reads."""
        entries = self.zip.infolist()
        if len(entries) > layout.MAX_MEMBERS + 1:
            raise refused(f"it holds {len(entries):,} members; at most {layout.MAX_MEMBERS:,}.")
        self.check_first(entries)
        names = set()
        for info in entries:
            if problem := member_problem(info):
                raise refused(f"{info.filename!r} is {problem}.")
            if info.filename in names:
                raise refused(f"{info.filename!r} is in it twice.")
            names.add(info.filename)
        unpacked = sum(info.file_size for info in entries)
        if unpacked > uploads.unpack_limit(self.size):
            raise uploads.too_large(unpacked, self.size)
        self.read_manifest()
        listed = self.members
        present = names - {layout.MANIFEST} - {n for n in names if n.endswith("/")}
        missing, extra = differences(listed, present)
        if missing:
            raise refused(f"members listed in the manifest are missing: {', '.join(missing[:5])}.")
        if extra:
            raise refused(f"members not in the manifest: {', '.join(extra[:5])}.")
        for name in self.members:
            self.check_member(name)

    @staticmethod
    def check_first(entries: list[zipfile.ZipInfo]) -> None:
        if not entries or entries[0].filename != layout.MANIFEST:
            raise refused(f"its first member is not {layout.MANIFEST}: not a Neotask export.")

    def read_manifest(self) -> None:
        raw = self.read(layout.MANIFEST, layout.MAX_MANIFEST_BYTES)
        self.digest = hashlib.sha256(raw).hexdigest()
        try:
            manifest = load_json(raw)
        except ValueError:
            raise refused(f"{layout.MANIFEST} is not valid JSON.") from None
        if not isinstance(manifest, dict) or manifest.get("format") != layout.FORMAT:
            raise refused(f"{layout.MANIFEST} does not name the format {layout.FORMAT!r}.")
        version = manifest.get("version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise refused(f"{layout.MANIFEST} has no version number.")
        if version != layout.VERSION:
            newer = "a newer" if version > layout.VERSION else "an older"
            raise refused(
                f"it is version {version} of the format, made by {newer} Neotask; "
                f"this one reads version {layout.VERSION}."
            )
        members = manifest.get("members")
        if not is_entry_map(members):
            raise refused(f"{layout.MANIFEST} lists no members with their size and sha256.")
        self.manifest = manifest

    def check_member(self, name: str) -> None:
        """The member's bytes, streamed: its size and sha256 as the manifest says.
        Counted as read, since the sizes a zip declares can lie."""
        expected = self.manifest["members"][name]
        found = digest(self.chunks(name), stop_above=expected["size"])
        if not matches(found, expected):
            raise refused(
                f"{name} does not match its checksum in the manifest (damaged or edited)."
            )

    def chunks(self, name: str) -> Iterator[bytes]:
        try:
            with self.zip.open(name) as source:
                yield from chunks_of(source)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
            raise refused(f"{name} cannot be read ({exc}).") from None

    def read(self, name: str, limit: int) -> bytes:
        data = read_at_most(self.chunks(name), limit)
        if data is None:
            raise refused(f"{name} is larger than {uploads.megabytes(limit)}.")
        return data

    def json(self, name: str) -> Any:
        try:
            return load_json(self.read(name, layout.MAX_MEMBER_BYTES))
        except ValueError:
            raise refused(f"{name} is not valid JSON.") from None

    def lines(self, name: str) -> Iterator[tuple[int, dict[str, Any]]]:
        """(line number, object) of a JSONL member; a bad line refuses the archive."""
        try:
            with self.zip.open(name) as source:
                number = 0
                while line := source.readline(layout.MAX_LINE_BYTES + 1):
                    number += 1
                    if len(line) > layout.MAX_LINE_BYTES:
                        raise refused(f"{name} line {number} is longer than the limit.")
                    if not line.strip():
                        continue
                    try:
                        record = load_json(line)
                    except ValueError:
                        raise refused(f"{name} line {number} is not valid JSON.") from None
                    if not isinstance(record, dict):
                        raise refused(f"{name} line {number} is not a JSON object.")
                    yield number, record
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
            raise refused(f"{name} cannot be read ({exc}).") from None


def member_count(path: Path) -> int:
    """The data members an archive says it holds (a progress's end); 0 if it cannot say."""
    try:
        with Archive(path) as archive:
            archive.read_manifest()
            return len(archive.members)
    except ImportRefused:
        return 0


def manifest_digest(path: Path) -> str | None:
    """The archive's digest (Archive.digest); None if it has no manifest to read."""
    try:
        with Archive(path) as archive:
            archive.read_manifest()
            return archive.digest
    except ImportRefused:
        return None


def check_upload(file: IO[bytes], size: int) -> None:
    """What can be checked of an upload without reading it whole: a zip whose first
    member is a manifest of a version this Neotask reads. The job checks the rest."""
    with Archive(file, size) as archive:
        archive.check_first(archive.zip.infolist())
        archive.read_manifest()
