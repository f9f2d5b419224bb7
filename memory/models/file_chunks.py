"""Files kept in memory and the chunks they are searched by."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from core.history import Recorded
from core.models import Change
from core.ownership import OwnedModel
from memory.workspace import DEFAULT_AGENT


class MemoryFile(Recorded, OwnedModel):
    """A markdown file of an agent's workspace (MEMORY.md, memory/**/*.md) as last indexed.

    `size` and `mtime_ns` make the change check a stat per file; `sha256` decides
    whether a changed stat is a changed content.
    """

    agent = models.CharField(max_length=64, default=DEFAULT_AGENT)
    path = models.CharField(max_length=512)  # relative to the workspace, with "/"
    size = models.BigIntegerField(default=0)
    mtime_ns = models.BigIntegerField(default=0)
    sha256 = models.CharField(max_length=64, blank=True)
    # Why the file is not searchable (binary, too large, not UTF-8); "" when indexed.
    skip_reason = models.CharField(max_length=200, blank=True)
    indexed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # The chat session a document was added from with its paperclip (as Event.session_id),
    # so the chat shows its note again after a reload; "" for any other file. It goes
    # with the row, that is with the file (memory.documents.added_in).
    added_in = models.CharField(max_length=255, blank=True, default="")

    # The row is the file's index entry: its changes are recorded when the admin
    # makes them; the files pages and tools record the text (memory.files.history).
    history_subject = Change.Subject.MEMORY_FILE
    history_fields = ("agent", "path", "size", "sha256", "skip_reason")

    class Meta:
        ordering = ["agent", "path"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "agent", "path"], name="memory_file_unique_path"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent}:{self.path}"

    def history_id(self) -> str:
        return str(self)  # as the files pages name it


class MemoryChunk(OwnedModel):
    """A piece of a memory file, embedded on its own; `position` is its place in the file."""

    file = models.ForeignKey(MemoryFile, on_delete=models.CASCADE, related_name="chunks")
    agent = models.CharField(max_length=64, default=DEFAULT_AGENT)
    position = models.PositiveIntegerField()
    start_line = models.PositiveIntegerField()  # 1-based, inclusive
    end_line = models.PositiveIntegerField()
    heading = models.TextField(blank=True)  # the headings above it, "Top > Sub"
    text = models.TextField()
    # sha256 of what is embedded (heading and text): equal hashes share a vector.
    content_hash = models.CharField(max_length=64)
    embedding = models.BinaryField(null=True, blank=True)
    embedded_at = models.DateTimeField(null=True, blank=True)
    embedding_error = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["file", "position"]
        indexes = [
            # The in-process index syncs from these two.
            models.Index(fields=["owner", "agent", "embedded_at"], name="chunk_owner_embedded"),
            models.Index(fields=["owner", "agent", "content_hash"], name="chunk_owner_hash"),
            models.Index(
                fields=["owner", "agent", "id"],
                condition=Q(embedding__isnull=True),
                name="chunk_missing_embedding",
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["file", "position"], name="chunk_unique_position"),
        ]

    def __str__(self) -> str:
        return f"{self.file.path}:{self.start_line}-{self.end_line}"

    @property
    def source(self) -> str:
        return f"{self.file.path}:{self.start_line}-{self.end_line}"
