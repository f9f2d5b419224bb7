"""The archive's layout, version 1 (docs/data-export.md says every field).

A zip whose first member is manifest.json; then agents.json, one JSONL file per
session under sessions/, facts.jsonl, macros.jsonl, tasks.jsonl, rules.jsonl,
and each agent's memory files under memory/<agent>/, as files.
"""

from __future__ import annotations

FORMAT = "neotask-export"
# Bumped only when a field is removed, renamed or changes meaning: a reader
# ignores fields it does not know, so adding one keeps the version.
VERSION = 1

MANIFEST = "manifest.json"
AGENTS = "agents.json"
SESSIONS_DIR = "sessions/"
FACTS = "facts.jsonl"
MACROS = "macros.jsonl"
TASKS = "tasks.jsonl"
RULES = "rules.jsonl"
MEMORY_DIR = "memory/"  # memory/<agent>/<path in the workspace>

RECORD_FILES = (FACTS, MACROS, TASKS, RULES)

# What an archive may hold. Above these it is refused before anything is read
# into memory or written.
MAX_MEMBERS = 100_000
MAX_MEMBER_BYTES = 512 * 1024 * 1024
MAX_LINE_BYTES = 8 * 1024 * 1024
MAX_MANIFEST_BYTES = 64 * 1024 * 1024


def session_member(session_id: str) -> str:
    return f"{SESSIONS_DIR}{session_id}.jsonl"


def memory_member(agent: str, path: str) -> str:
    return f"{MEMORY_DIR}{agent}/{path}"
