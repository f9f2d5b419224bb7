"""The days a query names: "on 3 June, 2023", "October 13, 2023", "2023-06-03",
"in July 2023", "in 2023" (memory.turns: what was said then counts for more).

Only dates written out in full, in English, are read: a bare "June" or
"Friday" names no one day, and relative times ("last week") would need the
time the question is about, which a search does not know.
"""

from __future__ import annotations

import calendar
import re
from datetime import date

MONTHS = {name.lower(): number for number, name in enumerate(calendar.month_name) if name}
_MONTH = "|".join(MONTHS)
# Most specific first: a day's date also contains a month and a year.
FORMS = (
    ("iso", re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")),
    ("day", re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({_MONTH}),?\s+(\d{{4}})\b", re.I)),
    ("day", re.compile(rf"\b({_MONTH})\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I)),
    ("month", re.compile(rf"\b({_MONTH}),?\s+(\d{{4}})\b", re.I)),
    ("year", re.compile(r"\bin\s+(\d{4})\b", re.I)),
)


def named_days(text: str) -> list[tuple[date, date]]:
    """Each date `text` names, as the first and last day it covers."""
    spans: list[tuple[date, date]] = []
    taken: list[tuple[int, int]] = []
    for kind, pattern in FORMS:
        for match in pattern.finditer(text):
            if any(start <= match.start() < end for start, end in taken):
                continue  # part of a more specific date already read
            try:
                spans.append(span(kind, match.groups()))
            except ValueError:  # "31 February, 2023" (then read as its month), "in 0000"
                continue
            taken.append(match.span())
    return spans


def span(kind: str, groups: tuple[str, ...]) -> tuple[date, date]:
    if kind == "iso":
        written = date(int(groups[0]), int(groups[1]), int(groups[2]))
        return written, written
    if kind == "year":
        year = int(groups[0])
        return date(year, 1, 1), date(year, 12, 31)
    if kind == "month":
        month, year = MONTHS[groups[0].lower()], int(groups[1])
        return date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1])
    if groups[0].isdigit():
        day, month, year = int(groups[0]), MONTHS[groups[1].lower()], int(groups[2])
    else:
        month, day, year = MONTHS[groups[0].lower()], int(groups[1]), int(groups[2])
    return date(year, month, day), date(year, month, day)
