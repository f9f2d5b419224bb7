"""What both of your data's archives share: members listed in a manifest by their
sha256 and size, counted as they are read (the sizes a zip or tar declares can
lie), and read whole only up to a limit.

Each archive keeps its own container and layout, on disk as it always was: the
instance backup a tar (importers.backup.manifest), the per-user export a zip
(importers.archive.layout). Each words its own errors: the helpers here say what
is wrong, the callers say it to their reader.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path
from typing import IO, Any, TypeGuard

from core.progress import Progress, no_progress

CHUNK = 1024 * 1024
# A member as a manifest lists it: {"sha256": hex digest, "size": bytes}.
Entry = dict[str, Any]


def neotask_version() -> str:
    """The version of the Neotask writing the archive, as its manifest records it."""
    try:
        return metadata.version("neotask")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def chunks_of(source: IO[bytes]) -> Iterator[bytes]:
    while chunk := source.read(CHUNK):
        yield chunk


def digest(
    chunks: Iterable[bytes],
    into: IO[bytes] | None = None,
    progress: Progress = no_progress,
    stop_above: int | None = None,
) -> Entry:
    """The entry of the bytes in `chunks`, copied `into` a file if given. With
    `stop_above`, reading stops once there are more bytes than that (the size then
    says only that it is larger)."""
    sha256 = hashlib.sha256()
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if stop_above is not None and size > stop_above:
            break
        sha256.update(chunk)
        if into is not None:
            into.write(chunk)
        progress(len(chunk))
    return {"sha256": sha256.hexdigest(), "size": size}


def file_entry(path: Path) -> Entry:
    with path.open("rb") as handle:
        return digest(chunks_of(handle))


def matches(found: Entry, listed: Any) -> bool:
    """Whether the bytes read are the ones the manifest lists."""
    return isinstance(listed, dict) and (found["sha256"], found["size"]) == (
        listed.get("sha256"),
        listed.get("size"),
    )


def is_entry(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("sha256"), str)
        and isinstance(value.get("size"), int)
    )


def is_entry_map(value: Any) -> TypeGuard[dict[str, Entry]]:
    """A manifest's "members": name → entry."""
    return isinstance(value, dict) and all(is_entry(entry) for entry in value.values())


def read_at_most(chunks: Iterable[bytes], limit: int) -> bytes | None:
    """The bytes, or None once they are more than `limit` (nothing more is read)."""
    data = bytearray()
    for chunk in chunks:
        data += chunk
        if len(data) > limit:
            return None
    return bytes(data)


def load_json(raw: bytes) -> Any:
    """The manifest's JSON; ValueError if it is not JSON (or nested beyond reading)."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def differences(listed: Iterable[str], present: Iterable[str]) -> tuple[list[str], list[str]]:
    """(listed but missing, present but not listed), each sorted."""
    listed, present = set(listed), set(present)
    return sorted(listed - present), sorted(present - listed)
