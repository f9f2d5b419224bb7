"""Load: many concurrent websocket chats against real daphne workers, scripted LLM.

Every chat has a user of its own and sends its messages one after another,
each after the previous answer's `done`. Chats are spread round-robin over the
daphne workers; a job cluster embeds the stored messages meanwhile, as in a
real deployment. Measured: completed turns per second of wall time, the time
from sending a message to its first streamed delta (which includes the
scripted LLM's --interval before its first delta), errors (error frames,
turns not completed, disconnects), frames lost (each turn must stream all the
scripted deltas and the events of its message and answer), and, counted in the
database afterwards, stored events lost or duplicated (a user message and an
answer per turn). Loopback only; bounded in count and by --timeout (exit code
3 when exceeded). Exit code 1 when anything was an error, lost or duplicated.

    .venv/bin/python bench/load_chat.py --profile team      # 100 chats x 20, 2 workers
    .venv/bin/python bench/load_chat.py --profile embedded  # 20 chats x 20, 1 worker
    .venv/bin/python bench/load_chat.py --profile team --repeat 10   # stalls over 10 runs

A stall is a turn that gets no frame for 30 s; at the first stall of a run the
stacks of every server process are dumped with py-spy (if installed) into the
run's kept logs, to show where they wait.

The team profile uses DATABASE_URL and REDIS_URL (default: the local
PostgreSQL and Redis of `make test-team`) and creates a fresh database next to
DATABASE_URL's, dropped at exit. The embedded profile uses SQLite in a
temporary data dir and the in-memory channel layer, which serves one process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TEAM_DEFAULTS = {
    "DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/neotask",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
}
STORED_PER_TURN = ("user_message", "assistant_response")
STAMP = re.compile(r"\[\d+@\d+\]")
TURN_TIMEOUT = 120.0  # seconds without a frame before a chat gives up
STALL_SECONDS = 30.0  # seconds without a frame that count as a stall


class TimeUp(Exception):
    pass


@dataclass(frozen=True)
class Chat:
    cookie: str
    key: str


@dataclass
class ChatResult:
    sent: list[str] = field(default_factory=list)
    first_delta_ms: list[float] = field(default_factory=list)
    completed: int = 0
    frames_lost: int = 0
    errors: list[str] = field(default_factory=list)
    stalls: list[str] = field(default_factory=list)


# Called at a stall (once per run): dumps the servers' stacks.
on_stall: list[Any] = []


def message_text(chat: int, number: int) -> str:
    # Unique per message, so the database count can tell lost from duplicated.
    return f"Hello from chat {chat}, message {number}."


def prepare(chats: int, warmups: int) -> tuple[list[Chat], list[Chat]]:
    """A fresh database with one user, login cookie and chat per load chat, and
    one more per worker for its warm-up turn."""
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore
    from django.core.management import call_command
    from django.db import connections

    from sessions_app.chat import start_chat

    call_command("migrate", verbosity=0)

    def chat_for(name: str) -> Chat:
        user = get_user_model().objects.create_user(name)  # no password: no slow hashing
        store = SessionStore()
        store[SESSION_KEY] = str(user.pk)
        store["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
        store["_auth_user_hash"] = user.get_session_auth_hash()
        store.create()
        return Chat(f"{settings.SESSION_COOKIE_NAME}={store.session_key}", start_chat(user).key)

    load = [chat_for(f"load{number}") for number in range(chats)]
    warm = [chat_for(f"warmup{number}") for number in range(warmups)]
    connections.close_all()
    return load, warm


async def one_chat(url: str, chat: Chat, number: int, messages: int, deltas: int) -> ChatResult:
    import websockets

    result = ChatResult()
    waiting_for = "the connection"
    try:
        async with websockets.connect(
            f"{url}/ws/chat/{chat.key}/",
            additional_headers={"Cookie": chat.cookie, "Origin": "http://127.0.0.1"},
            max_size=2**20,
            open_timeout=TURN_TIMEOUT,  # a browser waits, too: slow is measured, not an error
        ) as socket:
            for message in range(messages):
                text = message_text(number, message)
                started = time.perf_counter()
                await socket.send(json.dumps({"type": "message", "text": text}))
                result.sent.append(text)
                waiting_for = f"the answer to message {message}"
                first_delta: float | None = None
                streamed: set[str] = set()
                stored: set[str] = set()
                while True:
                    frame = json.loads(
                        await receive(socket, result, f"chat {number} {waiting_for}")
                    )
                    if frame["type"] == "delta":
                        if first_delta is None:
                            first_delta = (time.perf_counter() - started) * 1000
                        # "[<number>@<time>]" each, several in a frame when coalesced
                        streamed.update(STAMP.findall(frame["text"]))
                    elif frame["type"] == "event":
                        stored.add(frame["event"]["event_type"])
                    elif frame["type"] == "error":
                        result.errors.append(f"error frame: {frame['message']}")
                    elif frame["type"] == "done":
                        break
                # The scripted LLM streams exactly --deltas deltas; every turn
                # must show its message and its answer as stored events.
                missing = deltas - len(streamed) + len(set(STORED_PER_TURN) - stored)
                result.frames_lost += max(0, missing)
                if frame.get("status") != "completed":
                    result.errors.append(f"turn ended {frame.get('status')!r}")
                    continue
                result.completed += 1
                if first_delta is not None:
                    result.first_delta_ms.append(first_delta)
    except (OSError, TimeoutError, websockets.WebSocketException) as exc:
        result.errors.append(f"disconnected waiting for {waiting_for}: {exc!r}")
    return result


async def receive(socket: Any, result: ChatResult, what: str) -> str:
    """The next frame; a wait past STALL_SECONDS is noted as a stall, and one past
    TURN_TIMEOUT gives up (TimeoutError)."""
    waited = 0.0
    while True:
        try:
            return await asyncio.wait_for(socket.recv(), STALL_SECONDS)
        except TimeoutError:
            waited += STALL_SECONDS
            if waited == STALL_SECONDS:
                result.stalls.append(what)
                while on_stall:  # in a thread: the other chats go on meanwhile
                    asyncio.get_running_loop().run_in_executor(None, on_stall.pop())
            if waited >= TURN_TIMEOUT:
                raise


async def run_chats(
    urls: list[str], chats: list[Chat], messages: int, deltas: int
) -> list[ChatResult]:
    return await asyncio.gather(
        *(
            one_chat(urls[number % len(urls)], chat, number, messages, deltas)
            for number, chat in enumerate(chats)
        )
    )


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


def count_jobs() -> dict[str, int]:
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
        "services  machine busy"
    )
    print(
        f"{row['profile']:<9} {row['workers']:>7}  "
        f"{row['chats']:>5} x {row['messages']:<8}  {row['messages_per_s']:>10}  "
        f"{row['p50_ms']!s:>6}  {row['p95_ms']!s:>6}  {row['max_ms']!s:>6}  "
        f"{row['errors']:>6}  {row['stalls']:>6}  {row['frames_lost']:>11}  {row['lost']:>11}  "
        f"{row['duplicated']:>10}  {row.get('server_cpu_ms_per_turn')!s:>18}  "
        f"{row.get('services_cpu_ms_per_turn')!s:>8}  {row.get('machine_busy_percent')!s:>11}%"
    )
    print(
        f"| {row['profile']} | {row['workers']} | "
        f"{row['chats']} \N{MULTIPLICATION SIGN} {row['messages']} | "
        f"{row['messages_per_s']} | {row['p50_ms']} ms | {row['p95_ms']} ms | {row['max_ms']} ms | "
        f"{row['errors']} | {row['stalls']} | {row['frames_lost']} | {row['lost']} | "
        f"{row['duplicated']} | {row.get('server_cpu_ms_per_turn')} ms | "
        f"{row.get('services_cpu_ms_per_turn')} ms |"
    )
    for sample in row["error_samples"]:
        print("  e.g.", sample, file=sys.stderr)


def stop(processes: list[subprocess.Popen]) -> None:
    from tests.processes import stop_process, stop_process_group

    for process in reversed(processes):  # the servers before the LLM they call
        if process.args[-1] == "qcluster":
            stop_process_group(process, seconds=15)  # with its workers
        else:
            stop_process(process, seconds=15)


def parse_options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", choices=["team", "embedded"], default="team")
    parser.add_argument("--chats", type=int, help="default: 100 (team), 20 (embedded)")
    parser.add_argument("--messages", type=int, default=20, help="per chat, one after another")
    parser.add_argument("--workers", type=int, help="daphne processes; default 2 (team), 1")
    parser.add_argument("--timeout", type=float, default=900, help="overall bound, seconds")
    parser.add_argument("--deltas", type=int, default=5, help="deltas per scripted answer")
    parser.add_argument("--interval", type=float, default=0.01, help="seconds before each delta")
    parser.add_argument("--no-jobs", action="store_true", help="no job cluster (embeddings wait)")
    parser.add_argument("--repeat", type=int, default=1, help="runs, each on fresh processes")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    team = options.profile == "team"
    options.chats = options.chats or (100 if team else 20)
    options.workers = options.workers or (2 if team else 1)
    if not team and options.workers != 1:
        parser.error("the embedded profile's in-memory channel layer serves one daphne process")
    if min(options.chats, options.messages, options.workers, options.repeat) < 1:
        parser.error("--chats, --messages, --workers and --repeat must be at least 1")
    return options


def main() -> int:
    options = parse_options()
    if options.profile == "team":
        for name, default in TEAM_DEFAULTS.items():
            os.environ.setdefault(name, default)
    else:
        for name in TEAM_DEFAULTS:
            os.environ.pop(name, None)

    def time_up(signum: int, frame: Any) -> None:
        raise TimeUp

    def terminated(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGALRM, time_up)
    signal.signal(signal.SIGTERM, terminated)
    if options.repeat == 1:
        code, row = one_run(options)
        if row is not None:
            print(json.dumps(row, indent=2)) if options.json else print_table(row)
        return code
    return repeat(options)


def repeat(options: argparse.Namespace) -> int:
    """Each run in a process of its own (Django is set up once per process), its
    table row printed as it ends, then the totals."""
    arguments = [a for a in sys.argv[1:] if a != "--json"]
    if "--repeat" in arguments:
        at = arguments.index("--repeat")
        del arguments[at : at + 2]
    arguments = [a for a in arguments if not a.startswith("--repeat=")]
    codes, rows = [], []
    for number in range(options.repeat):
        print(f"run {number + 1} of {options.repeat}", file=sys.stderr, flush=True)
        done = subprocess.run(
            [sys.executable, __file__, *arguments, "--json"], stdout=subprocess.PIPE, text=True
        )
        codes.append(done.returncode)
        try:
            row = json.loads(done.stdout)
        except ValueError:
            continue  # it said why on stderr
        rows.append(row)
        print_table(row)
    totals = {
        name: sum(row[name] for row in rows)
        for name in ("stalls", "unanswered", "frames_lost", "errors", "lost", "duplicated")
    }
    rates = [row["messages_per_s"] for row in rows]
    print(
        f"{options.repeat} runs, {len(rows)} finished: messages/s "
        f"{min(rates, default=0)} to {max(rates, default=0)}; "
        + ", ".join(f"{name} {value}" for name, value in totals.items())
    )
    return max(codes)


def one_run(options: argparse.Namespace) -> tuple[int, dict | None]:
    signal.setitimer(signal.ITIMER_REAL, options.timeout)
    row: dict | None = None
    with tempfile.TemporaryDirectory() as data_dir:
        processes: list[subprocess.Popen] = []
        try:
            code, row = run(options, Path(data_dir), processes)
        except TimeUp:
            print(f"load_chat: not done within --timeout {options.timeout:g} s", file=sys.stderr)
            code = 3
        except KeyboardInterrupt:
            print("load_chat: interrupted", file=sys.stderr)
            code = 130
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            stop(processes)
        if code:
            kept = tempfile.mkdtemp(prefix="load_chat-logs-")
            for log in Path(data_dir).glob("*.log"):
                shutil.copy(log, kept)
            print(f"load_chat: the processes' logs are in {kept}", file=sys.stderr)
        if code == 130:
            sys.exit(code)
        return code, row


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
            out.write(f"=== {' '.join(map(str, process.args[-3:]))} (pid {process.pid})\n")
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


def run(
    options: argparse.Namespace, data_dir: Path, processes: list[subprocess.Popen]
) -> tuple[int, dict]:
    """Start everything (each process appended to `processes` at once, for
    the caller to stop), load it, count, report; the exit code."""
    from tests.processes import app_env, free_port, spawn_daphne, start_qcluster, wait_for_health

    with (data_dir / "llm.log").open("w") as log:
        llm = subprocess.Popen(
            [
                *(sys.executable, "-m", "tests.scripted_llm"),
                *("--deltas", str(options.deltas), "--interval", str(options.interval)),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    processes.append(llm)
    llm_url, llm_key = llm.stdout.readline().split()  # type: ignore[union-attr]
    env = app_env(data_dir, NEOTASK_LLM_BASE_URL=llm_url, NEOTASK_LLM_API_KEY=llm_key)
    os.environ.update(env, DJANGO_SETTINGS_MODULE="neotask_site.settings")
    chats, warmups = prepare(options.chats, options.workers)

    if not options.no_jobs:
        with (data_dir / "qcluster.log").open("w") as log:
            processes.append(start_qcluster(env, log))
    workers = {}
    for number in range(options.workers):
        port = free_port()
        with (data_dir / f"daphne-{number}.log").open("w") as log:
            processes.append(spawn_daphne(env, port, log))
        workers[port] = processes[-1]
    for port, worker in workers.items():  # started side by side, then waited for
        wait_for_health(port, worker)
    urls = [f"ws://127.0.0.1:{port}" for port in workers]

    on_stall[:] = [lambda: dump_stacks(processes[1:], data_dir)]  # all but the LLM
    # One turn per worker first: each loads the embedding model on first use.
    warm = asyncio.run(run_chats(urls, warmups, 1, options.deltas))
    servers = processes[1:]  # the daphne workers and the job cluster, not the LLM
    cpu_before, services_before = cpu_seconds(servers), service_cpu_seconds()
    busy_before, all_before = machine_busy_seconds()
    started = time.monotonic()
    results = asyncio.run(run_chats(urls, chats, options.messages, options.deltas))
    row = summarise(options, results, time.monotonic() - started)
    if row["turns"]:
        # What a turn costs the server: its processes' CPU time (workers included).
        row["server_cpu_ms_per_turn"] = round(
            (cpu_seconds(servers) - cpu_before) * 1000 / row["turns"], 1
        )
        row["services_cpu_ms_per_turn"] = round(
            (service_cpu_seconds() - services_before) * 1000 / row["turns"], 1
        )
        busy, total = machine_busy_seconds()
        row["machine_busy_percent"] = round(100 * (busy - busy_before) / (total - all_before))
    row["lost"], row["duplicated"] = count_events(chats, results)
    row.update(count_jobs())
    row["warmup_errors"] = sum(len(result.errors) + result.frames_lost for result in warm)
    names = ("errors", "stalls", "frames_lost", "lost", "duplicated", "warmup_errors")
    return (1 if any(row[name] for name in names) else 0), row


if __name__ == "__main__":
    sys.exit(main())
