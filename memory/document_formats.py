"""Documents to Markdown, one format at a time (PDF, DOCX, HTML, text): what the
converter child (memory.conversion) runs, counting as it goes what each format
can blow up into — a PDF's decoded streams, a DOCX's XML elements and
paragraphs, an HTML page's elements — against its `Limits`, and refusing with a
`DocumentError` that says why and what to do.

No Django here: the child does not set Django up.
"""

from __future__ import annotations

import contextlib
import io
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import TYPE_CHECKING
from xml.parsers import expat

if TYPE_CHECKING:
    from docx.document import Document as DocxDocument
    from pypdf import PdfReader
    from pypdf.generic import StreamObject

MB = 1024 * 1024
# A DOCX paragraph as expat names it (namespace, a space, the local name).
PARAGRAPH = "http://schemas.openxmlformats.org/wordprocessingml/2006/main p"


class DocumentError(ValueError):
    """A file that cannot become a memory file; the message says why and what to do."""


@dataclass(frozen=True)
class Converted:
    kind: str
    markdown: str
    pages: int | None = None  # a PDF's


@dataclass(frozen=True)
class Limits:
    """What one conversion may take (memory.documents sets them)."""

    pages: int  # a PDF's
    text_bytes: int  # of Markdown: [memory] file_max_bytes
    decoded_bytes: int  # a PDF's streams, decoded, together
    docx_unpacked_bytes: int  # a DOCX's parts as its zip directory declares them
    docx_parts: int
    docx_paragraphs: int  # in the body
    docx_elements: int  # XML elements in all its parts
    html_elements: int
    memory_bytes: int  # the child's address space (RLIMIT_AS)
    cpu_seconds: int  # the child's CPU time (RLIMIT_CPU)
    wall_seconds: float  # the parent kills the child after this


# Text -------------------------------------------------------------------------


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


def plain_line(line: str) -> str:
    """A line of extracted text that Markdown keeps as text: a "#" or a code fence at its
    start would otherwise make a heading (and a false citation) or hide the rest."""
    stripped = line.lstrip(" \t")
    if stripped.startswith(("#", "```", "~~~")):
        return "\\" + stripped
    return line


def check_text_size(name: str, size: int, limit: int) -> None:
    if size > limit:
        raise DocumentError(
            f"{name} gives more than {limit:,} bytes of text, more than a memory "
            "file may hold ([memory] file_max_bytes): split it and upload the parts."
        )


def convert(name: str, kind: str, data: bytes, limits: Limits) -> Converted:
    """The Markdown of a document of `kind` (from memory.documents.KINDS), or
    DocumentError. Runs in the child."""
    if kind == "PDF":
        if b"%PDF-" not in data[:1024]:
            raise DocumentError(f"{name} is not a PDF: it holds {looks_like(data)}.")
        converted = pdf_to_markdown(name, data, limits)
    elif kind == "DOCX":
        if not data.startswith(b"PK\x03\x04"):
            raise DocumentError(f"{name} is not a DOCX: it holds {looks_like(data)}.")
        converted = Converted(kind, docx_to_markdown(name, data, limits))
    elif kind == "HTML":
        converted = Converted(kind, html_to_markdown(name, decode_text(name, data), limits))
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
    check_text_size(name, len(converted.markdown.encode("utf-8")), limits.text_bytes)
    return converted


# PDF --------------------------------------------------------------------------


class DecodedBudget:
    """What pypdf has decoded so far, against a limit. pypdf decodes every stream
    through `pypdf.filters.decode_stream_data` and keeps the result on the stream
    (for as long as the reader lives), so counting there counts all it holds:
    page contents, forms, fonts' maps."""

    class Spent(Exception):
        pass

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.spent = 0

    @property
    def exceeded(self) -> bool:
        return self.spent > self.limit

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        from pypdf import filters

        decode = filters.decode_stream_data

        def counted(stream: StreamObject) -> bytes:
            if self.exceeded:  # pypdf may have caught the first refusal and gone on
                raise self.Spent
            data = decode(stream)
            self.spent += len(data)
            if self.exceeded:
                raise self.Spent
            return data

        filters.decode_stream_data = counted
        try:
            yield
        finally:
            filters.decode_stream_data = decode


def open_pdf(name: str, data: bytes) -> tuple[PdfReader, int]:
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
        encrypted = reader.is_encrypted
        count = 0 if encrypted else len(reader.pages)
    except (MemoryError, DecodedBudget.Spent):
        raise
    except Exception:  # pypdf raises many kinds on a damaged file; the message is ours
        raise DocumentError(f"{name} is damaged: it cannot be read as a PDF.") from None
    if encrypted:
        raise DocumentError(f"{name} is encrypted: remove its password and upload it again.")
    return reader, count


def pdf_to_markdown(name: str, data: bytes, limits: Limits) -> Converted:
    budget = DecodedBudget(limits.decoded_bytes)
    converted = None
    with budget.counting():
        try:
            converted = pdf_pages(name, data, limits)
        except (DocumentError, MemoryError, DecodedBudget.Spent):
            # A spent budget is why, whatever came of it (pypdf may catch the refusal
            # and fail later, or go on without what it could not decode).
            if not budget.exceeded:
                raise
    if converted is None or budget.exceeded:
        raise DocumentError(
            f"{name} is refused: its streams unpack to more than "
            f"{limits.decoded_bytes // MB} MB (a possible decompression bomb)."
        )
    return converted


def pdf_pages(name: str, data: bytes, limits: Limits) -> Converted:
    from pypdf.errors import LimitReachedError

    reader, count = open_pdf(name, data)
    if count > limits.pages:
        raise DocumentError(f"{name} has {count} pages, more than the {limits.pages} allowed.")
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
        except (MemoryError, DecodedBudget.Spent):
            raise
        except Exception:
            raise DocumentError(
                f"{name} is damaged: page {number} cannot be read as a PDF."
            ) from None
        lines = [plain_line(line.rstrip()) for line in text.splitlines()]
        body = "\n".join(lines).strip()
        size += len(body.encode("utf-8"))
        check_text_size(name, size, limits.text_bytes)
        if body:
            sections.append(f"## Page {number}\n\n{body}")
    return Converted("PDF", "\n\n".join(sections), count)


# DOCX -------------------------------------------------------------------------


def check_docx_archive(name: str, data: bytes, limits: Limits) -> None:
    """Refuse a zip whose directory declares more than a document needs, before
    anything is decompressed."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            parts = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError):
        raise DocumentError(f"{name} is damaged: it cannot be read as a DOCX.") from None
    if len(parts) > limits.docx_parts:
        raise DocumentError(f"{name} has {len(parts)} parts: not a document Neotask reads.")
    declared = sum(part.file_size for part in parts)
    if declared > limits.docx_unpacked_bytes:
        raise DocumentError(
            f"{name} would unpack to {declared // MB} MB (more than "
            f"{limits.docx_unpacked_bytes // MB} MB): it is refused as a possible zip bomb."
        )
    if "word/document.xml" not in {part.filename for part in parts}:
        raise DocumentError(f"{name} is not a DOCX: it is a zip archive without a document.")


def check_docx_elements(name: str, data: bytes, limits: Limits) -> None:
    """Count the XML elements of every part with a streaming parser that builds
    nothing, before python-docx builds a tree of them: a part of millions of tiny
    elements (54 MB of `<w:p/>` is 9 million paragraphs) is refused in constant memory."""
    counted = {"elements": 0, "paragraphs": 0}

    def started(tag: str, attributes: object) -> None:
        counted["elements"] += 1
        if counted["elements"] > limits.docx_elements:
            raise DocumentError(
                f"{name} has more than {limits.docx_elements:,} XML elements: "
                "not a document Neotask reads."
            )

    def started_in_body(tag: str, attributes: object) -> None:
        started(tag, attributes)
        if tag == PARAGRAPH:
            counted["paragraphs"] += 1
            if counted["paragraphs"] > limits.docx_paragraphs:
                raise DocumentError(
                    f"{name} has more than {limits.docx_paragraphs:,} paragraphs: "
                    "split it and upload the parts."
                )

    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for part in archive.infolist():
            if not part.filename.endswith((".xml", ".rels")):
                continue
            parser = expat.ParserCreate(namespace_separator=" ")
            body = part.filename == "word/document.xml"
            parser.StartElementHandler = started_in_body if body else started
            with archive.open(part) as stream:
                while chunk := stream.read(256 * 1024):
                    parser.Parse(chunk, False)
                parser.Parse(b"", True)


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


def docx_to_markdown(name: str, data: bytes, limits: Limits) -> str:
    check_docx_archive(name, data, limits)
    import docx

    try:
        check_docx_elements(name, data, limits)
        # python-docx reads the package's own parts only: external relationships
        # (hyperlinks, linked images, attached templates) stay URLs and are not fetched.
        document = docx.Document(io.BytesIO(data))
        blocks = []
        size = 0
        for block in docx_blocks(document):
            if block:
                blocks.append(block)
                size += len(block.encode("utf-8")) + 2
                check_text_size(name, size, limits.text_bytes)
    except (DocumentError, MemoryError):
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

    def __init__(self, name: str, max_elements: int) -> None:
        super().__init__(convert_charrefs=True)
        self.name = name
        self.max_elements = max_elements
        self.elements = 0
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
        self.elements += 1
        if self.elements > self.max_elements:
            raise DocumentError(
                f"{self.name} has more than {self.max_elements:,} HTML elements: "
                "not a page Neotask reads."
            )
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
            if tag in PARAGRAPHS or re.fullmatch(r"h[1-6]", tag):
                self.lines.append("")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.current.append(data)


def html_to_markdown(name: str, html: str, limits: Limits) -> str:
    writer = MarkdownWriter(name, limits.html_elements)
    writer.feed(html)
    writer.close()
    writer.flush()
    return re.sub(r"\n{3,}", "\n\n", "\n".join(writer.lines)).strip()
