"""Documents added to an agent's memory: PDF, DOCX, HTML, Markdown and plain text,
each converted to a Markdown memory file `memory/docs/<name>.md` and indexed like
any other memory file.

An uploaded file is untrusted data. Its type is told from its bytes (the name only
says which of the accepted types is expected; the browser's content type is not
asked), a DOCX's zip directory is checked before anything is decompressed, nothing
it refers to (links, linked images, templates) is ever fetched, and the whole
conversion happens in memory: a refused file leaves no file, chunk or history row.

Each converted file starts with a line naming the original; a PDF's pages are
`## Page N` headings, so a chunk's heading ("Page 3") cites its page the way a
DOCX's or HTML's own headings cite their section.
"""

from __future__ import annotations

import io
import re
import unicodedata
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import TYPE_CHECKING

from memory.files import indexing
from memory.files.history import record_file_change
from memory.files.paths import (
    MAX_NAME_BYTES,
    delete_memory_file,
    max_file_bytes,
    memory_file_exists,
    write_memory_file,
)
from memory.workspace import workspace_dir
from neotask_site.history import Actor
from neotask_site.ownership import Owner

if TYPE_CHECKING:
    from docx.document import Document as DocxDocument

MB = 1024 * 1024
MAX_UPLOAD_MB = 20
MAX_UPLOAD_BYTES = MAX_UPLOAD_MB * MB
MAX_PAGES = 500
# A DOCX's parts, decompressed, as its zip directory declares them (python-docx reads
# them all into memory; zipfile never unpacks a part past its declared size): a 20 MB
# document, mostly images that do not compress, stays below; a zip bomb declares more.
MAX_DOCX_UNCOMPRESSED = 60 * MB
MAX_DOCX_PARTS = 2000
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


class DocumentError(ValueError):
    """A file that cannot become a memory file; the message says why and what to do."""


@dataclass(frozen=True)
class Converted:
    kind: str
    markdown: str
    pages: int | None = None  # a PDF's


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


# Telling the type from the bytes -------------------------------------------------


def looks_like(data: bytes) -> str:
    """What the bytes are, for a message about a file that is not what its name says."""
    if b"%PDF-" in data[:1024]:
        return "a PDF"
    if data.startswith(b"PK\x03\x04"):
        return "a zip archive"
    for magic, kind in ((b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image")):
        if data.startswith(magic):
            return kind
    if b"\x00" in data[:8192]:
        return "binary data"
    return "text"


def decode_text(name: str, data: bytes) -> str:
    if b"\x00" in data:
        raise DocumentError(f"{name} is not text: it holds {looks_like(data)}.")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise DocumentError(
            f"{name} is not UTF-8 text (at byte {exc.start}): save it as UTF-8 and upload again."
        ) from None


def check_upload_size(name: str, size: int) -> None:
    if size > MAX_UPLOAD_BYTES:
        raise DocumentError(f"{name} is larger than {MAX_UPLOAD_MB} MB.")


def convert(name: str, data: bytes) -> Converted:
    """The Markdown of an uploaded file, or DocumentError."""
    _, extension = split_name(name)
    kind = KINDS[extension]
    check_upload_size(name, len(data))
    if not data:
        raise DocumentError(f"{name} is empty.")
    if kind == "PDF":
        if b"%PDF-" not in data[:1024]:
            raise DocumentError(f"{name} is not a PDF: it holds {looks_like(data)}.")
        converted = pdf_to_markdown(name, data)
    elif kind == "DOCX":
        if not data.startswith(b"PK\x03\x04"):
            raise DocumentError(f"{name} is not a DOCX: it holds {looks_like(data)}.")
        converted = Converted(kind, docx_to_markdown(name, data))
    elif kind == "HTML":
        converted = Converted(kind, html_to_markdown(decode_text(name, data)))
    elif kind == "Markdown":
        converted = Converted(kind, decode_text(name, data).replace("\r\n", "\n"))
    else:
        text = decode_text(name, data).replace("\r\n", "\n")
        converted = Converted(kind, "\n".join(plain_line(line) for line in text.split("\n")))
    if not converted.markdown.strip():
        raise DocumentError(
            f"{name} has no text to remember"
            + (" (a scanned PDF needs text recognition first)." if kind == "PDF" else ".")
        )
    return converted


def plain_line(line: str) -> str:
    """A line of extracted text that Markdown keeps as text: a "#" or a code fence at its
    start would otherwise make a heading (and a false citation) or hide the rest."""
    stripped = line.lstrip(" \t")
    if stripped.startswith(("#", "```", "~~~")):
        return "\\" + stripped
    return line


def check_text_size(name: str, size: int) -> None:
    if size > max_file_bytes():
        raise DocumentError(
            f"{name} gives more than {max_file_bytes():,} bytes of text, more than a memory "
            "file may hold ([memory] file_max_bytes): split it and upload the parts."
        )


# PDF --------------------------------------------------------------------------


def pdf_to_markdown(name: str, data: bytes) -> Converted:
    from pypdf import PdfReader
    from pypdf.errors import LimitReachedError

    try:
        reader = PdfReader(io.BytesIO(data))
        encrypted = reader.is_encrypted
        count = 0 if encrypted else len(reader.pages)
    except Exception:  # pypdf raises many kinds on a damaged file; the message is ours
        raise DocumentError(f"{name} is damaged: it cannot be read as a PDF.") from None
    if encrypted:
        raise DocumentError(f"{name} is encrypted: remove its password and upload it again.")
    if count > MAX_PAGES:
        raise DocumentError(f"{name} has {count} pages, more than the {MAX_PAGES} allowed.")
    sections = []
    size = 0
    for number, page in enumerate(reader.pages, start=1):
        try:
            text = page.extract_text() or ""
        except LimitReachedError:
            raise DocumentError(
                f"{name} is refused: page {number} unpacks to more than pypdf's limit "
                "(a possible decompression bomb)."
            ) from None
        except Exception:
            raise DocumentError(
                f"{name} is damaged: page {number} cannot be read as a PDF."
            ) from None
        lines = [plain_line(line.rstrip()) for line in text.splitlines()]
        body = "\n".join(lines).strip()
        size += len(body.encode("utf-8"))
        check_text_size(name, size)
        if body:
            sections.append(f"## Page {number}\n\n{body}")
    return Converted("PDF", "\n\n".join(sections), count)


# DOCX -------------------------------------------------------------------------


def check_docx_archive(name: str, data: bytes) -> None:
    """Refuse a zip whose directory declares more than a document needs, before
    anything is decompressed."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            parts = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError):
        raise DocumentError(f"{name} is damaged: it cannot be read as a DOCX.") from None
    if len(parts) > MAX_DOCX_PARTS:
        raise DocumentError(f"{name} has {len(parts)} parts: not a document Neotask reads.")
    declared = sum(part.file_size for part in parts)
    if declared > MAX_DOCX_UNCOMPRESSED:
        raise DocumentError(
            f"{name} would unpack to {declared // MB} MB (more than "
            f"{MAX_DOCX_UNCOMPRESSED // MB} MB): it is refused as a possible zip bomb."
        )
    if "word/document.xml" not in {part.filename for part in parts}:
        raise DocumentError(f"{name} is not a DOCX: it is a zip archive without a document.")


def docx_blocks(document: DocxDocument) -> Iterator[str]:
    """The body's paragraphs and tables in order, as Markdown."""
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    # Style names by id, read once: python-docx's `paragraph.style` searches the styles
    # on every call (5 ms each, 30 s for a long document).
    style_names = {style.style_id: style.name or "" for style in document.styles}
    for element in document.element.body.iterchildren():
        tag = element.tag.rsplit("}", 1)[-1]
        if tag == "p":
            paragraph = Paragraph(element, document.part)
            yield docx_paragraph(paragraph.text, style_names.get(element.style or "", ""))
        elif tag == "tbl":
            table = Table(element, document.part)
            yield "\n".join(
                "| " + " | ".join(" ".join(cell.text.split()) for cell in row.cells) + " |"
                for row in table.rows
            )


def docx_paragraph(text: str, style: str) -> str:
    text = " ".join(text.split())
    if not text:
        return ""
    level = re.fullmatch(r"Heading ([1-6])", style)
    if level:
        return f"{'#' * int(level.group(1))} {text}"
    if style == "Title":
        return f"# {text}"
    if style.startswith("List"):
        return f"- {text}"
    return plain_line(text)


def docx_to_markdown(name: str, data: bytes) -> str:
    check_docx_archive(name, data)
    import docx

    try:
        # python-docx reads the package's own parts only: external relationships
        # (hyperlinks, linked images, attached templates) stay URLs and are not fetched.
        document = docx.Document(io.BytesIO(data))
        blocks = []
        size = 0
        for block in docx_blocks(document):
            if block:
                blocks.append(block)
                size += len(block.encode("utf-8")) + 2
                check_text_size(name, size)
    except DocumentError:
        raise
    except Exception:  # python-docx and lxml raise many kinds on a damaged file
        raise DocumentError(f"{name} is damaged: it cannot be read as a DOCX.") from None
    return "\n\n".join(blocks)


# HTML -------------------------------------------------------------------------

BLOCKS = {"p", "div", "section", "article", "main", "header", "footer", "table", "tr", "ul", "ol"}
BLOCKS |= {"blockquote", "pre", "br", "hr", "li", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6"}
PARAGRAPHS = {"p", "pre", "table", "ul", "ol", "blockquote"}  # followed by a blank line
UNSEEN = {"script", "style", "head", "template", "noscript", "svg", "iframe", "object"}


class MarkdownWriter(HTMLParser):
    """Text and headings of an HTML page; nothing it links to is fetched, and no
    markup of the page reaches the Markdown (it is text, never rendered as HTML)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self.current: list[str] = []
        self.prefix = ""
        self.hidden = 0
        self.pre = 0

    def flush(self) -> None:
        text = "".join(self.current)
        self.current = []
        if self.pre:
            self.lines.extend(plain_line(line) for line in text.split("\n"))
            return
        text = " ".join(text.split())
        if text:
            self.lines.append(self.prefix + (text if self.prefix else plain_line(text)))
        self.prefix = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in UNSEEN:
            self.hidden += 1
        elif tag in BLOCKS:
            self.flush()
            if re.fullmatch(r"h[1-6]", tag):
                self.prefix = "#" * int(tag[1]) + " "
            elif tag == "li":
                self.prefix = "- "
            elif tag == "pre":
                self.pre += 1
        elif tag in {"td", "th"}:
            self.current.append(" | ")

    def handle_endtag(self, tag: str) -> None:
        if tag in UNSEEN:
            self.hidden = max(0, self.hidden - 1)
        elif tag in BLOCKS:
            self.flush()
            if tag == "pre":
                self.pre = max(0, self.pre - 1)
            if tag in {"p", "pre", "table", "ul", "ol", "blockquote"} or re.fullmatch(
                r"h[1-6]", tag
            ):
                self.lines.append("")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.current.append(data)


def html_to_markdown(html: str) -> str:
    writer = MarkdownWriter()
    writer.feed(html)
    writer.close()
    writer.flush()
    return re.sub(r"\n{3,}", "\n\n", "\n".join(writer.lines)).strip()


# Into memory --------------------------------------------------------------------


def front_line(name: str, converted: Converted) -> str:
    pages = f", {converted.pages} page{'s' if converted.pages != 1 else ''}"
    return (
        f"Converted from the {converted.kind} file “{name}”"
        f"{pages if converted.pages is not None else ''}.\n\n"
    )


def add_document(owner: Owner, agent: str, name: str, data: bytes, actor: Actor) -> str:
    """Convert an uploaded file and store it as a new memory file of `agent`, recorded
    in the owner's history and indexed; returns its path. DocumentError (or the
    workspace's MemoryPathError: full, a link in the way) leaves nothing written."""
    shown = document_path(name)
    converted = convert(name, data)
    text = front_line(name, converted) + converted.markdown.strip() + "\n"
    check_text_size(name, len(text.encode("utf-8")))
    workspace = workspace_dir(owner.pk, agent, create=False)
    if memory_file_exists(workspace, shown):
        raise DocumentError(
            f"{shown} already exists: delete it first, or rename the file and upload again."
        )
    write_memory_file(workspace, shown, text)  # atomic; checks the workspace's quota
    try:
        indexing.index_path(owner, agent, shown)
        # Last: history rows are permanent, so none is written for a file taken back out.
        record_file_change(owner, agent, shown, actor, None, text)
    except BaseException:
        # The database failed (or the request was cancelled) after the write: take the
        # file back out, with the rows stored for it, rather than keep half of it.
        delete_memory_file(workspace, shown)
        indexing.index_path(owner, agent, shown)
        raise
    return shown
