"""Documents made in the tests (no binary fixtures): a real PDF written by hand, and
the bombs: a PDF of per-page Flate streams and a DOCX of millions of empty paragraphs."""

from __future__ import annotations

import io
import zipfile
import zlib
from pathlib import Path


def pdf_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def make_pdf(pages: list[list[str]]) -> bytes:
    """A PDF of one text line per entry on each page, Helvetica, with a correct xref."""
    return pdf_of_contents([text_content(lines) for lines in pages])


def text_content(lines: list[str]) -> bytes:
    shown = " ".join(f"({pdf_string(line)}) Tj 0 -16 Td" for line in lines)
    return f"BT /F1 12 Tf 72 720 Td {shown} ET".encode()


def pdf_of_contents(contents: list[bytes], flate: bool = False) -> bytes:
    """A PDF whose pages have these content streams (Flate-compressed ones if `flate`)."""
    count = len(contents)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids ["
        + b" ".join(f"{4 + 2 * i} 0 R".encode() for i in range(count))
        + f"] /Count {count} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    encoding = " /Filter /FlateDecode" if flate else ""
    for i, stream in enumerate(contents):
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {5 + 2 * i} 0 R >>".encode()
        )
        objects.append(
            f"<< /Length {len(stream)}{encoding} >>\nstream\n".encode() + stream + b"\nendstream"
        )
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return bytes(out)


def per_page_streams_pdf(pages: int, unpacked: int = 70_000_000) -> bytes:
    """H1 of issue 40: a page of text, then `pages` pages each with its own Flate stream
    of spaces that unpacks to `unpacked` bytes (just under pypdf's 75 MB for one
    stream); 70 MB compress to 68 KB."""
    stream = zlib.compress(b" " * unpacked, 9)
    first = zlib.compress(text_content(["The bomb's only words."]))
    return pdf_of_contents([first] + [stream] * pages, flate=True)


def paragraph_bomb_docx(paragraphs: int) -> bytes:
    """M1 of issue 40: a real DOCX (python-docx's template) whose body is one paragraph
    of text and then `paragraphs` empty ones; 9 million are 54 MB unpacked, 115 KB here."""
    import docx

    template = io.BytesIO()
    docx.Document().save(template)
    body = (
        b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:document xmlns:w='
        b'"http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'
        b"<w:p><w:r><w:t>The bomb's only words.</w:t></w:r></w:p>"
        + b"<w:p/>" * paragraphs
        + b"</w:body></w:document>"
    )
    out = io.BytesIO()
    with (
        zipfile.ZipFile(template) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target,
    ):
        for item in source.infolist():
            part = source.read(item.filename)
            target.writestr(item.filename, body if item.filename == "word/document.xml" else part)
    return out.getvalue()


def nothing_written(owner, workspace: Path) -> bool:
    """No memory file of `owner`'s on disk or in the database, no chunk, no history row."""
    from core.models import Change
    from memory.models import MemoryChunk, MemoryFile

    docs = workspace / "memory" / "docs"
    return (
        not (docs.exists() and any(docs.iterdir()))
        and not MemoryFile.objects.filter(owner=owner).exists()
        and not MemoryChunk.objects.filter(owner=owner).exists()
        and not Change.objects.filter(owner=owner).exists()
    )


# Three pages; the third holds the fact the tests look for.
BUDGET_PDF = make_pdf(
    [
        ["Quarterly report", "Revenue grew a little."],
        ["Hiring", "# not a heading, just text"],
        ["Budget", "The marketing budget for 2027 is 48,000 euros."],
    ]
)
# Two pages; the second holds the milestone an answer cites (tests of memory.sources).
ORION_PDF = make_pdf(
    [
        ["Project Orion", "An overview of the project."],
        ["Milestones", "The Orion prototype ships to the Lisbon lab in March."],
    ]
)
