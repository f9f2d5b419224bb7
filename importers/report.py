"""What an import read, imported and skipped (and why), shared by every importer."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from importers.text import MAX_EVENT_BYTES


class ImportRefused(Exception):
    """An import that cannot start (not a database, missing tables, bad zip...):
    the message is shown as is, and nothing has been written."""


class ImportStopped(Exception):
    """An import stopped part way by one of its limits (reading took too long): what it
    finished is kept, the session it was in was rolled back. The message is shown as
    is, with `report` (set by the importer) saying what was done."""

    def __init__(self, message: str, report: ImportReport | None = None) -> None:
        super().__init__(message)
        self.report = report


@dataclass
class ImportReport:
    """Counts per kind of row ("events", "facts", ...) and the reasons rows were skipped."""

    dry_run: bool = False
    read: Counter = field(default_factory=Counter)
    imported: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)
    reasons: dict[str, Counter] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    cut: Counter = field(default_factory=Counter)  # imported, but cut to MAX_EVENT_BYTES

    def saw(self, kind: str, count: int = 1) -> None:
        self.read[kind] += count

    def added(self, kind: str, count: int = 1) -> None:
        self.imported[kind] += count

    def skip(self, kind: str, reason: str, count: int = 1) -> None:
        self.skipped[kind] += count
        self.reasons.setdefault(kind, Counter())[reason] += count

    def note(self, line: str) -> None:
        self.notes.append(line)

    def cut_short(self, kind: str, count: int = 1) -> None:
        self.cut[kind] += count

    @property
    def all_notes(self) -> list[str]:
        """The notes, and how many rows of each kind were cut."""
        limit = f"{MAX_EVENT_BYTES // 1024} KB"
        return [
            *self.notes,
            *(
                f"{count} {kind} longer than {limit} were cut to {limit}, marked where cut."
                for kind, count in self.cut.items()
            ),
        ]

    def merge(self, other: ImportReport) -> None:
        """Add `other`'s counts, reasons and notes (one session's report) to these."""
        self.read.update(other.read)
        self.imported.update(other.imported)
        self.skipped.update(other.skipped)
        for kind, reasons in other.reasons.items():
            self.reasons.setdefault(kind, Counter()).update(reasons)
        self.notes.extend(other.notes)
        self.cut.update(other.cut)

    @property
    def kinds(self) -> list[str]:
        return list(dict.fromkeys([*self.read, *self.imported, *self.skipped]))

    def rows(self) -> list[tuple[str, int, int, int, str]]:
        """(kind, read, imported, skipped, reasons) per kind, for the table and the page."""
        return [
            (
                kind,
                self.read[kind],
                self.imported[kind],
                self.skipped[kind],
                "; ".join(
                    f"{reason} ({count})"
                    for reason, count in self.reasons.get(kind, Counter()).most_common()
                ),
            )
            for kind in self.kinds
        ]

    def table(self) -> str:
        header = ("what", "read", "imported", "skipped", "reasons")
        rows = [header, *((k, str(r), str(i), str(s), why) for k, r, i, s, why in self.rows())]
        widths = [max(len(row[column]) for row in rows) for column in range(4)]
        lines = []
        for row in rows:
            cells = [row[0].ljust(widths[0])]
            cells += [row[column].rjust(widths[column]) for column in (1, 2, 3)]
            lines.append("  ".join([*cells, row[4]]).rstrip())
        if self.dry_run:
            lines.append("Dry run: nothing was written.")
        return "\n".join([*lines, *self.all_notes])

    def to_dict(self) -> dict:
        """JSON-safe, for a background job's stored progress and result."""
        return {
            "dry_run": self.dry_run,
            "rows": [list(row) for row in self.rows()],
            "notes": self.all_notes,
        }
