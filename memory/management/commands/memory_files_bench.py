"""`python manage.py memory_files_bench [--files 1000] [--json]`: memory file indexing at scale.

Writes a markdown workspace (by default 1,000 files, about 5 MB) for a throw-away user
in a temporary data dir, then times: indexing it from scratch (chunking and embedding
every chunk with the real model), re-indexing after a one-file edit, and
`search_files` latency (p50/p95; the query already embedded, the cheap change check of
the whole workspace included) with the numpy index.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.test import override_settings

from core.ownership import Owner
from memory.embeddings import embed_texts
from memory.evaluation import throwaway_user
from memory.files.indexing import index_workspace
from memory.files.search import forget_chunk_indexes, search_files
from memory.management.commands.memory_bench import percentiles
from memory.models import MemoryChunk
from memory.workspace import DEFAULT_AGENT, workspace_dir

FILE_BYTES = 5000
SAMPLES = 200
TOPICS = "garden budget travel health recipes reading work family music car".split()
WORDS = (
    "plan note remember call buy fix visit book schedule review budget idea list meeting "
    "friend doctor train flight dinner garden paint letter gift invoice password backup"
).split()
QUERIES = [
    "when is the next doctor visit?",
    "what did I plan for the garden?",
    "which train do we take?",
    "ideas for a birthday gift",
    "how much is left in the budget?",
    "the recipe with lentils",
    "what music was recommended?",
    "car service appointment",
]


def markdown_file(rng: random.Random, number: int) -> str:
    lines = [f"# {rng.choice(TOPICS).title()} notes {number}"]
    size = len(lines[0])
    while size < FILE_BYTES:
        if rng.random() < 0.08:
            line = f"\n## {rng.choice(TOPICS).title()} {rng.randrange(100)}"
        else:
            line = "- " + " ".join(rng.choice(WORDS) for _ in range(rng.randrange(6, 16))) + "."
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n"


class Command(BaseCommand):
    help = "Time memory file indexing (from scratch, after a one-file edit) and search."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--files", type=int, default=1000)
        parser.add_argument("--json", action="store_true", help="print the numbers as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        with (
            tempfile.TemporaryDirectory(prefix="neotask-files-bench-") as data_dir,
            override_settings(DATA_DIR=Path(data_dir)),
            throwaway_user() as user,
        ):
            results = self.run(user, options["files"])
            forget_chunk_indexes()
        if options["json"]:
            self.stdout.write(json.dumps(results, indent=2))
            return
        for name, value in results.items():
            self.stdout.write(f"{name:32} {value}")

    def run(self, user: Owner, count: int) -> dict[str, Any]:
        rng = random.Random(7)
        workspace = workspace_dir(user.pk, DEFAULT_AGENT)
        (workspace / "memory").mkdir(exist_ok=True)
        total = 0
        for number in range(count):
            text = markdown_file(rng, number)
            (workspace / "memory" / f"note-{number:04d}.md").write_text(text)
            total += len(text.encode())
        embed_texts(["warm up"])  # the model load is not indexing time

        started = time.perf_counter()
        scratch = index_workspace(user)
        from_scratch = time.perf_counter() - started

        edited = workspace / "memory" / f"note-{count // 2:04d}.md"
        edited.write_text(edited.read_text() + "- the door code is 4711.\n")
        started = time.perf_counter()
        after_edit = index_workspace(user)
        one_edit = time.perf_counter() - started

        started = time.perf_counter()
        unchanged = index_workspace(user)
        check = time.perf_counter() - started

        vectors = embed_texts(QUERIES)
        searches = {}
        for backend in backends():
            with using_backend(backend):
                search_files(user, DEFAULT_AGENT, vectors[0], 10)  # loads the index
                latencies = []
                for n in range(SAMPLES):
                    started = time.perf_counter()
                    search_files(user, DEFAULT_AGENT, vectors[n % len(QUERIES)], 10)
                    latencies.append(time.perf_counter() - started)
            for name, value in percentiles(latencies).items():
                searches[f"search_{backend}_{name}"] = value
        return {
            "files": count,
            "workspace_mb": round(total / 1e6, 2),
            "chunks": MemoryChunk.objects.filter(owner=user).count(),
            "index_from_scratch_s": round(from_scratch, 1),
            "chunks_embedded_from_scratch": scratch.chunks_embedded,
            "index_after_one_edit_ms": round(one_edit * 1000, 1),
            "chunks_embedded_after_edit": after_edit.chunks_embedded,
            "unchanged_check_ms": round(check * 1000, 1),
            "unchanged_files_read": unchanged.files_changed,
            **searches,
        }


def backends() -> list[str]:
    """numpy always; LanceDB when its plugin is installed."""
    try:
        import lancedb  # noqa: F401
    except ImportError:
        return ["numpy"]
    return ["numpy", "lancedb"]


@contextmanager
def using_backend(backend: str) -> Iterator[None]:
    saved = settings.NEOTASK
    settings.NEOTASK = {**saved, "memory": {**saved["memory"], "vector_backend": backend}}
    forget_chunk_indexes()
    try:
        yield
    finally:
        settings.NEOTASK = saved
        forget_chunk_indexes()
