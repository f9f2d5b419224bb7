"""Backup and restore of an installation with N events: seconds and archive size.

Builds N events (with vectors, as embedded events have) and a few workspace files
in a scratch data dir (and, with DATABASE_URL set, a scratch PostgreSQL database
next to it), then times `manage.py backup` and `manage.py restore` into a fresh
data dir (and database) as separate processes, as a person runs them.

    .venv/bin/python bench/backup.py [--events 100000] [--files 200]
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/backup.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.processes import app_env  # noqa: E402

BATCH = 2000


def build(events: int, files: int) -> None:
    import django

    django.setup()
    import numpy as np
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from memory.recording import draft, record_many
    from memory.tasks import embedding_queue_paused
    from memory.vectors import EMBEDDING_DIM, pack
    from memory.workspace import DEFAULT_AGENT, workspace_dir

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench")
    rng = np.random.default_rng(7)
    with embedding_queue_paused():
        for offset in range(0, events, BATCH):
            batch = []
            for number in range(offset, min(events, offset + BATCH)):
                vector = rng.standard_normal(EMBEDDING_DIM).astype(np.float32)
                kind = "assistant_response" if number % 2 else "user_message"
                text = f"message {number}: " + " ".join(
                    rng.choice(["tea", "Lyon", "train", "budget", "garden", "meeting"], 12)
                )
                batch.append(
                    draft(
                        user,
                        f"bench:{number // 50}",
                        kind,
                        {"content": text},
                        embedding=pack(vector / np.linalg.norm(vector)),
                    )
                )
            record_many(batch)
    workspace = workspace_dir(user.pk, DEFAULT_AGENT)
    (workspace / "memory").mkdir(exist_ok=True)
    for number in range(files):
        (workspace / "memory" / f"note-{number}.md").write_text(f"# Note {number}\n" + "x" * 10_000)


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=200)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-backup-") as scratch:
        source = app_env(Path(scratch) / "source")
        os.environ.update(source, DJANGO_SETTINGS_MODULE="neotask_site.settings")
        started = time.perf_counter()
        build(options.events, options.files)
        built = time.perf_counter() - started
        manage = [sys.executable, "manage.py"]
        archive = Path(scratch) / "backup.tar"
        backup = timed([*manage, "backup", "--output", str(archive)], source)
        restore = timed([*manage, "restore", str(archive)], app_env(Path(scratch) / "target"))
        startup = timed([*manage, "check"], source)
        profile = "PostgreSQL" if source.get("DATABASE_URL") else "SQLite"
        print(
            f"{profile}, {options.events:,} events, {options.files} workspace files "
            f"(built in {built:.1f} s)\n"
            f"  backup  {backup:6.1f} s\n"
            f"  restore {restore:6.1f} s\n"
            f"  archive {archive.stat().st_size / 1e6:6.1f} MB\n"
            f"  (each includes Django's start-up, {startup:.1f} s)"
        )


if __name__ == "__main__":
    main()
