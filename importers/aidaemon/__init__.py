"""Moving in from aidaemon: its SQLite database, read-only, into Neotask.

What comes over:

- conversation: legacy `messages` rows and `events` rows, both if present.
  A row becomes an event of the user and agent chosen, in a session keyed
  `agent:<agent>:import:<aidaemon session id>`; an aidaemon id that is not a
  valid key part (letters, digits, '.', '_', '-', at most 64) becomes a slug
  plus a short hash, and the report lists each such mapping. Each session is
  imported in one transaction: a bad row is skipped with its reason, an
  error rolls the whole session back.
- de-duplication, as the messages→events migration does: an event remembers
  its source row in `legacy_message_id` (a message's id; an event's
  `data.message_id` when it has one, so the same message written to both
  tables is imported once, else `event:<id>`), and a row whose (session, event
  type, legacy id) exists is not imported again.
- embeddings: a JSON list of 384 floats is stored as the vector; anything
  else is left empty and the events are queued for embedding.
- event types Neotask's chat shows are imported; aidaemon's telemetry
  (task_start, llm_call, thinking_start, ...) is skipped with its type as reason.
- facts (by category/key: a fact you set yourself in Neotask wins over the
  imported value, one from the agent is replaced), macros, scheduled tasks
  (cron, original schedule, paused/one-time kept, next run recomputed; a
  one-time task whose time has passed comes paused; every task arrives
  untrusted), terminal prefixes (switched off). Trust comes from a person
  with the permission, never from a file: the report says what was not kept.

Everything is idempotent: a second import of the same file adds nothing.

`reading` opens the database and turns its rows into events, `writing` stores
them and the rest; `import_aidaemon` runs the two.
"""

from __future__ import annotations

from pathlib import Path

from core.ownership import Owner
from core.progress import Progress
from importers.aidaemon.reading import count_rows, open_database, usable_tables
from importers.aidaemon.writing import DatabaseImport
from importers.importer import Importer
from importers.report import ImportReport


def run(
    path: str | Path, owner: Owner, agent_name: str, report: ImportReport, progress: Progress
) -> None:
    with open_database(path) as source:
        tables = usable_tables(source, report)
        # What the history and a fact's provenance name as the import (an upload is
        # stored under its job's id).
        label = f"aidaemon import {Path(path).name}"
        work = DatabaseImport(source, tables, owner, agent_name, report, progress, label)
        work.conversations()
        work.facts()
        work.macros()
        work.scheduled_tasks()
        work.prefixes()


import_aidaemon = Importer(run, total=count_rows, unit="row", label="rows")
