"""An importer, the same for every kind: what the commands, the upload job and
the tests call, and what its progress counts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.ownership import Owner
from core.progress import Progress, no_progress
from importers.report import ImportRefused, ImportReport, ImportStopped
from memory.workspace import DEFAULT_AGENT, AgentNameError, check_agent_name

# (path, owner, agent name, the report to fill, progress); ImportRefused when it cannot start
Run = Callable[[str | Path, Any, str, ImportReport, Progress], None]


@dataclass(frozen=True)
class Importer:
    run: Run
    total: Callable[[str | Path], int]  # the progress's end, counted before the import
    unit: str  # what the progress counts: "row" or "B"
    label: str  # of the progress bar

    def __call__(
        self,
        path: str | Path,
        owner: Owner,
        agent_name: str = DEFAULT_AGENT,
        dry_run: bool = False,
        progress: Progress = no_progress,
    ) -> ImportReport:
        """Import `path` for `owner` into their agent `agent_name` (a dry run writes
        nothing); ImportRefused, with nothing written, when it cannot start;
        ImportStopped, with the report so far, when a limit stopped it."""
        try:
            check_agent_name(agent_name)
        except AgentNameError as exc:
            raise ImportRefused(str(exc)) from None
        report = ImportReport(dry_run=dry_run)
        try:
            self.run(path, owner, agent_name, report, progress)
        except ImportStopped as exc:
            raise ImportStopped(str(exc), report) from None
        return report
