"""An answer that repeats itself: the same block of text again and again at the
end of what is streamed so far. Small models fall into such loops (SmolLM2 wrote
one sentence until max_answer_tokens, ~150 s on a CPU) and never leave them:
greedy decoding makes the next copy as likely as the last.

A loop is found by the tail's period: the text ends with a span in which every
character equals the one `period` characters before it, the span covering at
least MIN_COPIES copies of the block and at least MIN_SPAN characters (inside
a code block, CODE_SPAN). The leading number of a numbered list's lines is left
out first, so "7. Avoid peanuts" and "8. Avoid peanuts" are the same line; numbers
anywhere else count, so a table of figures never reads as a loop.

Why these thresholds (tests/test_repetition.py holds the cases):
- MIN_SPAN, 400 characters (~100 tokens, a few seconds of the small models):
  the exact repetition of legitimate prose, lists and tables is short — a rule
  of dashes, a row of empty cells repeated for a template, a refrain, "ha ha" —
  and a loop, once entered, runs to the token limit: waiting for 400 characters
  costs seconds and catches every loop.
- MIN_COPIES, 3: a block said twice in a row happens ("Yes. Yes."), three
  whole copies of the same sentence or paragraph back to back do not.
- CODE_SPAN, 1,600 characters inside a ``` block: code spells out repeated rows
  on purpose (a 10 x 10 zero matrix is ~360 characters of one row repeated).
- The block may be any length from one character ("!!!!") to a paragraph: what
  matters is how much of the answer the repetition fills.

A request to repeat something many times ("write the line 50 times") is stopped
too, after the first 400 characters of it: the rare price of catching loops early.
A message's whole path, end to end: docs/chat-runtime.md#the-turn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIN_SPAN = 400
CODE_SPAN = 1_600
MIN_COPIES = 3
WINDOW = 4_000  # the tail examined: the longest span looked for
NEEDLE = 16  # the tail's last characters, whose earlier places give the periods to try
CANDIDATES = 64  # periods tried, shortest first
CHECK_EVERY = 24  # characters streamed between two looks (a look costs ~0.1 ms)
LIST_NUMBER = re.compile(r"^([ \t]*)\d{1,4}[.)][ \t]+", re.MULTILINE)
FENCE = "```"


@dataclass(frozen=True)
class Loop:
    """The repetition at the end of `text`: from `start` on, the block of `period`
    characters repeats; `kept` is the text up to the end of its first copy."""

    start: int
    period: int
    kept: str


def without_list_numbers(text: str) -> tuple[str, list[tuple[int, int]]]:
    """The text with its lines' leading list numbers removed, and where each cut was
    (position in the result, characters removed), to map a position back."""
    parts: list[str] = []
    cuts: list[tuple[int, int]] = []
    last = removed = length = 0
    for match in LIST_NUMBER.finditer(text):
        part = text[last : match.start()] + match.group(1)
        parts.append(part)
        length += len(part)
        removed += match.end() - match.start() - len(match.group(1))
        cuts.append((length, removed))
        last = match.end()
    parts.append(text[last:])
    return "".join(parts), cuts


def original_position(position: int, cuts: list[tuple[int, int]]) -> int:
    shift = 0
    for at, removed in cuts:
        if at > position:
            break
        shift = removed
    return position + shift


def repeated_suffix(text: str, period: int) -> int:
    """How many characters at the end of `text` equal those `period` before them."""
    low, high = 0, len(text) - period
    while low < high:  # the largest m with text[-m:] == text[-m - period : -period]
        middle = (low + high + 1) // 2
        end = len(text) - period
        if text[len(text) - middle :] == text[end - middle : end]:
            low = middle
        else:
            high = middle - 1
    return low


def find_loop(text: str) -> Loop | None:
    """The loop `text` ends in, if it ends in one."""
    offset = max(0, len(text) - WINDOW)
    tail, cuts = without_list_numbers(text[offset:])
    size = len(tail)
    if size < MIN_SPAN or size < NEEDLE + 1:
        return None
    needle = tail[-NEEDLE:]
    end = size - 1
    for _ in range(CANDIDATES):
        found = tail.rfind(needle, 0, end)
        if found < 0:
            return None
        period = size - NEEDLE - found
        end = found + NEEDLE - 1
        if tail[size - period :] != tail[size - 2 * period : size - period]:
            continue  # not even two copies
        span = repeated_suffix(tail, period) + period
        if span // period < MIN_COPIES:
            continue
        start = offset + original_position(size - span, cuts)
        in_code = text.count(FENCE, 0, start) % 2 == 1 and FENCE not in text[start:]
        if span >= (CODE_SPAN if in_code else MIN_SPAN):
            first_copy = offset + original_position(size - span + period, cuts)
            return Loop(start, period, text[: sentence_end(text, first_copy, period)].rstrip())
    return None


def sentence_end(text: str, position: int, period: int) -> int:
    """Where the first copy's sentence or line ends: the repetition is found from
    wherever its characters start to match, often a sentence's last few."""
    ends = [i for i in (text.find(c, position, position + period) for c in ".!?\n") if i >= 0]
    return min(ends) + 1 if ends else position


class RepetitionWatch:
    """Looks at an answer as it streams, every CHECK_EVERY characters."""

    def __init__(self) -> None:
        self.looked_at = 0

    def loop_in(self, text: str) -> Loop | None:
        if len(text) - self.looked_at < CHECK_EVERY:
            return None
        self.looked_at = len(text)
        return find_loop(text)
