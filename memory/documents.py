"""Documents added to an agent's memory: PDF, DOCX, HTML, Markdown and plain text,
each converted to a Markdown memory file `memory/docs/<name>.md` and indexed like
any other memory file.

An uploaded file is untrusted data. Its type is told from its bytes (the name only
says which of the accepted types is expected; the browser's content type is not
asked), a DOCX's zip directory is checked before anything is decompressed, nothing
it refers to (links, linked images, templates) is ever fetched, and it is converted
in a child process under the limits below (memory.conversion): the web process
holds the upload and the resulting Markdown, never what the document unpacks to.
A refused file leaves no file, chunk or history row.

Each converted file starts with a line naming the original; a PDF's pages are
`## Page N` headings, so a chunk's heading ("Page 3") cites its page the way a
DOCX's or HTML's own headings cite their section.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlencode

from django.core import signing
from django.db.models import Count
from django.urls import reverse

from core.history import Actor
from core.ownership import Owner
from memory.conversion import Upload, convert_in_child
from memory.document_formats import MB, Converted, DocumentError, Limits, check_text_size
from memory.files import indexing
from memory.files.history import record_file_change
from memory.files.paths import (
    MAX_NAME_BYTES,
    delete_memory_file,
    max_file_bytes,
    memory_file_exists,
    write_memory_file,
)
from memory.models import MemoryChunk, MemoryFile
from memory.workspace import workspace_dir

MAX_UPLOAD_MB = 20
MAX_UPLOAD_BYTES = MAX_UPLOAD_MB * MB
MAX_PAGES = 500
# A PDF's streams as pypdf decodes them, together (it keeps them all while it reads
# the file; one stream is also capped at pypdf's own 75 MB): a 500-page report's
# contents decode to a few MB; 20 pages of 70 MB each would be 1.4 GB.
MAX_PDF_DECODED_BYTES = 100 * MB
# A DOCX's parts, decompressed, as its zip directory declares them (python-docx reads
# them all into memory; zipfile never unpacks a part past its declared size): a 20 MB
# document, mostly images that do not compress, stays below; a zip bomb declares more.
MAX_DOCX_UNCOMPRESSED = 60 * MB
MAX_DOCX_PARTS = 2000
# Elements, counted before python-docx builds its tree of them (about 130 bytes each):
# a long document has tens of thousands of paragraphs; 60 MB of `<w:p/>` is 10 million.
MAX_DOCX_PARAGRAPHS = 100_000
MAX_DOCX_ELEMENTS = 1_000_000
MAX_HTML_ELEMENTS = 500_000
# The converting child's: its address space (the interpreter with pypdf, python-docx
# and lxml takes 64 MB of it), its CPU time (a 500-page PDF takes 2.4 s), and the
# wall-clock time after which the web process kills it.
CONVERSION_MEMORY_BYTES = 512 * MB
CONVERSION_CPU_SECONDS = 30
CONVERSION_WALL_SECONDS = 60.0
DOCS_DIR = "memory/docs"

KINDS = {
    ".pdf": "PDF",
    ".docx": "DOCX",
    ".html": "HTML",
    ".htm": "HTML",
    ".md": "Markdown",
    ".markdown": "Markdown",
    ".txt": "text",
}
ACCEPTED = ", ".join(sorted(KINDS))
# What the file picker offers (the server checks again).
ACCEPT_ATTRIBUTE = ",".join(KINDS)


# Names -----------------------------------------------------------------------


def split_name(name: str) -> tuple[str, str]:
    """(stem, lower-case extension) of an uploaded file's name, refused if it is not
    a plain name of an accepted type."""
    if not name or not name.strip():
        raise DocumentError("The file has no name.")
    if "\x00" in name:
        raise DocumentError("A file name cannot contain NUL characters.")
    if "/" in name or "\\" in name:
        raise DocumentError(f"{name!r} is a path: give the file's name only.")
    stem, dot, extension = name.strip().rpartition(".")
    if not dot or f".{extension.lower()}" not in KINDS:
        raise DocumentError(f"{name!r} is not a file Neotask can read: upload {ACCEPTED}.")
    return stem, f".{extension.lower()}"


def document_path(name: str) -> str:
    """The memory file an upload becomes: memory/docs/<its name, made safe>.md."""
    stem, _ = split_name(name)
    # Only letters, digits and a few marks, so the name means the same on every
    # file system and in a shell; never a leading dot (a hidden file is no memory file).
    safe = re.sub(r"[^\w.\- ]+", "-", unicodedata.normalize("NFC", stem)).strip(" .-")
    if not safe:
        raise DocumentError(f"{name!r} has no usable name: rename it and upload again.")
    if len(f"{safe}.md".encode()) > MAX_NAME_BYTES:
        raise DocumentError(
            f"The file name is too long (at most {MAX_NAME_BYTES - 3} bytes before the "
            "extension): rename it and upload again."
        )
    return f"{DOCS_DIR}/{safe}.md"


# Converting ------------------------------------------------------------------


def check_upload_size(name: str, size: int) -> None:
    if size > MAX_UPLOAD_BYTES:
        raise DocumentError(f"{name} is larger than {MAX_UPLOAD_MB} MB.")


def limits() -> Limits:
    return Limits(
        pages=MAX_PAGES,
        text_bytes=max_file_bytes(),
        decoded_bytes=MAX_PDF_DECODED_BYTES,
        docx_unpacked_bytes=MAX_DOCX_UNCOMPRESSED,
        docx_parts=MAX_DOCX_PARTS,
        docx_paragraphs=MAX_DOCX_PARAGRAPHS,
        docx_elements=MAX_DOCX_ELEMENTS,
        html_elements=MAX_HTML_ELEMENTS,
        memory_bytes=CONVERSION_MEMORY_BYTES,
        cpu_seconds=CONVERSION_CPU_SECONDS,
        wall_seconds=CONVERSION_WALL_SECONDS,
    )


def upload_size(data: Upload) -> int:
    if isinstance(data, bytes):
        return len(data)
    size = data.seek(0, os.SEEK_END)
    data.seek(0)
    return size


def convert(name: str, data: Upload) -> Converted:
    """The Markdown of an uploaded file (its bytes, or the file it was received
    into), or DocumentError."""
    _, extension = split_name(name)
    size = upload_size(data)
    check_upload_size(name, size)
    if not size:
        raise DocumentError(f"{name} is empty.")
    return convert_in_child(name, KINDS[extension], data, limits())


# Into memory --------------------------------------------------------------------


def front_line(name: str, converted: Converted) -> str:
    pages = f", {converted.pages} page{'s' if converted.pages != 1 else ''}"
    return (
        f"Converted from the {converted.kind} file “{name}”"
        f"{pages if converted.pages is not None else ''}.\n\n"
    )


FRONT_LINE = re.compile(r"^Converted from the \w+ file “(?P<name>[^”\n]+)”")


def original_names(owner: Owner, agent: str, paths: Iterable[str]) -> dict[str, str]:
    """The uploaded file's name of each of these paths that is a document, as its
    front line says (a document whose line was edited away is not named)."""
    documents = [path for path in paths if path.startswith(f"{DOCS_DIR}/")]
    if not documents:
        return {}
    first_chunks = (
        MemoryChunk.objects.owned_by(owner)
        .filter(agent=agent, file__path__in=documents, position=0)
        .values_list("file__path", "text")
    )
    return {
        path: found["name"]
        for path, text in first_chunks
        if (found := FRONT_LINE.match(text)) is not None
    }


def add_document(
    owner: Owner, agent: str, name: str, data: Upload, actor: Actor, session_id: str = ""
) -> str:
    """Convert an uploaded file and store it as a new memory file of `agent`, recorded
    in the owner's history and indexed; returns its path. `session_id`: the owner's chat
    session it was added from (its paperclip), which lists it (added_in). DocumentError
    (or the workspace's MemoryPathError: full, a link in the way) leaves nothing written."""
    shown = document_path(name)
    converted = convert(name, data)
    text = front_line(name, converted) + converted.markdown.strip() + "\n"
    check_text_size(name, len(text.encode("utf-8")), max_file_bytes())
    workspace = workspace_dir(owner.pk, agent, create=False)
    if memory_file_exists(workspace, shown):
        raise DocumentError(
            f"{shown} already exists: delete it first, or rename the file and upload again."
        )
    write_memory_file(workspace, shown, text)  # atomic; checks the workspace's quota
    try:
        indexing.index_path(owner, agent, shown)
        if session_id:
            MemoryFile.objects.owned_by(owner).filter(agent=agent, path=shown).update(
                added_in=session_id
            )
        # Last: history rows are permanent, so none is written for a file taken back out.
        record_file_change(owner, agent, shown, actor, None, text)
    except BaseException:
        # The database failed (or the request was cancelled) after the write: take the
        # file back out, with the rows stored for it, rather than keep half of it.
        delete_memory_file(workspace, shown)
        indexing.index_path(owner, agent, shown)
        raise
    return shown


def passages(owner: Owner, agent: str, path: str) -> int:
    """How many passages (chunks) of a memory file memory search can find."""
    return MemoryChunk.objects.owned_by(owner).filter(agent=agent, file__path=path).count()


@dataclass(frozen=True)
class AddedDocument:
    """A document added from a chat, as its note names it (memory/_upload_note.html)."""

    agent: str
    path: str
    name: str
    passages: int
    created_at: datetime
    is_document: bool = True  # told apart from the events it is listed among

    @property
    def url(self) -> str:
        return f"{reverse('memory-file')}?{urlencode({'agent': self.agent, 'path': self.path})}"


# The chat a paperclip's upload came from, as the chat page (sessions_app, a floor
# above) vouches for it: signed with the owner, so memory needs no look at sessions.
CHAT_SALT = "neotask.memory.documents.chat"


def chat_voucher(owner: Owner, session_id: str) -> str:
    """What the chat page gives its paperclip for the chat session `session_id`."""
    return signing.dumps([owner.pk, session_id], salt=CHAT_SALT)


def vouched_chat(owner: Owner, voucher: str) -> str:
    """The chat session a voucher of the owner's names; "" for anything else (another
    user's, forged, a bare id)."""
    try:
        owner_pk, session_id = signing.loads(voucher, salt=CHAT_SALT)
    except (signing.BadSignature, TypeError, ValueError):
        return ""
    return session_id if owner_pk == owner.pk and isinstance(session_id, str) else ""


def added_in(owner: Owner, session_id: str) -> list[AddedDocument]:
    """The owner's documents added from the chat session `session_id`, oldest first: those
    still in memory (deleting a file deletes its row, and so its note)."""
    rows = list(
        MemoryFile.objects.owned_by(owner)
        .filter(added_in=session_id)
        .annotate(passages=Count("chunks"))
        .order_by("created_at", "id")
    )
    names: dict[tuple[str, str], str] = {}
    for agent in {row.agent for row in rows}:
        paths = [row.path for row in rows if row.agent == agent]
        names |= {(agent, path): name for path, name in original_names(owner, agent, paths).items()}
    return [
        AddedDocument(
            row.agent,
            row.path,
            names.get((row.agent, row.path), row.path),
            row.passages,
            row.created_at,
        )
        for row in rows
    ]
