"""The team profile's memory search at scale: pgvector over 1M events.

Loads N events over many owners (one holding 10 % of them, one 1 %) into a
database of its own that is kept between runs (`--reload` loads it again), with
MiniLM-shaped vectors: real MiniLM embeddings of LoCoMo's turns as topic centres,
each owner talking about a few dozen of them, each event a centre plus noise
(cosine ~0.7 to it), its text the centre's. Then prints, for the owners of 10 %,
1 % and ~0.1 % of the rows: recall@10 of the HNSW search against an exact scan
(several ef_search values, and without iterative scan), p50/p95 of the vector
search, of the memory search (one statement, memory.pgvector.fused.hybrid) and of
get_context, the HNSW build time, and a web worker's RSS before and after a
user's first search, with pgvector and with the numpy index.

    nice -n 10 .venv/bin/python bench/pgvector.py --events 1000000 --owners 1000
    nice -n 10 .venv/bin/python bench/pgvector.py --partitions 8   # HASH(owner_id) copy

`--partitions N` copies the events into a table partitioned by HASH(owner_id)
(docs/deploy.md's DDL), builds its indexes and measures it as well.
The PostgreSQL backends doing the heavy work are reniced like this process.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import struct
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/neotask_bench"
# The public evaluation data beside the checkout (../shared/eval), never copied into it.
EVAL = Path(os.environ.get("NEOTASK_EVAL_DIR", ROOT.parent / "shared" / "eval"))
NOISE = 0.052  # per dimension: cosine ~0.7 between an event and its topic centre
TOPICS_PER_OWNER = 40
SESSION_EVENTS = 20
PARTITIONED = "events_by_owner"


def setup(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        if admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            admin.execute(f'CREATE DATABASE "{name}"')
    os.environ.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="neotask_site.settings")
    os.environ.setdefault("NEOTASK_CONFIG", "")
    os.environ.setdefault("NEOTASK_DATA_DIR", "/tmp/neotask-bench-pgvector")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def nice_backend() -> None:
    """The server process serving this connection runs as nice as this one."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    subprocess.run(["renice", "-n", str(os.nice(0)), "-p", str(pid)], capture_output=True)


def centres() -> tuple[list[str], np.ndarray]:
    """Real MiniLM vectors of real chat turns: the topics events are drawn around."""
    from memory.embeddings import embed_texts

    texts: list[str] = []
    for dataset in sorted(EVAL.glob("*.json")):
        for conversation in json.loads(dataset.read_text())["conversations"]:
            texts += [turn["text"] for turn in conversation["turns"] if turn["text"].strip()]
    if not texts:
        sys.exit(f"no chat turns in {EVAL}/*.json: set NEOTASK_EVAL_DIR to the evaluation data")
    texts = sorted(set(texts))[:2000]
    return texts, embed_texts(texts)


def near(rng: np.random.Generator, centre: np.ndarray, count: int) -> np.ndarray:
    vectors = centre + rng.normal(0, NOISE, (count, centre.shape[-1])).astype(np.float32)
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def owner_sizes(events: int, owners: int) -> list[int]:
    big, mid = events // 10, events // 100
    rest = owners - 2
    small = [(events - big - mid) // rest] * rest
    small[0] += events - big - mid - sum(small)
    return [big, mid, *small]


def load(events: int, owners: int) -> None:
    from django.contrib.auth.models import User
    from django.db import connection

    started = time.perf_counter()
    texts, topics = centres()
    print(f"{len(texts)} topic centres embedded", flush=True)
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE events, events_condensed, facts CASCADE")
        cursor.execute(f"DROP TABLE IF EXISTS {PARTITIONED}")
        cursor.execute("DROP INDEX IF EXISTS events_embedding_hnsw")
        cursor.execute("ALTER TABLE events DISABLE TRIGGER events_embedding_vec")
    User.objects.filter(username__startswith="bench-").delete()
    users = User.objects.bulk_create(User(username=f"bench-{i}") for i in range(owners))
    rng = np.random.default_rng(7)
    pick = random.Random(7)
    base = datetime(2026, 1, 1, tzinfo=UTC)
    header = struct.pack(">HH", topics.shape[1], 0)
    columns = (
        "owner_id, agent, session_id, event_type, data, text, speaker, search_key, "
        "search_context, key_version, created_at, importance, embedding, embedded_at, "
        "embedding_attempts, embedding_vec"
    )
    types = ["int4", "text", "text", "text", "bytea", "text", "text", "text", "text", "int2"]
    types += ["timestamptz", "float8", "bytea", "timestamptz", "int2", "bytea"]
    raw_cursor = connection.cursor().cursor
    for user, size in zip(users, owner_sizes(events, owners), strict=True):
        mine = rng.choice(len(texts), TOPICS_PER_OWNER, replace=False)
        chosen = rng.choice(mine, size)
        vectors = np.empty((size, topics.shape[1]), dtype=np.float32)
        for topic in np.unique(chosen):
            where = np.flatnonzero(chosen == topic)
            vectors[where] = near(rng, topics[topic], len(where))
        with raw_cursor.copy(f"COPY events ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(types)
            for i in range(size):
                turn = i % 2
                when = base + timedelta(minutes=i)
                vector = vectors[i]
                copy.write_row(
                    (
                        user.pk,
                        "main",
                        f"s{i // SESSION_EVENTS}",
                        ("user_message", "assistant_response")[turn],
                        b"\x01{}",  # jsonb's binary form
                        f"{texts[chosen[i]]} {pick.choice(texts).split(' ')[0]}",
                        ("Ann", "Bob")[turn],
                        "",
                        "",
                        0,
                        when,
                        0.5,
                        vector.astype("<f4").tobytes(),
                        when,
                        0,
                        header + vector.astype(">f4").tobytes(),
                    )
                )
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE events ENABLE TRIGGER events_embedding_vec")
        cursor.execute("VACUUM ANALYZE events")
    print(f"loaded {events} events in {time.perf_counter() - started:.0f} s", flush=True)


def build_index(table: str, with_: str) -> dict[str, Any]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX IF EXISTS {table}_embedding_hnsw")
        cursor.execute("SET maintenance_work_mem = '3GB'")
        cursor.execute("SET max_parallel_maintenance_workers = 1")
        started = time.perf_counter()
        cursor.execute(
            f"CREATE INDEX {table}_embedding_hnsw ON {table} "
            f"USING hnsw (embedding_vec vector_cosine_ops) WITH ({with_})"
        )
        seconds = time.perf_counter() - started
        cursor.execute("SELECT pg_total_relation_size(%s)", [f"{table}_embedding_hnsw"])
        size = cursor.fetchone()[0]
    print(f"HNSW on {table} ({with_}): {seconds:.0f} s, {size / 1e9:.2f} GB", flush=True)
    return {"seconds": round(seconds), "bytes": size, "with": with_}


def partition(count: int) -> dict[str, Any]:
    """docs/deploy.md's layout: the events by HASH(owner_id), the key (id, owner_id)."""
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {PARTITIONED}")
        cursor.execute(
            f"CREATE TABLE {PARTITIONED} (LIKE events INCLUDING DEFAULTS INCLUDING GENERATED, "
            f"PRIMARY KEY (id, owner_id)) PARTITION BY HASH (owner_id)"
        )
        for remainder in range(count):
            cursor.execute(
                f"CREATE TABLE {PARTITIONED}_{remainder} PARTITION OF {PARTITIONED} "
                f"FOR VALUES WITH (MODULUS {count}, REMAINDER {remainder})"
            )
        columns = ", ".join(
            c.name
            for c in connection.introspection.get_table_description(cursor, "events")
            if c.name != "search_document"
        )
        cursor.execute(f"INSERT INTO {PARTITIONED} ({columns}) SELECT {columns} FROM events")
        cursor.execute(
            f"CREATE INDEX {PARTITIONED}_session ON {PARTITIONED} (owner_id, session_id, id)"
        )
        cursor.execute(
            f"CREATE INDEX {PARTITIONED}_search_document ON {PARTITIONED} "
            "USING GIN (search_document) WHERE search_document IS NOT NULL"
        )
        cursor.execute(f"VACUUM ANALYZE {PARTITIONED}")
    print(f"copied into {count} partitions in {time.perf_counter() - started:.0f} s", flush=True)
    return {"partitions": count, "copy_seconds": round(time.perf_counter() - started)}


def owners() -> list[tuple[str, Any, int]]:
    from django.contrib.auth.models import User
    from django.db.models import Count

    found = (
        User.objects.filter(username__startswith="bench-")
        .annotate(events=Count("event"))
        .order_by("-events")
    )
    rows = list(found)
    total = sum(u.events for u in rows)
    chosen = [rows[0], rows[1], rows[len(rows) // 2]]
    return [(f"{100 * u.events / total:.1f} %", u, u.events) for u in chosen]


def stored_vectors(owner_id: int) -> tuple[np.ndarray, np.ndarray]:
    from memory.models import Event

    rows = Event.objects.filter(owner_id=owner_id, agent="main").values_list("id", "embedding")
    ids, vectors = [], []
    for row_id, blob in rows.iterator(5000):
        ids.append(row_id)
        vectors.append(np.frombuffer(bytes(blob), dtype="<f4"))
    return np.array(ids), np.vstack(vectors)


def percentiles(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(1000 * float(np.percentile(samples, 50)), 1),
        "p95_ms": round(1000 * float(np.percentile(samples, 95)), 1),
    }


def measure(table: str, queries: int, ef_values: list[int]) -> dict[str, Any]:
    from memory.pgvector import fused
    from memory.pgvector import queries as pgvector
    from memory.retrieval import get_context
    from memory.search import search_memory

    rng = np.random.default_rng(11)
    default_ef = pgvector.EF_SEARCH  # the memory search and get_context run with it
    results: dict[str, Any] = {}
    for label, user, size in owners():
        ids, vectors = stored_vectors(user.pk)
        asked = near(rng, vectors[rng.choice(len(vectors), queries)], 1)
        words = [text.split()[:6] for text in [f"q{i}" for i in range(queries)]]
        exact = [set(ids[np.argsort(-(vectors @ q), kind="stable")[:10]].tolist()) for q in asked]
        index = pgvector.PgIndex(user.pk, "main", table)
        figures: dict[str, Any] = {"events": size}
        for iterative in ("relaxed_order", "off"):
            for ef in ef_values if iterative != "off" else [100]:
                pgvector.ITERATIVE_SCAN, pgvector.EF_SEARCH = iterative, ef
                found, times = [], []
                for q in asked:
                    started = time.perf_counter()
                    found.append({i for i, _ in index.search(q, 10)})
                    times.append(time.perf_counter() - started)
                recall = np.mean([len(f & e) / 10 for f, e in zip(found, exact, strict=True)])
                key = f"ef_search {ef}" + ("" if iterative != "off" else ", no iterative scan")
                figures[key] = {"recall@10": round(float(recall), 3), **percentiles(times)}
                print(f"{table} owner {label} ({size}) {key}: {figures[key]}", flush=True)
        pgvector.ITERATIVE_SCAN, pgvector.EF_SEARCH = "relaxed_order", default_ef
        texts = stored_texts(user.pk, queries)
        hybrid_times, context_times = [], []
        for q, text in zip(asked, texts, strict=True):
            started = time.perf_counter()
            if table == "events":
                search_memory(user, text, k=10, query_vector=q)
            else:
                from memory.fulltext import terms

                fused.hybrid(index, terms(text), q, 50, 0.6)
            hybrid_times.append(time.perf_counter() - started)
            if table == "events":
                started = time.perf_counter()
                get_context(user, "s0", text, query_vector=q)
                context_times.append(time.perf_counter() - started)
        figures["memory search"] = percentiles(hybrid_times)
        if context_times:
            figures["get_context"] = percentiles(context_times)
        print(f"{table} owner {label}: {figures['memory search']} {figures.get('get_context')}")
        results[label] = figures
        del words
    return results


def stored_texts(owner_id: int, count: int) -> list[str]:
    from memory.models import Event

    texts = list(Event.objects.filter(owner_id=owner_id).values_list("text", flat=True)[:count])
    return [" ".join(t.split()[:8]) for t in texts]


def explain_partitioned(user_id: int) -> str:
    from django.db import connection

    from memory.fulltext import terms
    from memory.pgvector import fused
    from memory.pgvector import queries as pgvector

    index = pgvector.PgIndex(user_id, "main", PARTITIONED)
    vector = np.zeros(384, dtype=np.float32)
    vector[0] = 1
    sql, params = fused.hybrid_statement(index, terms("dinner with friends"), vector, 50, 0.6)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def first_search_rss(backend: str) -> None:
    """In a fresh process: RSS before and after the biggest owner's first search."""
    from memory.search import search_memory
    from memory.vector_index import NumpyIndex

    user = owners()[0][1]
    vector = np.zeros(384, dtype=np.float32)
    vector[3] = 1
    search_memory(user, "warm up", k=10, query_vector=vector, files=False, branch="lexical")
    before = rss_mb()
    held = 0
    if backend == "numpy":
        index = NumpyIndex(user.pk, "main")
        index.search(vector, 10, contextual=True)
        held = index.size
    else:
        search_memory(user, "dinner with friends", k=10, query_vector=vector)
    after = rss_mb()
    print(json.dumps({"backend": backend, "before_mb": before, "after_mb": after, "held": held}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--owners", type=int, default=1000)
    parser.add_argument("--reload", action="store_true", help="load the events again")
    parser.add_argument("--hnsw", help="rebuild the HNSW index WITH this, e.g. 'm = 32, ...'")
    parser.add_argument("--partitions", type=int, help="measure a HASH(owner_id) copy too")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--ef", default="40,100,200,400", help="ef_search values to measure")
    parser.add_argument("--rss", choices=["numpy", "pgvector"], help=argparse.SUPPRESS)
    parser.add_argument("--skip-flat", action="store_true", help="only the partitioned table")
    options = parser.parse_args()
    os.nice(10 - os.nice(0)) if os.nice(0) < 10 else None
    setup(options.database_url)
    if options.rss:
        first_search_rss(options.rss)
        return
    nice_backend()
    from memory.models import Event

    report: dict[str, Any] = {}
    if options.reload or Event.objects.count() != options.events:
        load(options.events, options.owners)
        report["hnsw"] = build_index("events", options.hnsw or "m = 16, ef_construction = 64")
    elif options.hnsw:
        report["hnsw"] = build_index("events", options.hnsw)
    ef_values = [int(v) for v in options.ef.split(",")]
    if not options.skip_flat:
        report["events"] = measure("events", options.queries, ef_values)
    if options.partitions:
        report["partitioned"] = partition(options.partitions)
        report["partitioned"]["hnsw"] = build_index(
            PARTITIONED, options.hnsw or "m = 16, ef_construction = 64"
        )
        report["partitioned"]["figures"] = measure(PARTITIONED, options.queries, ef_values)
        report["partitioned"]["explain"] = explain_partitioned(owners()[0][1].pk)
        print(report["partitioned"]["explain"])
    for backend in ("pgvector", "numpy"):
        script = [sys.executable, __file__, "--rss", backend]
        script += ["--database-url", options.database_url]
        done = subprocess.run(script, capture_output=True, text=True, check=True)
        report[f"rss {backend}"] = json.loads(done.stdout.strip().splitlines()[-1])
        print(report[f"rss {backend}"], flush=True)
    print(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
