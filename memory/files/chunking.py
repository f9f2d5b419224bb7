"""Markdown cut into the chunks that are embedded.

Chunks are whole lines packed up to `file_chunk_chars` characters; the next chunk
repeats up to `file_chunk_overlap_chars` characters of the previous one's last lines.
Every heading starts a new chunk, and each chunk records the path of headings above it
("Trips > Japan"), which is embedded with the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.conf import settings

from memory.files.paths import sha256_hex

HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
FENCE = re.compile(r"^[ \t]*(```|~~~)")


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
