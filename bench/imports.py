"""Import throughput: an aidaemon database and an OpenClaw folder of generated
conversation, each imported for a fresh user, timed (wall and CPU) until its
events are stored and their embedding requests sent to the queue.

Both sources hold `--sessions` sessions of `--messages` messages (user and
assistant turns, a tool call and its result every tenth message); a quarter of
the aidaemon messages carry a legacy vector (kept, not requested). Runs
alternate between the two importers; each prints its median.

    .venv/bin/python bench/imports.py [--sessions 20] [--messages 1000] [--runs 3]

SQLite in a scratch data dir by default; with DATABASE_URL (and REDIS_URL) set,
that database, whose imported rows are deleted again.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

T0 = datetime(2025, 1, 1, tzinfo=UTC)
WORDS = (
    "the a garden dinner Lisbon report cat dentist trip book laptop marathon recipe "
    "Maya Omar tomorrow remind booked flights kitchen interview lunch weather"
).split()
AIDAEMON_SCHEMA = """
CREATE TABLE messages (
    id TEXT PRIMARY KEY, session_id TEXT NOT NULL, role TEXT NOT NULL, content TEXT,
    tool_call_id TEXT, tool_name TEXT, tool_calls_json TEXT, created_at TEXT NOT NULL,
    importance REAL NOT NULL DEFAULT 0.5, embedding BLOB, embedding_error TEXT,
    consolidated_at TEXT
);
"""


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30))).capitalize() + "."


def build_aidaemon(path: Path, sessions: int, messages: int, rng: random.Random) -> int:
    rows = []
    for s in range(sessions):
        for n in range(messages):
            role = "tool" if n % 10 == 9 else ("user" if n % 2 == 0 else "assistant")
            vector = None
            if n % 4 == 0:
                vector = json.dumps([rng.uniform(-0.1, 0.1) for _ in range(384)]).encode()
            rows.append(
                (
                    f"m{s}-{n}",
                    f"session-{s}",
                    role,
                    sentence(rng),
                    "call" if role == "tool" else None,
                    "terminal" if role == "tool" else None,
                    (T0 + timedelta(days=s, seconds=n)).isoformat(),
                    vector,
                )
            )
    with sqlite3.connect(path) as db:
        db.executescript(AIDAEMON_SCHEMA)
        db.executemany(
            "INSERT INTO messages (id, session_id, role, content, tool_call_id, tool_name, "
            "created_at, embedding) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
    db.close()
    return len(rows)


def build_openclaw(root: Path, sessions: int, messages: int, rng: random.Random) -> int:
    folder = root / "sessions"
    folder.mkdir(parents=True)
    events = 0
    for s in range(sessions):
        lines: list[dict[str, Any]] = [
            {"type": "session", "id": f"oc-{s}", "timestamp": T0.isoformat()}
        ]
        for n in range(messages):
            when = (T0 + timedelta(days=s, seconds=n)).isoformat()
            content: list[dict[str, Any]] = [{"type": "text", "text": sentence(rng)}]
            if n % 10 == 8:
                role, content = (
                    "assistant",
                    [{"type": "toolCall", "id": f"c{n}", "name": "terminal", "arguments": {}}],
                )
            elif n % 10 == 9:
                role = "toolResult"
            else:
                role = "user" if n % 2 == 0 else "assistant"
            message: dict[str, Any] = {"role": role, "content": content}
            if role == "toolResult":
                message.update(toolCallId=f"c{n - 1}", toolName="terminal")
            lines.append({"type": "message", "id": f"e{n}", "timestamp": when, "message": message})
            events += 1
        text = "".join(json.dumps(line) + "\n" for line in lines)
        (folder / f"oc-{s}.jsonl").write_text(text, encoding="utf-8")
    return events


def timed(run: Callable[[], Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        os.environ.update(
            NEOTASK_DATA_DIR=scratch,
            NEOTASK_CONFIG="",
            DJANGO_SETTINGS_MODULE="neotask_site.settings",
        )
        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from django.core.management import call_command

        from importers.aidaemon import import_aidaemon
        from importers.openclaw import import_openclaw
        from memory.models import Event
        from memory.tasks import EMBEDDING_REQUESTS

        call_command("migrate", verbosity=0)
        logging.getLogger("django-q").setLevel(logging.WARNING)
        rng = random.Random(7)
        database = Path(scratch) / "aidaemon.db"
        rows = build_aidaemon(database, options.sessions, options.messages, rng)
        folder = Path(scratch) / "openclaw"
        entries = build_openclaw(folder, options.sessions, options.messages, rng)
        sources = {
            "aidaemon": (import_aidaemon, database, rows),
            "openclaw": (import_openclaw, folder, entries),
        }
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in sources}
        for _ in range(options.runs):
            for name, (importer, path, count) in sources.items():
                user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:8]}")

                def run(importer: Any = importer, path: Path = path, user: Any = user) -> None:
                    importer(path, user)
                    EMBEDDING_REQUESTS.flush()  # what the sender thread would send next

                samples[name].append(timed(run))
                stored = Event.objects.filter(owner=user).count()
                assert stored >= count, f"{name}: {stored} of {count} events stored"
                Event.objects.filter(owner=user).delete()
                user.delete()
        for name, (_, _, count) in sources.items():
            wall = statistics.median(s[0] for s in samples[name])
            cpu = statistics.median(s[1] for s in samples[name])
            print(
                f"{name}: {count:,} messages in {options.sessions} sessions: median "
                f"{wall:.2f} s wall, {cpu:.2f} s CPU, {count / wall:,.0f} messages/s "
                f"({options.runs} runs: {', '.join(f'{s[0]:.2f}' for s in samples[name])} s)"
            )


if __name__ == "__main__":
    main()
