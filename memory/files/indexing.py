"""Bringing the stored chunks of memory files in line with the workspace, and their vectors.

Indexing is incremental at three levels, so an edit never causes a re-index storm:
a stat per file (size, mtime_ns) finds the files that may have changed; their sha256
tells whether the content did; and a changed file's chunks are embedded only when no
chunk of the same owner and agent already has a vector for the same content hash.
`list_files`, what the files page shows, compares the same stats and writes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import Count
from django.utils import timezone

from core.ownership import Owner
from memory.embeddings import embed_texts
from memory.files.chunking import Chunk, chunk_markdown, chunk_settings
from memory.files.discovery import scan_workspace, workspaces_with_files
from memory.files.paths import max_file_bytes, memory_path, sha256_hex, skip_reason_for
from memory.files.workspace_fs import FileStat, LinkRefused, MemoryPathError, WorkspaceFS
from memory.models import MemoryChunk, MemoryFile
from memory.vectors import pack
from memory.workspace import DEFAULT_AGENT, check_agent_name, workspace_dir

log = logging.getLogger(__name__)

LINK = "a symbolic link (links in a workspace are not followed)"
EMBED_BATCH = 256  # texts per embed_texts call: progress is stored batch by batch


@dataclass
class IndexStats:
    files_seen: int = 0
    files_changed: int = 0  # read again because their size or mtime changed
    files_skipped: int = 0  # of those, not indexed (binary, too large, not UTF-8, a link)
    files_deleted: int = 0
    chunks_embedded: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def index_workspace(owner: Owner, agent: str = DEFAULT_AGENT) -> IndexStats:
    """Bring the owner's chunks of `agent` in line with the workspace; cheap when nothing
    changed (a stat per file and one query)."""
    check_agent_name(agent)
    with WorkspaceFS(workspace_dir(owner.pk, agent, create=False)) as files:
        found = scan_workspace(files)
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
            if path in known and entry.matches(*known[path][1:]):
                continue
            stats.files_changed += 1
            if index_file(owner.pk, agent, files, entry):
                stats.files_skipped += 1
    stats.chunks_embedded = embed_missing_chunks(owner.pk, agent)
    return stats


@dataclass(frozen=True)
class ListedFile:
    """A memory file as it is on disk, with what the index holds of it if that is current."""

    path: str
    size: int
    indexed: bool
    skip_reason: str = ""
    chunk_count: int = 0
    is_link: bool = False


def list_files(owner: Owner, agent: str) -> list[ListedFile]:
    """The workspace's memory files as they are on disk now, by path; what is not
    indexed yet the next write, search or watcher job indexes. A stat per file and
    one query: nothing is read or written."""
    check_agent_name(agent)
    with WorkspaceFS(workspace_dir(owner.pk, agent, create=False)) as files:
        found = scan_workspace(files)
    rows = {
        row.path: row
        for row in MemoryFile.objects.owned_by(owner)
        .filter(agent=agent)
        .annotate(chunk_count=Count("chunks"))
    }
    listed = []
    for path, entry in sorted(found.items()):
        row = rows.get(path)
        if row is not None and entry.matches(row.size, row.mtime_ns):
            listed.append(
                ListedFile(path, entry.size, True, row.skip_reason, row.chunk_count, entry.is_link)
            )
        else:
            listed.append(ListedFile(path, entry.size, False, is_link=entry.is_link))
    return listed


def index_path(owner: Owner, agent: str, path: str) -> IndexStats:
    """Index one file now (after a tool or the page wrote or deleted it)."""
    shown = memory_path(path)
    with WorkspaceFS(workspace_dir(owner.pk, agent, create=False)) as files:
        entry = files.file_entry(shown)
        stats = IndexStats(files_seen=int(entry is not None))
        if entry is None:
            _, deleted = MemoryFile.objects.filter(
                owner_id=owner.pk, agent=agent, path=shown
            ).delete()
            stats.files_deleted = deleted.get(MemoryFile._meta.label, 0)
        else:
            stats.files_changed = 1
            stats.files_skipped = int(bool(index_file(owner.pk, agent, files, entry)))
    stats.chunks_embedded = embed_missing_chunks(owner.pk, agent)
    return stats


def index_file(owner_id: int, agent: str, files: WorkspaceFS, entry: FileStat) -> str:
    """Store the file's state and its chunks (vectors come later); returns its skip reason."""
    data, digest = b"", ""
    if entry.is_link:
        reason = LINK
    elif entry.size > max_file_bytes():
        reason = f"larger than {max_file_bytes()} bytes"
    else:
        try:
            data, _ = files.read(entry.path, max_file_bytes())
        except LinkRefused:  # made a link since the scan
            return LINK
        except MemoryPathError as exc:  # removed, or grown, since the scan: the next one sees
            log.info("memory file %s of user %s not indexed: %s", entry.path, owner_id, exc)
            return str(exc)
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
