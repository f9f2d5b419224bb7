"""What a load run (bench/load_chat.py) measured, and its report: stored events
lost or duplicated and the job cluster's work, counted in the database; the CPU
time of the server's processes, of the services and of the machine (Linux /proc);
the servers' stacks at a stall (py-spy); the run's row as a table or JSON."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, cast

from bench.load_clients import STORED_PER_TURN, Chat, ChatResult


def count_events(chats: list[Chat], results: list[ChatResult]) -> tuple[int, int]:
    """(lost, duplicated) stored events: each sent message must be stored once,
    and answered once, in its chat (whatever session the chat is in now)."""
    from memory.models import Event
    from sessions_app.models import Session

    lost = duplicated = 0
    for chat, result in zip(chats, results, strict=True):
        sessions = [
            str(pk) for pk in Session.objects.filter(key=chat.key).values_list("pk", flat=True)
        ]
        events = Event.objects.filter(session_id__in=sessions, event_type__in=STORED_PER_TURN)
        asked: Counter[str] = Counter()
        answers = 0
        for kind, text in events.values_list("event_type", "text"):
            if kind == "user_message":
                asked[text] += 1
            else:
                answers += 1
        stored_once = sum(1 for text in result.sent if asked[text])
        lost += len(result.sent) - stored_once + max(0, len(result.sent) - answers)
        duplicated += asked.total() - stored_once + max(0, answers - len(result.sent))
    return lost, duplicated


def count_jobs() -> dict[str, Any]:
    """What the job cluster did: its jobs, and the vectors they wrote."""
    from django.db.models import Count
    from django_q.models import Success

    done = dict(
        Success.objects.values_list("func").annotate(n=Count("id")).values_list("func", "n")
    )
    embedded = Success.objects.filter(func__startswith="memory.tasks.embed")
    return {
        "jobs": sum(done.values()),
        "jobs_by_func": done,
        "embedded_by_jobs": sum(job.result or 0 for job in embedded),
    }


def embeddings_done(seconds: float = 120) -> tuple[int, float]:
    """Wait until no stored event waits for its vector (memory.tasks.needs_embedding),
    at most `seconds`; (how many still wait, seconds waited)."""
    from django.db import connections

    from memory.tasks import needs_embedding

    started = time.monotonic()
    while (waiting := needs_embedding().count()) and time.monotonic() - started < seconds:
        time.sleep(0.2)
    connections.close_all()
    return waiting, time.monotonic() - started


def summarise(options: argparse.Namespace, results: list[ChatResult], seconds: float) -> dict:
    from memory.management.commands.memory_bench import percentiles

    latencies = sorted(x / 1000 for result in results for x in result.first_delta_ms)
    completed = sum(result.completed for result in results)
    shares = percentiles(latencies) if latencies else {}
    return {
        "profile": options.profile,
        "workers": options.workers,
        "chats": options.chats,
        "messages": options.messages,
        "turns": completed,
        "seconds": round(seconds, 1),
        "messages_per_s": round(completed / seconds, 1) if seconds else 0.0,
        "p50_ms": round(shares["p50_ms"]) if latencies else None,
        "p95_ms": round(shares["p95_ms"]) if latencies else None,
        "max_ms": round(latencies[-1] * 1000) if latencies else None,
        "errors": sum(len(result.errors) for result in results),
        "stalls": sum(len(result.stalls) for result in results),
        "unanswered": sum(len(result.sent) - result.completed for result in results),
        "frames_lost": sum(result.frames_lost for result in results),
        "error_samples": sorted({e for result in results for e in result.errors})[:5]
        + [f"stall: {stall}" for result in results for stall in result.stalls][:5],
    }


def print_table(row: dict) -> None:
    print(
        "profile   workers  chats x messages  messages/s  p50 ms  p95 ms  max ms  "
        "errors  stalls  frames lost  events lost  duplicated  server cpu ms/turn  "
        "of it workers  services  machine busy"
    )
    print(
        f"{row['profile']:<9} {row['workers']:>7}  "
        f"{row['chats']:>5} x {row['messages']:<8}  {row['messages_per_s']:>10}  "
        f"{row['p50_ms']!s:>6}  {row['p95_ms']!s:>6}  {row['max_ms']!s:>6}  "
        f"{row['errors']:>6}  {row['stalls']:>6}  {row['frames_lost']:>11}  {row['lost']:>11}  "
        f"{row['duplicated']:>10}  {row.get('server_cpu_ms_per_turn')!s:>18}  "
        f"{row.get('workers_cpu_ms_per_turn')!s:>13}  "
        f"{row.get('services_cpu_ms_per_turn')!s:>8}  {row.get('machine_busy_percent')!s:>11}%"
    )
    print(
        f"| {row['profile']} | {row['workers']} | "
        f"{row['chats']} \N{MULTIPLICATION SIGN} {row['messages']} | "
        f"{row['messages_per_s']} | {row['p50_ms']} ms | {row['p95_ms']} ms | {row['max_ms']} ms | "
        f"{row['errors']} | {row['stalls']} | {row['frames_lost']} | {row['lost']} | "
        f"{row['duplicated']} | {row.get('server_cpu_ms_per_turn')} ms | "
        f"{row.get('workers_cpu_ms_per_turn')} ms | {row.get('services_cpu_ms_per_turn')} ms |"
    )
    for sample in row["error_samples"]:
        print("  e.g.", sample, file=sys.stderr)


def cpu_seconds(processes: list[subprocess.Popen]) -> float:
    """User + system CPU time of these processes and all their descendants
    (Linux /proc; 0 elsewhere)."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        pid = int(stat.parent.name)
        children.setdefault(int(fields[1]), []).append(pid)
        times[pid] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [process.pid for process in processes]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


def service_cpu_seconds(names: tuple[str, ...] = ("postgres", "redis-server")) -> float:
    """User + system CPU time of the services' processes (PostgreSQL's backends
    and Redis), which run on the same cores and are part of a turn's price."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            comm, rest = stat.read_text().split(" (", 1)[1].rsplit(")", 1)
        except (OSError, ValueError):
            continue
        if comm.startswith(names):
            fields = rest.split()
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine since boot (/proc/stat)."""
    fields = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - idle) / tick, sum(fields) / tick


def dump_stacks(processes: list[subprocess.Popen], data_dir: Path) -> None:
    """Where every server process is, now: py-spy's dump of each (with its
    threads and idle frames), into the run's logs."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    with (data_dir / "stall-stacks.log").open("w") as out:
        for process in processes:
            argv = cast(list[str], process.args)  # always started with a list
            out.write(f"=== {' '.join(map(str, argv[-3:]))} (pid {process.pid})\n")
            out.flush()
            try:
                subprocess.run(
                    [py_spy, "dump", "--pid", str(process.pid), "--locals"],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=60,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                out.write(f"py-spy failed: {exc}\n")
    print(f"load_chat: a stall; stacks dumped to {data_dir / 'stall-stacks.log'}", file=sys.stderr)
