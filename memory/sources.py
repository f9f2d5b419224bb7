"""Sources under an answer: the memory files (documents among them) whose chunks
were in the turn's prompt and that the answer drew on, named the way a person
would cite them ("Project Orion plan.pdf, p. 2") whatever the model wrote.

Which chunks a prompt carried is the prompt's business (agent.prompt: the
memory-file items of the session's auto-recall, already the owner's and the
agent's); this module decides which of them the answer used, by one pure
function (`cited`):

- the answer shares content words with the chunk that the user's message does
  not hold — words the model can only have taken from memory ("48,000",
  "euros"), not the question said back ("marketing", "budget"), nor function
  words ("the", "is", "page") — at least `MIN_SHARED_WORDS` of them, or, in a
  short answer, at least half of its own words ("25 days", "June 1"). Both
  figures were measured on the embedded model's answers
  (bench/answer_sources.py, docs/memory.md);
- or the answer names the file ("Q3 report"), when the message did not.

A source never comes from anywhere else: the sources are a subset of the
prompt's chunks, so another user's file (never in the prompt) cannot appear.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from memory.documents import original_names
from memory.fulltext import STOPWORDS

if TYPE_CHECKING:
    from core.ownership import Owner
    from memory.retrieval import RecalledItem

# Measured on 36 answers of the embedded Qwen2.5-Coder-0.5B (bench/answer_sources.py):
# with both rules, 19 of the 19 that used their chunk are cited and none of the 17
# that did not. At 2 shared words a long answer about bikes cites a car manual by
# "check" and "pressure"; by shared words alone, 3 misses 7 short answers of 19.
MIN_SHARED_WORDS = 3
SHORT_ANSWER_SHARE = 0.5

# Words of an answer that say nothing of where it came from: the full-text
# search's stopwords, more function words, and how an answer speaks of memory.
FILLER = STOPWORDS | frozenset(
    (
        "about above after again all also am any because been before being below both "
        "can could down during each few further here into just more most much must nor "
        "only other ought over own same shall should some such than these those through "
        "too under until up very while yes yet out off once per one two "
        "says said say according based document documents file files page pages memory "
        "memories information mentioned mention note notes know sure see tell told "
        "converted section chapter"
    ).split()
)
# A word, with what joins its parts ("48,000", "3.5", "14:00", "nt-backups-eu").
WORD = re.compile(r"\w+(?:[.,:'/-]\w+)*", re.UNICODE)
PAGE = re.compile(r"^Page (\d+)$")


@dataclass(frozen=True)
class PromptChunk:
    """A memory file's chunk as the prompt carried it (its text clipped as sent)."""

    path: str  # relative to the workspace, "memory/docs/Q3 report.md"
    heading: str  # the headings above it: "Page 3", "Trips > Japan"
    text: str


@dataclass(frozen=True)
class Cited:
    """A file the answer drew on, with the pages (or sections) of its chunks it used."""

    path: str
    pages: tuple[int, ...] = ()
    sections: tuple[str, ...] = ()

    def label(self, name: str) -> str:
        """'Q3 report.pdf, p. 3', 'Q3 report.pdf, pp. 2, 3', 'trip.docx, Lisbon'."""
        if self.pages:
            numbers = ", ".join(str(page) for page in self.pages)
            return f"{name}, {'p.' if len(self.pages) == 1 else 'pp.'} {numbers}"
        if self.sections:
            return f"{name}, {'; '.join(self.sections)}"
        return name

    def as_json(self, name: str) -> dict[str, Any]:
        """As the answer's event keeps it (`data["sources"]`)."""
        return {"path": self.path, "label": self.label(name), "pages": list(self.pages)}


def prompt_chunks(items: Iterable[RecalledItem]) -> tuple[PromptChunk, ...]:
    """The memory-file chunks among a session's recalled items (an event's have an id)."""
    return tuple(
        PromptChunk(item["source"].rpartition(":")[0], item.get("heading", ""), item["text"])
        for item in items
        if "event_id" not in item
    )


def content_words(text: str) -> set[str]:
    """The words that carry meaning, lower-cased, a plural's 's' dropped."""
    words = set()
    for word in WORD.findall(text.lower()):
        if len(word) < 2 or word in FILLER:
            continue
        if len(word) > 4 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        words.add(word)
    return words


def shared_words(answer: str, chunk: str, question: str = "") -> set[str]:
    """The content words of the answer found in the chunk and not in the question."""
    return (content_words(answer) & content_words(chunk)) - content_words(question)


def file_stem(path: str) -> str:
    return PurePosixPath(path).stem


def names_file(answer: str, path: str, question: str = "") -> bool:
    """Whether the answer names the file (its name without extension, as a whole
    phrase), and the question did not already."""
    stem = file_stem(path).lower()
    if len(stem) < 3 or stem in {"memory", "notes"}:
        return False
    phrase = re.compile(rf"(?<!\w){re.escape(stem)}(?!\w)")
    return bool(phrase.search(answer.lower())) and not phrase.search(question.lower())


def used(
    answer: str, chunk: PromptChunk, question: str = "", elsewhere: frozenset[str] = frozenset()
) -> bool:
    """Whether the answer drew on the chunk (`elsewhere`: the words of the prompt's
    other chunks, which do not make an answer that also drew on them any longer)."""
    new = content_words(answer) - content_words(question)
    shared = new & content_words(chunk.text)
    own = shared | (new - elsewhere)
    return (
        len(shared) >= MIN_SHARED_WORDS
        or (bool(shared) and len(shared) >= SHORT_ANSWER_SHARE * len(own))
        or names_file(answer, chunk.path, question)
    )


def cited(answer: str, chunks: Iterable[PromptChunk], question: str = "") -> list[Cited]:
    """The files of the prompt's chunks the answer used, in the prompt's order, each
    with the pages (a PDF's "Page N" heading) or sections of the chunks it used."""
    chunks = list(chunks)
    words = [content_words(chunk.text) for chunk in chunks]
    found: dict[str, tuple[list[int], list[str]]] = {}
    for index, chunk in enumerate(chunks):
        elsewhere = frozenset().union(*(w for i, w in enumerate(words) if i != index))
        if not used(answer, chunk, question, elsewhere):
            continue
        pages, sections = found.setdefault(chunk.path, ([], []))
        page = PAGE.match(chunk.heading)
        if page is not None:
            number = int(page.group(1))
            if number not in pages:
                pages.append(number)
        elif chunk.heading:
            section = chunk.heading.split(" > ")[-1]
            if section not in sections:
                sections.append(section)
    return [
        Cited(path, tuple(sorted(pages)), tuple(sections) if not pages else ())
        for path, (pages, sections) in found.items()
    ]


def answer_sources(
    owner: Owner, agent: str, answer: str, chunks: Iterable[PromptChunk], question: str = ""
) -> list[dict[str, Any]]:
    """What the answer's event keeps of its sources: `cited`, each named as the user
    knows it (a document by its original file name; memory.documents). Reads the
    database only when something is cited."""
    found = cited(answer, chunks, question)
    if not found:
        return []
    names: Mapping[str, str] = original_names(owner, agent, [c.path for c in found])
    return [c.as_json(names.get(c.path) or PurePosixPath(c.path).name) for c in found]
