"""`python manage.py memory_bench --events N [--json] [--stages ...] [--samples N]`:
memory latency at scale.

Builds N events for one throw-away user, then times get_context (the query
already embedded, as in a turn; with and without its search branch), memory
search (with and without embedding the query) and each of its branches alone,
embedding throughput at batch 1 and 32, and the process RSS.

get_context is also measured against a floor: a brute-force numpy scan of the
same vectors (read from the database, each query's dot product with all of them
and the best 50 by np.argpartition), timed in the same run, taking turns with
get_context over the same queries so that a shared machine's load weighs on both
alike; the report gives get_context's p50 and p95 over the scan's, and the same
for the median CPU time of the process (which other processes move less).

Embedding N texts for real would take minutes at 100k, so the events reuse
the real embeddings of a pool of distinct generated sentences, each with a
little noise so that no two vectors are equal. Run it on a scratch data dir:

    NEOTASK_DATA_DIR=$(mktemp -d) sh -c 'python manage.py migrate -v0 &&
        python manage.py memory_bench --events 100000'
"""

from __future__ import annotations

import copy
import json
import random
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import F
from django.test import override_settings
from django.utils import timezone

from core.ownership import Owner
from core.progress import progress_bar
from memory import fulltext
from memory.copies import copies_of
from memory.embeddings import embed_text, embed_texts, get_model
from memory.evaluation import DatasetError, load_dataset, throwaway_user
from memory.models import Event, EventType
from memory.recording import draft, record_many
from memory.retrieval import get_context
from memory.search import CANDIDATES, search_memory
from memory.tasks import analyze_database
from memory.vector_index import index_for
from memory.vectors import EMBEDDING_DIM, pack, unpack
from memory.workspace import DEFAULT_AGENT

POOL = 2000
STAGES = (  # what is timed, in the order printed
    "get_context",
    "get_context_without_search",
    "search_with_embedding",
    "search_without_embedding",
    "vector_branch",
    "lexical_branch",
    "forget_dialog",  # what the forget dialog lists for a message (memory.copies)
)
SAMPLES = 200
REFERENCE_TOP = 50  # the numpy reference's top-k (memory search's candidates per branch)
INSERT_BATCH = 5000
PEOPLE = "Maya Ben Alice Omar Priya Lena Marco Yuki Sam Ines".split()
PLACES = "Lisbon Kyoto Berlin Nairobi Toronto Oslo Lima Hanoi Austin Porto".split()
THINGS = (
    "the quarterly report|a birthday dinner|the dentist appointment|the garden shed|"
    "a new laptop|the marathon training|piano lessons|the tax return|a hiking trip|"
    "the kitchen renovation|a job interview|the book club|a vegan recipe|the car service"
).split("|")
TEMPLATES = [
    "{p} said we should talk about {t} before we leave for {c}.",
    "Remind me that {t} is due next {d}.",
    "I had lunch with {p} in {c} and we discussed {t}.",
    "Can you summarise what I decided about {t}?",
    "My favourite memory of {c} is the evening with {p}.",
    "{p} prefers to handle {t} on {d} mornings.",
    "We booked flights to {c} for {t}.",
    "Note to self: ask {p} about {t}.",
]
DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
QUERIES = [
    "When is the dentist appointment?",
    "What did Maya say about the trip?",
    "Which city are we flying to?",
    "What did I decide about the kitchen renovation?",
    "Who handles the tax return?",
    "book club plans with Priya",
    "marathon training schedule",
    "dinner in Kyoto",
]


def sentence(rng: random.Random) -> str:
    return rng.choice(TEMPLATES).format(
        p=rng.choice(PEOPLE), c=rng.choice(PLACES), t=rng.choice(THINGS), d=rng.choice(DAYS)
    )


def without_search_branch() -> dict[str, Any]:
    """The settings with aidaemon's three branches only."""
    neotask = copy.deepcopy(settings.NEOTASK)
    neotask["memory"]["search_limit"] = 0
    return neotask


def p50_p95(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.95) - 1]


def percentiles(samples: list[float]) -> dict[str, float]:
    p50, p95 = p50_p95(samples)
    return {"p50_ms": round(p50 * 1000, 2), "p95_ms": round(p95 * 1000, 2)}


def ratios(samples: list[float], floor: list[float]) -> dict[str, float]:
    """The p50 and p95 of `samples` over those of `floor`."""
    return {
        name: round(mine / theirs, 2)
        for name, mine, theirs in zip(("p50", "p95"), p50_p95(samples), p50_p95(floor), strict=True)
    }


def timed(call: Any, count: int) -> list[float]:
    samples = []
    for number in range(count):
        started = time.perf_counter()
        call(number)
        samples.append(time.perf_counter() - started)
    return samples


def timed_in_turns(
    calls: dict[str, Callable[[int], Any]], count: int
) -> dict[str, tuple[list[float], list[float]]]:
    """Each call timed `count` times, one of each in turn, so that a ratio of
    their timings is measured under the same load: (wall times, CPU times of the
    whole process, its other threads' work for the call included)."""
    samples: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in calls}
    for number in range(count):
        for name, call in calls.items():
            started, cpu = time.perf_counter(), time.process_time()
            call(number)
            samples[name][0].append(time.perf_counter() - started)
            samples[name][1].append(time.process_time() - cpu)
    return samples


def stored_vectors(owner: Owner, agent: str = DEFAULT_AGENT) -> np.ndarray:
    """The owner's event vectors as the database holds them, one column each
    (of numpy's two layouts, the one whose matrix-vector product is faster)."""
    blobs = (
        Event.objects.filter(owner=owner, agent=agent, embedding__isnull=False)
        .values_list("embedding", flat=True)
        .iterator(2000)
    )
    rows = np.array([unpack(blob) for blob in blobs], dtype=np.float32)
    return np.ascontiguousarray(rows.reshape(-1, EMBEDDING_DIM).T)


def numpy_top(vectors: np.ndarray, query: np.ndarray, k: int = REFERENCE_TOP) -> np.ndarray:
    """The brute-force reference: every vector's dot product with the query, and
    the columns of the best k (in no order, as np.argpartition leaves them)."""
    scores = query @ vectors
    if len(scores) <= k:
        return np.arange(len(scores))
    return np.argpartition(-scores, k - 1)[:k]


def against_numpy(
    owner: Owner, context: Callable[[int], Any], queries: np.ndarray, count: int = SAMPLES
) -> dict[str, Any]:
    """get_context (`context`) and the numpy reference over the owner's vectors,
    timed in turns over the same queries, and the ratio of the two."""
    reference = stored_vectors(owner)
    samples = timed_in_turns(
        {
            "get_context": context,
            "numpy_reference": lambda n: numpy_top(reference, queries[n % len(queries)]),
        },
        count,
    )
    (context_wall, context_cpu), (scan_wall, scan_cpu) = samples.values()
    return {
        "get_context": {**percentiles(context_wall), "cpu_p50_ms": cpu_median(context_cpu)},
        "numpy_reference": {
            "vectors": reference.shape[1],
            **percentiles(scan_wall),
            "cpu_p50_ms": cpu_median(scan_cpu),
        },
        "get_context_to_numpy": {
            **ratios(context_wall, scan_wall),
            "cpu_p50": round(statistics.median(context_cpu) / statistics.median(scan_cpu), 2),
        },
    }


def cpu_median(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


class Command(BaseCommand):
    help = "Benchmark get_context, memory search and embedding on N generated events."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--events", type=int, default=10_000)
        parser.add_argument("--json", action="store_true", dest="as_json")
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--samples", type=int, default=SAMPLES, help="calls timed per stage")
        parser.add_argument(
            "--stages",
            nargs="+",
            choices=STAGES,
            default=STAGES,
            help="time only these (get_context comes with the numpy reference)",
        )
        parser.add_argument(
            "--texts",
            type=Path,
            help="a memory_eval dataset whose turns and questions to use instead of "
            "generated sentences (real conversation has a far larger vocabulary)",
        )

    def handle(
        self,
        *args: Any,
        events: int,
        as_json: bool,
        seed: int,
        texts: Path | None,
        samples: int,
        stages: list[str],
        **options: Any,
    ) -> None:
        rng = random.Random(seed)
        noise = np.random.default_rng(seed)
        quiet = as_json
        get_model()
        started = time.perf_counter()
        queries = QUERIES
        if texts is None:
            pool_texts = list(dict.fromkeys(sentence(rng) for _ in range(POOL * 3)))[:POOL]
        else:
            try:
                conversations = load_dataset(texts)
            except DatasetError as exc:
                raise CommandError(str(exc)) from None
            pool_texts = [turn["text"] for c in conversations for turn in c["turns"]]
            queries = [q["question"] for c in conversations for q in c["questions"]]
        pool_vectors = embed_texts(pool_texts)
        report: dict[str, Any] = {"events": events, "texts": str(texts or "generated")}
        with throwaway_user() as user:
            self.build(user, events, pool_texts, pool_vectors, rng, noise, quiet)
            analyze_database()  # what the hourly job does for a grown database
            report["build_seconds"] = round(time.perf_counter() - started, 1)
            index = index_for(user.pk)
            started = time.perf_counter()
            index.search(pool_vectors[0], 1)  # first load of the vector index
            report["index_load_seconds"] = round(time.perf_counter() - started, 2)
            vectors = embed_texts(queries)
            session = f"bench:{events - 1}"

            def context(n: int) -> None:
                get_context(
                    user, session, queries[n % len(queries)], query_vector=vectors[n % len(queries)]
                )

            calls: dict[str, Callable[[int], Any]] = {
                "vector_branch": lambda n: index.search(
                    vectors[n % len(queries)], CANDIDATES, contextual=True
                ),
                "lexical_branch": lambda n: fulltext.search(
                    user.pk,
                    DEFAULT_AGENT,
                    queries[n % len(queries)],
                    CANDIDATES,
                    memories=index.count(),
                ),
                "search_with_embedding": lambda n: search_memory(
                    user, queries[n % len(queries)] + f" {n}"
                ),
                "search_without_embedding": lambda n: search_memory(
                    user, queries[n % len(queries)], query_vector=vectors[n % len(queries)]
                ),
                "forget_dialog": lambda n: copies_of(user, f"event:{said[n % len(said)]}"),
            }
            said = list(
                Event.objects.filter(owner=user).order_by("?").values_list("pk", flat=True)[:50]
            )
            if "get_context" in stages:
                report.update(against_numpy(user, context, vectors, samples))
            if "get_context_without_search" in stages:
                with override_settings(NEOTASK=without_search_branch()):
                    report["get_context_without_search"] = percentiles(timed(context, samples))
            for name, call in calls.items():
                if name in stages:
                    report[name] = percentiles(timed(call, samples))
        sentences = [sentence(rng) for _ in range(1024)]
        started = time.perf_counter()
        for text in sentences[:256]:
            embed_text(text)
        report["embed_batch_1_per_s"] = round(256 / (time.perf_counter() - started), 1)
        started = time.perf_counter()
        embed_texts(sentences, batch_size=32)
        report["embed_batch_32_per_s"] = round(1024 / (time.perf_counter() - started), 1)
        report["rss_mb"] = rss_mb()
        if quiet:
            self.stdout.write(json.dumps(report, indent=2))
        else:
            self.print_table(report)

    def build(
        self,
        user: Owner,
        count: int,
        texts: list[str],
        vectors: np.ndarray,
        rng: random.Random,
        noise: Any,
        quiet: bool,
    ) -> None:
        start = timezone.now() - timedelta(minutes=count)
        with progress_bar(self, total=count, unit="event", disable=quiet) as bar:
            for offset in range(0, count, INSERT_BATCH):
                batch: list[Event] = []
                for number in range(offset, min(count, offset + INSERT_BATCH)):
                    pick = rng.randrange(len(texts))
                    vector = vectors[pick] + noise.normal(0, 0.02, vectors.shape[1])
                    vector /= np.linalg.norm(vector)
                    kind = EventType.ASSISTANT_RESPONSE if number % 2 else EventType.USER_MESSAGE
                    event = draft(
                        user,
                        f"bench:{number // 50 * 50 + 49}",
                        kind,
                        {"content": texts[pick]},
                        created_at=start + timedelta(minutes=number),
                        embedding=pack(vector),
                    )
                    if number % 997 == 0:
                        event.importance = 0.9  # a few for the relevance branch
                    batch.append(event)
                record_many(batch)
                bar.update(len(batch))
        # Stamped as if each was embedded when it was said: what is timed is a settled
        # memory, not the minute after a bulk write, in which every query re-reads the
        # stamps of all that was just stored (memory/vector_sync.py).
        Event.objects.filter(owner=user).update(embedded_at=F("created_at"))

    def print_table(self, report: dict[str, Any]) -> None:
        self.stdout.write(
            f"{report['events']:,} events of {report['texts']} text "
            f"(built in {report['build_seconds']} s; "
            f"vector index loaded in {report['index_load_seconds']} s)"
        )
        for name in (*STAGES, "numpy_reference"):
            numbers = report.get(name)
            if numbers is not None:
                self.stdout.write(
                    f"  {name:<26} p50 {numbers['p50_ms']:>7} ms   p95 {numbers['p95_ms']:>7} ms"
                )
        times = report.get("get_context_to_numpy")
        if times is not None:
            self.stdout.write(
                f"  get_context / numpy reference: {times['p50']}x at p50, {times['p95']}x at p95,"
                f" {times['cpu_p50']}x in CPU time"
            )
        self.stdout.write(
            f"  embedding: {report['embed_batch_1_per_s']}/s at batch 1, "
            f"{report['embed_batch_32_per_s']}/s at batch 32"
        )
        self.stdout.write(f"  RSS: {report['rss_mb']} MB")
