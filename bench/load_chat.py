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
answer per turn); and the CPU time of the server's processes per turn, read
once the job cluster has embedded every stored message (`unembedded`: those
it had not within 120 s). Loopback only; bounded in count and by --timeout
(exit code 3 when exceeded). Exit code 1 when anything was an error, lost or
duplicated.

    .venv/bin/python bench/load_chat.py --profile team      # 100 chats x 20, 2 workers
    .venv/bin/python bench/load_chat.py --profile embedded  # 20 chats x 20, 1 worker
    .venv/bin/python bench/load_chat.py --profile team --repeat 10   # stalls over 10 runs

A stall is a turn that gets no frame for 30 s; at the first stall of a run the
stacks of every server process are dumped with py-spy (if installed) into the
run's kept logs, to show where they wait.

With `--py-spy DIR`, py-spy records the first daphne worker and the job
cluster during the measured run (bench/profile_worker.py) into
DIR/daphne.speedscope.json and DIR/jobs.speedscope.json; the row's
`profiled_turns` is how many turns that worker served, for
`bench/profile_summary.py --turns`.

The team profile uses DATABASE_URL and REDIS_URL (default: the local
PostgreSQL and Redis of `make test-team`) and creates a fresh database next to
DATABASE_URL's, dropped at exit. The embedded profile uses SQLite in a
temporary data dir and the in-memory channel layer, which serves one process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.load_clients import Chat, on_stall, run_chats  # noqa: E402
from bench.load_report import (  # noqa: E402
    count_events,
    count_jobs,
    cpu_seconds,
    dump_stacks,
    embeddings_done,
    machine_busy_seconds,
    print_table,
    service_cpu_seconds,
    summarise,
)
from bench.profile_worker import recording  # noqa: E402

TEAM_DEFAULTS = {
    "DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/neotask",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
}


class TimeUp(Exception):
    """Raised by SIGALRM wherever the run is, outside the chats' event loop. Inside it
    the alarm cancels the chats instead (`in_time`): raised there, it would land in
    whichever callback runs, and asyncio swallows what a transport's callback raises,
    so the run went on past its time."""


def time_up(signum: int, frame: Any) -> None:
    raise TimeUp


def in_time(chats: Any) -> Any:
    """Run the chats' coroutine, cancelled by the loop itself when the time is up."""

    async def cancelled_at_alarm() -> Any:
        loop, task = asyncio.get_running_loop(), asyncio.current_task()
        assert task is not None
        loop.add_signal_handler(signal.SIGALRM, task.cancel)
        try:
            return await chats
        except asyncio.CancelledError:
            raise TimeUp from None
        finally:
            loop.remove_signal_handler(signal.SIGALRM)  # which resets it to the default
            signal.signal(signal.SIGALRM, time_up)

    return asyncio.run(cancelled_at_alarm())


def prepare(chats: int, warmups: int) -> tuple[list[Chat], list[Chat]]:
    """A fresh database with one user, login cookie and chat per load chat, and
    one more per worker for its warm-up turn."""
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connections

    from sessions_app.chat import start_chat
    from tests.support.records import login_session

    call_command("migrate", verbosity=0)

    def chat_for(name: str) -> Chat:
        user = get_user_model().objects.create_user(name)  # no password: no slow hashing
        cookie = f"{settings.SESSION_COOKIE_NAME}={login_session(user)}"
        return Chat(cookie, start_chat(user).key)

    load = [chat_for(f"load{number}") for number in range(chats)]
    warm = [chat_for(f"warmup{number}") for number in range(warmups)]
    connections.close_all()
    return load, warm


def stop(processes: list[subprocess.Popen]) -> None:
    from tests.support.processes import stop_process, stop_process_group

    for process in reversed(processes):  # the servers before the LLM they call
        if cast(list[str], process.args)[-1] == "qcluster":  # always started with a list
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
    parser.add_argument(
        "--py-spy", type=Path, metavar="DIR", help="profile a worker and the job cluster"
    )
    parser.add_argument("--py-spy-rate", type=int, default=100, help="samples a second")
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
    # Then every second until disarmed: TimeUp raised inside a finalizer or a
    # callback is printed and dropped ("Exception ignored in: <finalize object>"),
    # and the run went on until the caller's own timeout; the next alarm lands.
    signal.setitimer(signal.ITIMER_REAL, options.timeout, 1.0)
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


def run(
    options: argparse.Namespace, data_dir: Path, processes: list[subprocess.Popen]
) -> tuple[int, dict]:
    """Start everything (each process appended to `processes` at once, for
    the caller to stop), load it, count, report; the exit code."""
    from tests.support.processes import (
        app_env,
        free_port,
        spawn_daphne,
        start_qcluster,
        wait_for_health,
    )

    with (data_dir / "llm.log").open("w") as log:
        llm = subprocess.Popen(
            [
                *(sys.executable, "-m", "tests.support.scripted_llm"),
                *("--deltas", str(options.deltas), "--interval", str(options.interval)),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    processes.append(llm)
    assert llm.stdout is not None
    llm_url, llm_key = llm.stdout.readline().split()
    env = app_env(data_dir, NEOTASK_LLM_BASE_URL=llm_url, NEOTASK_LLM_API_KEY=llm_key)
    os.environ.update(env, DJANGO_SETTINGS_MODULE="neotask_site.settings")
    chats, warmups = prepare(options.chats, options.workers)

    cluster = None
    if not options.no_jobs:
        with (data_dir / "qcluster.log").open("w") as log:
            cluster = start_qcluster(env, log)
        processes.append(cluster)
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
    warm = in_time(run_chats(urls, warmups, 1, options.deltas))
    servers = processes[1:]  # the daphne workers and the job cluster, not the LLM
    daphnes = list(workers.values())
    cpu_before, services_before = cpu_seconds(servers), service_cpu_seconds()
    workers_before = cpu_seconds(daphnes)
    busy_before, all_before = machine_busy_seconds()
    with contextlib.ExitStack() as profiles:
        if options.py_spy:
            options.py_spy.mkdir(parents=True, exist_ok=True)
            daphne = options.py_spy / "daphne.speedscope.json"
            rate = options.py_spy_rate
            profiles.enter_context(recording(daphnes[0].pid, daphne, rate=rate))
            # The cluster (its forked workers do the jobs) at its own priority: its
            # workers first beside the worker would be more threads than cores.
            if cluster is not None:
                jobs = options.py_spy / "jobs.speedscope.json"
                spy = recording(cluster.pid, jobs, rate=rate, subprocesses=True, first=False)
                profiles.enter_context(spy)
        started = time.monotonic()
        results = in_time(run_chats(urls, chats, options.messages, options.deltas))
        seconds = time.monotonic() - started
        # The turns' embeddings are part of their cost: the CPU times are read once
        # the job cluster has made them all, not while it is behind.
        unembedded, waited = embeddings_done() if cluster is not None else (None, 0.0)
    row = summarise(options, results, seconds)
    row["unembedded"], row["embeddings_waited_s"] = unembedded, round(waited, 1)
    if options.py_spy:  # the chats are spread round-robin: the first worker's share
        row["profiled_turns"] = sum(result.completed for result in results[:: options.workers])
    if row["turns"]:
        # What a turn costs the server: its processes' CPU time (workers included).
        row["server_cpu_ms_per_turn"] = round(
            (cpu_seconds(servers) - cpu_before) * 1000 / row["turns"], 1
        )
        # Of which the web workers' (the rest is the job cluster's: the embeddings).
        row["workers_cpu_ms_per_turn"] = round(
            (cpu_seconds(daphnes) - workers_before) * 1000 / row["turns"], 1
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
