"""The importers by kind, as the commands and the upload job run them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from importers.aidaemon import import_aidaemon
from importers.aidaemon.reading import count_rows
from importers.openclaw import import_openclaw
from importers.openclaw.reading import Folder
from importers.report import ImportReport, Progress


@dataclass(frozen=True)
class Importer:
    # (path, owner, agent_name=, dry_run=, progress=); ImportRefused when it cannot start
    run: Callable[..., ImportReport]
    total: Callable[[str | Path], int]  # the progress's end, counted before the import
    unit: str  # what the progress counts: "row" or "B"
    label: str  # of the progress bar

    def __call__(
        self, path: str | Path, owner: Any, agent: str, dry_run: bool, progress: Progress
    ) -> ImportReport:
        return self.run(path, owner, agent_name=agent, dry_run=dry_run, progress=progress)


IMPORTERS = {
    "aidaemon": Importer(import_aidaemon, count_rows, "row", "rows"),
    "openclaw": Importer(
        import_openclaw,
        lambda path: Folder.locate(path).transcript_bytes,
        "B",
        "transcripts",
    ),
}
