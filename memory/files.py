"""Memory files: each agent's MEMORY.md and memory/**/*.md, chunked, embedded and searchable.

Paths given by the agent or the browser go through `resolve_memory_path`, which keeps
them inside the workspace (no "..", no absolute paths, no symlink leading out) and to
the memory files themselves. Writes are atomic (a temporary file, then `os.replace`).

Indexing is incremental at three levels, so an edit never causes a re-index storm:
a stat per file (size, mtime_ns) finds the files that may have changed; their sha256
tells whether the content did; and a changed file's chunks are embedded only when no
chunk of the same owner and agent already has a vector for the same content hash.

Chunks are whole lines packed up to `file_chunk_chars` characters; the next chunk
repeats up to `file_chunk_overlap_chars` characters of the previous one's last lines.
Every heading starts a new chunk, and each chunk records the path of headings above it
("Trips > Japan"), which is embedded with the text.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from memory.embeddings import embed_texts
from memory.models import MemoryChunk, MemoryFile
from memory.vector_sync import StampWindow
from memory.vectors import EMBEDDING_DIM, VectorError, pack, unpack
from memory.workspace import DEFAULT_AGENT, check_agent_name, is_agent_name, workspace_dir

log = logging.getLogger(__name__)

MEMORY_FILE = "MEMORY.md"
MEMORY_DIR = "memory"
EMBED_BATCH = 256  # texts per embed_texts call: progress is stored batch by batch
MAX_CACHED_INDEXES = 64
MAX_PATH_CHARS = 512  # MemoryFile.path
MAX_NAME_BYTES = 200  # of the file system's 255, less the temporary file's affixes
HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
FENCE = re.compile(r"^[ \t]*(```|~~~)")


class MemoryPathError(ValueError):
    """A path that is not a memory file of the workspace, worded for whoever gave it."""


# Paths and file access


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
    descriptor, temporary = tempfile.mkstemp(
        dir=full.parent, prefix=f".{full.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, full)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
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


# Discovery


@dataclass(frozen=True)
class FileStat:
    path: str
    size: int
    mtime_ns: int
    outside: bool = False  # a symlink leading out of the workspace: listed, never read


def stat_entry(root: Path, relative: str, full: Path | os.DirEntry) -> FileStat | None:
    # A DirEntry from scandir knows whether it is a symlink without another system call.
    try:
        info = full.stat()
    except OSError:  # a dangling symlink, or removed meanwhile
        return None
    outside = full.is_symlink() and not Path(full).resolve().is_relative_to(root)
    return FileStat(relative, info.st_size, info.st_mtime_ns, outside)


def scan_workspace(workspace: Path) -> dict[str, FileStat]:
    """Every memory file with its size and mtime: one stat each, no reading."""
    root = workspace.resolve()
    found: dict[str, FileStat] = {}
    if (root / MEMORY_FILE).is_file():
        top = stat_entry(root, MEMORY_FILE, root / MEMORY_FILE)
        if top is not None:
            found[MEMORY_FILE] = top
    # walk_markdown follows no symlinked folder, but memory/ itself may be one: if it
    # leads out of the workspace, the files behind it are not the agent's to index.
    if not (root / MEMORY_DIR).resolve().is_relative_to(root):
        return found
    for relative, entry in walk_markdown(root / MEMORY_DIR, MEMORY_DIR):
        stat = stat_entry(root, relative, entry)
        if stat is not None:
            found[relative] = stat
    return found


def walk_markdown(directory: Path, relative: str) -> Iterator[tuple[str, os.DirEntry]]:
    # Symlinked directories are not followed: no loops, no trees outside.
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        if entry.name.startswith("."):  # editors' and our own temporary files
            continue
        child = f"{relative}/{entry.name}"
        if entry.is_dir(follow_symlinks=False):
            yield from walk_markdown(Path(entry.path), child)
        elif entry.name.lower().endswith(".md") and entry.is_file():
            yield child, entry


# Chunking


@dataclass(frozen=True)
class Chunk:
    start_line: int
    end_line: int
    heading: str
    text: str

    @property
    def embedded_text(self) -> str:
        return f"{self.heading}\n{self.text}" if self.heading else self.text

    @property
    def content_hash(self) -> str:
        return sha256_hex(self.embedded_text.encode("utf-8"))


@dataclass(frozen=True)
class Line:
    number: int
    text: str


def split_sections(text: str) -> list[tuple[str, list[Line]]]:
    """(heading path, lines) per section; a heading line opens its own section."""
    sections: list[tuple[str, list[Line]]] = [("", [])]
    path: list[tuple[int, str]] = []
    in_fence = False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            in_fence = not in_fence
        heading = None if in_fence else HEADING.match(line)
        if heading:
            level = len(heading.group(1))
            path = [(lvl, title) for lvl, title in path if lvl < level]
            path.append((level, heading.group(2)))
            sections.append((" > ".join(title for _, title in path), []))
        sections[-1][1].append(Line(number, line))
    return [(heading, lines) for heading, lines in sections if lines]


def split_long_lines(lines: list[Line], size: int) -> list[Line]:
    pieces = []
    for line in lines:
        if len(line.text) <= size:
            pieces.append(line)
        else:
            pieces.extend(
                Line(line.number, line.text[i : i + size]) for i in range(0, len(line.text), size)
            )
    return pieces


def overlap_tail(lines: list[Line], overlap: int) -> list[Line]:
    tail: list[Line] = []
    length = 0
    for line in reversed(lines):
        length += len(line.text) + 1
        if length > overlap:
            break
        tail.insert(0, line)
    return tail


def pack_lines(lines: list[Line], size: int, overlap: int) -> list[list[Line]]:
    groups: list[list[Line]] = []
    current: list[Line] = []
    length = 0
    for line in lines:
        cost = len(line.text) + 1
        if current and length + cost > size:
            groups.append(current)
            current = overlap_tail(current, overlap)
            length = sum(len(kept.text) + 1 for kept in current)
            if length + cost > size:
                current, length = [], 0
        current.append(line)
        length += cost
    if current:
        groups.append(current)
    return groups


def chunk_markdown(text: str, size: int, overlap: int) -> list[Chunk]:
    """Chunks of at most `size` characters of whole lines (longer lines are cut), the
    next repeating at most `overlap` characters of lines; blank chunks are dropped."""
    overlap = min(overlap, size // 2)  # so that every chunk brings new lines
    chunks = []
    for heading, lines in split_sections(text):
        for group in pack_lines(split_long_lines(lines, size), size, overlap):
            body = "\n".join(line.text for line in group)
            if body.strip():
                chunks.append(Chunk(group[0].number, group[-1].number, heading, body))
    return chunks


def chunk_settings() -> tuple[int, int]:
    memory = settings.NEOTASK["memory"]
    return memory["file_chunk_chars"], memory["file_chunk_overlap_chars"]


# Indexing


@dataclass
class IndexStats:
    files_seen: int = 0
    files_changed: int = 0  # read again because their size or mtime changed
    files_skipped: int = 0  # of those, not indexed (binary, too large, not UTF-8, outside)
    files_deleted: int = 0
    chunks_embedded: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def skip_reason_for(data: bytes) -> str:
    if len(data) > max_file_bytes():
        return f"larger than {max_file_bytes()} bytes"
    if b"\x00" in data:
        return "binary (contains NUL bytes)"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not valid UTF-8 (at byte {exc.start})"
    return ""


def index_workspace(owner: Any, agent: str = DEFAULT_AGENT) -> IndexStats:
    """Bring the owner's chunks of `agent` in line with the workspace; cheap when nothing
    changed (a stat per file and one query)."""
    check_agent_name(agent)
    workspace = workspace_dir(owner.pk, agent)
    found = scan_workspace(workspace)
    known = {
        path: (file_id, size, mtime_ns)
        for file_id, path, size, mtime_ns in MemoryFile.objects.filter(
            owner_id=owner.pk, agent=agent
        ).values_list("id", "path", "size", "mtime_ns")
    }
    stats = IndexStats(files_seen=len(found))
    gone = [file_id for path, (file_id, _, _) in known.items() if path not in found]
    if gone:
        MemoryFile.objects.filter(pk__in=gone).delete()
        stats.files_deleted = len(gone)
    for path, entry in found.items():
        if known.get(path, (None,))[1:] == (entry.size, entry.mtime_ns):
            continue
        stats.files_changed += 1
        if index_file(owner.pk, agent, workspace, entry):
            stats.files_skipped += 1
    stats.chunks_embedded = embed_missing_chunks(owner.pk, agent)
    return stats


def index_path(owner: Any, agent: str, path: str) -> IndexStats:
    """Index one file now (after a tool or the page wrote or deleted it)."""
    workspace = workspace_dir(owner.pk, agent)
    shown, full = resolve_memory_path(workspace, path)
    entry = stat_entry(workspace.resolve(), shown, full) if full.is_file() else None
    stats = IndexStats(files_seen=int(entry is not None))
    if entry is None:
        _, deleted = MemoryFile.objects.filter(owner_id=owner.pk, agent=agent, path=shown).delete()
        stats.files_deleted = deleted.get(MemoryFile._meta.label, 0)
    else:
        stats.files_changed = 1
        stats.files_skipped = int(bool(index_file(owner.pk, agent, workspace, entry)))
    stats.chunks_embedded = embed_missing_chunks(owner.pk, agent)
    return stats


def index_file(owner_id: int, agent: str, workspace: Path, entry: FileStat) -> str:
    """Store the file's state and its chunks (vectors come later); returns its skip reason."""
    full = workspace.resolve() / entry.path
    data, digest = b"", ""
    if entry.outside:
        reason = "a symlink pointing outside the workspace"
    elif entry.size > max_file_bytes():
        reason = f"larger than {max_file_bytes()} bytes"
    else:
        try:
            data = full.read_bytes()
        except OSError as exc:
            log.warning("cannot read memory file %s: %s", full, exc)
            return f"cannot be read ({exc.strerror})"
        reason, digest = skip_reason_for(data), sha256_hex(data)
    try:
        with transaction.atomic():
            row, _ = MemoryFile.objects.get_or_create(
                owner_id=owner_id, agent=agent, path=entry.path
            )
            # Two indexers of one workspace take turns per file.
            row = MemoryFile.objects.select_for_update().get(pk=row.pk)
            content_changed = (row.sha256, row.skip_reason) != (
                digest,
                reason,
            ) or row.indexed_at is None
            row.size, row.mtime_ns = entry.size, entry.mtime_ns
            row.sha256, row.skip_reason, row.indexed_at = digest, reason, timezone.now()
            row.save()
            if content_changed:
                text = "" if reason else data.decode("utf-8").removeprefix("\ufeff")
                replace_chunks(row, chunk_markdown(text, *chunk_settings()))
    except IntegrityError:
        log.info("memory file %s was indexed concurrently", entry.path)
    return reason


def replace_chunks(file: MemoryFile, chunks: list[Chunk]) -> None:
    """Make the file's chunk rows equal `chunks`. A row whose position and content are
    unchanged is kept; a new row takes the vector of any chunk with the same content."""
    existing = {row.position: row for row in file.chunks.all().defer("embedding", "text")}
    stale = []
    fresh: list[tuple[int, Chunk]] = []
    for position, chunk in enumerate(chunks):
        row = existing.pop(position, None)
        if row is not None and row.content_hash == chunk.content_hash:
            if (row.start_line, row.end_line) != (chunk.start_line, chunk.end_line):
                MemoryChunk.objects.filter(pk=row.pk).update(
                    start_line=chunk.start_line, end_line=chunk.end_line
                )
            continue
        if row is not None:
            stale.append(row.pk)
        fresh.append((position, chunk))
    stale.extend(row.pk for row in existing.values())
    vectors = known_vectors(file.owner_id, file.agent, {c.content_hash for _, c in fresh})
    MemoryChunk.objects.filter(pk__in=stale).delete()
    now = timezone.now()
    MemoryChunk.objects.bulk_create(
        MemoryChunk(
            owner_id=file.owner_id,
            file=file,
            agent=file.agent,
            position=position,
            start_line=chunk.start_line,
            end_line=chunk.end_line,
            heading=chunk.heading,
            text=chunk.text,
            content_hash=chunk.content_hash,
            embedding=vectors.get(chunk.content_hash),
            embedded_at=now if chunk.content_hash in vectors else None,
        )
        for position, chunk in fresh
    )


def known_vectors(owner_id: int, agent: str, hashes: set[str]) -> dict[str, bytes]:
    if not hashes:
        return {}
    rows = MemoryChunk.objects.filter(
        owner_id=owner_id, agent=agent, content_hash__in=hashes, embedding__isnull=False
    ).values_list("content_hash", "embedding")
    return {digest: bytes(blob) for digest, blob in rows}


def embed_missing_chunks(owner_id: int, agent: str) -> int:
    """Embed the chunks without a vector, each distinct content once; returns how many
    chunks got one. A failure is recorded on the chunks and retried on the next run."""
    pending = MemoryChunk.objects.filter(owner_id=owner_id, agent=agent, embedding__isnull=True)
    done = 0
    after = 0
    while True:
        rows = list(
            pending.filter(id__gt=after)
            .order_by("id")
            .only("id", "heading", "text", "content_hash")[:EMBED_BATCH]
        )
        if not rows:
            return done
        after = rows[-1].pk
        texts: dict[str, str] = {}
        for row in rows:
            texts.setdefault(row.content_hash, Chunk(0, 0, row.heading, row.text).embedded_text)
        try:
            vectors = embed_texts(list(texts.values()))
        except Exception as exc:
            log.exception("embedding %d memory file chunks failed", len(texts))
            pending.filter(pk__in=[row.pk for row in rows]).update(
                embedding_error=f"{type(exc).__name__}: {exc}"[:2000]
            )
            return done
        packed = {digest: pack(vector) for digest, vector in zip(texts, vectors, strict=True)}
        now = timezone.now()
        for row in rows:
            row.embedding, row.embedded_at, row.embedding_error = (
                packed[row.content_hash],
                now,
                None,
            )
        MemoryChunk.objects.bulk_update(rows, ["embedding", "embedded_at", "embedding_error"])
        done += len(rows)


def index_all_workspaces() -> int:
    """The watcher job: re-index every workspace that has (or had) memory files."""
    from django.contrib.auth import get_user_model

    pairs = set(MemoryFile.objects.values_list("owner_id", "agent").distinct())
    pairs |= set(workspaces_with_files())
    users = get_user_model().objects.in_bulk({owner_id for owner_id, _ in pairs})
    indexed = 0
    for owner_id, agent in sorted(pairs):
        if owner_id not in users:
            continue
        try:
            index_workspace(users[owner_id], agent)
            indexed += 1
        except Exception:
            log.exception("indexing the workspace of user %s, agent %s failed", owner_id, agent)
    return indexed


def workspaces_with_files() -> Iterator[tuple[int, str]]:
    root = Path(settings.DATA_DIR) / "workspaces"
    if not root.is_dir():
        return
    for owner in root.iterdir():
        if not owner.name.isdigit() or not owner.is_dir():
            continue
        for agent in owner.iterdir():
            if is_agent_name(agent.name) and (
                (agent / MEMORY_FILE).is_file() or (agent / MEMORY_DIR).is_dir()
            ):
                yield int(owner.name), agent.name


# Search


@dataclass
class FileHit:
    path: str
    start_line: int
    end_line: int
    heading: str
    text: str
    score: float  # cosine similarity to the query
    kind: str = field(default="file", init=False)

    @property
    def source(self) -> str:
        return f"{self.path}:{self.start_line}-{self.end_line}"


class ChunkIndex:
    """One owner-and-agent's chunk vectors in process memory, like `NumpyIndex` for
    events: loaded once, then synced through a `StampWindow`. Chunks also disappear
    (files edited or deleted); a count tells when, and only then are the ids compared."""

    def __init__(self, owner_id: int, agent: str) -> None:
        self.owner_id = owner_id
        self.agent = agent
        self.lock = threading.Lock()
        self.ids = np.empty(0, dtype=np.int64)
        self.matrix = np.empty((0, EMBEDDING_DIM), dtype=np.float32)
        self.position: dict[int, int] = {}
        self.window = StampWindow()

    def rows(self) -> Any:
        return MemoryChunk.objects.filter(
            owner_id=self.owner_id, agent=self.agent, embedded_at__isnull=False
        )

    def sync(self) -> None:
        added = {}
        for batch in self.window.unread(self.rows()):
            for chunk_id, blob, embedded_at in batch.values_list(
                "id", "embedding", "embedded_at"
            ).iterator(2000):
                self.window.read(chunk_id, embedded_at)
                added[chunk_id] = blob
        self.add(added)
        if self.rows().count() != len(self.position):
            self.reconcile()

    def reconcile(self) -> None:
        present = set(self.rows().values_list("id", flat=True))
        keep = [i for i, chunk_id in enumerate(self.ids) if int(chunk_id) in present]
        self.ids, self.matrix = self.ids[keep], self.matrix[keep]
        self.position = {int(chunk_id): i for i, chunk_id in enumerate(self.ids)}
        missing = present - self.position.keys()
        if missing:  # committed more than `vector_sync.SETTLE` after its stamp
            self.add(dict(self.rows().filter(pk__in=missing).values_list("id", "embedding")))

    def add(self, blobs: dict[int, Any]) -> None:
        vectors = {}
        for chunk_id, blob in blobs.items():
            try:
                vectors[chunk_id] = unpack(blob)
            except (VectorError, TypeError):
                log.warning("memory chunk %s has a corrupt vector; it is embedded again", chunk_id)
                MemoryChunk.objects.filter(pk=chunk_id).update(embedding=None, embedded_at=None)
        updates = [i for i in vectors if i in self.position]
        for chunk_id in updates:
            self.matrix[self.position[chunk_id]] = vectors.pop(chunk_id)
        if vectors:
            start = len(self.ids)
            self.ids = np.concatenate([self.ids, np.fromiter(vectors, dtype=np.int64)])
            self.matrix = np.concatenate([self.matrix, np.stack(list(vectors.values()))])
            self.position.update({chunk_id: start + i for i, chunk_id in enumerate(vectors)})

    def search(
        self, vector: np.ndarray, k: int, min_score: float = -1.0
    ) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) of the k nearest, best first."""
        with self.lock:
            self.sync()
            if k <= 0 or len(self.ids) == 0:
                return []
            scores = self.matrix @ np.asarray(vector, dtype=np.float32)
            k = min(k, len(self.ids))
            top = np.argpartition(-scores, k - 1)[:k]
            top = top[np.argsort(-scores[top])]
            return [(int(self.ids[i]), float(scores[i])) for i in top if scores[i] > min_score]


_indexes: OrderedDict[tuple[int, str, str], Any] = OrderedDict()
_indexes_lock = threading.Lock()


def chunk_index_for(owner_id: int, agent: str = DEFAULT_AGENT) -> Any:
    """The chunk index of the configured backend: in process (numpy) or LanceDB."""
    backend = settings.NEOTASK["memory"]["vector_backend"]
    key = (owner_id, agent, backend)
    with _indexes_lock:
        index = _indexes.get(key)
        if index is None:
            if backend == "lancedb":
                from memory.lancedb_index import LanceChunkIndex

                index = _indexes[key] = LanceChunkIndex(owner_id, agent)
            else:
                index = _indexes[key] = ChunkIndex(owner_id, agent)
            while len(_indexes) > MAX_CACHED_INDEXES:
                _indexes.popitem(last=False)
        _indexes.move_to_end(key)
    return index


def forget_chunk_indexes() -> None:
    with _indexes_lock:
        _indexes.clear()


def search_files(
    owner: Any, agent: str, query_vector: np.ndarray, k: int, min_score: float = -1.0
) -> list[FileHit]:
    """The `k` chunks of the owner's memory files most similar to the query, best first;
    the workspace is checked for changes first."""
    try:
        index_workspace(owner, agent)
    except Exception:
        # Search still answers from what was indexed before.
        log.exception("indexing the workspace of user %s, agent %s failed", owner.pk, agent)
    ranked = chunk_index_for(owner.pk, agent).search(query_vector, k, min_score)
    chunks = (
        MemoryChunk.objects.owned_by(owner)
        .filter(agent=agent)
        .select_related("file")
        .in_bulk([chunk_id for chunk_id, _ in ranked])
    )
    return [
        FileHit(c.file.path, c.start_line, c.end_line, c.heading, c.text, score)
        for chunk_id, score in ranked
        if (c := chunks.get(chunk_id)) is not None
    ]
