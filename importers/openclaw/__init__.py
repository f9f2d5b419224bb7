"""Moving in from OpenClaw: one agent folder's sessions, transcripts and memory files.

    <dir>/sessions/sessions.json    session key → {"sessionId", "updatedAt", "displayName", ...}
    <dir>/sessions/<sessionId>.jsonl a header line {"type": "session", ...}, then one entry a line
    <dir>/workspace/MEMORY.md, <dir>/workspace/memory/**/*.md   (or both directly in <dir>)

How it maps:

- Each transcript becomes one Neotask session of the target agent. An OpenClaw key that is a
  Neotask key, agent:<a>:<channel>:<chat>, is kept with its agent part replaced by the target
  agent; any other key becomes agent:<agent>:import:<slug of the key>, and a transcript that
  sessions.json does not name (a session OpenClaw reset) becomes
  agent:<agent>:import:<sessionId>. The report lists each mapping. When the key's chat already
  has an active session, that one is archived and the imported session continues it, as
  after a reset.
- Message entries become the events a chat turn stores (user_message, assistant_response with
  its tool calls and usage, tool_call, tool_result), compaction and branch summaries become
  summary events; entries are taken in file order. Thinking is not kept.
- Each session opens with a session_start event whose legacy_message_id names the OpenClaw
  session, and every event carries its entry's id (or line number) there too: a second run finds
  both and imports only what is new, so a transcript that grew adds its new entries only.
- A session is imported in one transaction: a failure leaves none of it. The file is streamed a
  line at a time and written in bounded batches, so memory stays flat on any size; a line
  longer than MAX_LINE_BYTES is skipped, an event longer than MAX_EVENT_BYTES (as JSON) is
  cut, and the report counts both. New events are queued for embedding
  when the session commits (the sweep catches whatever a lost job missed).
- Memory files are copied into the agent's workspace and indexed. A workspace file with other
  content is never overwritten: the imported one goes to memory/imported/ beside it, or is
  skipped when that copy exists with other content too. Symlinks are not followed.

`reading` reads the folder and parses its entries, `writing` writes a session,
`memory_files` copies the memory files; `import_openclaw` runs the three.
"""

from __future__ import annotations

from pathlib import Path

from core.ownership import Owner
from core.progress import Progress
from importers.importer import Importer
from importers.openclaw.memory_files import copy_memory_files
from importers.openclaw.reading import SESSIONS, Folder, find_sources
from importers.openclaw.writing import import_session, imported_sessions
from importers.report import ImportReport


def run(
    path: str | Path, owner: Owner, agent_name: str, report: ImportReport, progress: Progress
) -> None:
    folder = Folder.locate(path)
    for line in folder.notes:
        report.note(line)
    imported = imported_sessions(owner, agent_name)  # one query, not one per session
    for source in find_sources(folder, report):
        if source.transcript.is_symlink():
            report.saw(SESSIONS)
            report.skip(SESSIONS, "transcript is a symlink (not followed)")
            continue
        try:
            report.merge(
                import_session(owner, agent_name, source, imported, report.dry_run, progress)
            )
        except Exception as exc:
            report.saw(SESSIONS)
            report.skip(SESSIONS, f"failed ({type(exc).__name__}), nothing of it kept")
            report.note(f"Session {source.session_id} ({source.transcript.name}) failed: {exc}")
    copy_memory_files(folder, owner, agent_name, report, report.dry_run)


def transcript_bytes(path: str | Path) -> int:
    return Folder.locate(path).transcript_bytes


import_openclaw = Importer(run, total=transcript_bytes, unit="B", label="transcripts")
