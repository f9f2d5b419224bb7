"""py-spy on a benchmark's server processes: where a daphne worker (or the job
cluster, its forked workers included) spends its CPU while the benchmark loads
it, as a speedscope profile (https://www.speedscope.app/, or
bench/profile_summary.py for the top costs as a table).

py-spy keeps the samples of threads the kernel calls running, which includes
the time they wait for a core: on the 2 shared cores of docs/performance.md
its samples of a daphne worker added up to 2-4x the worker's CPU time, the
excess where a thread had just woken another (asyncio's self-pipe, a socket's
send to PostgreSQL) or been woken (the event loop's select) and lost its core.
So the profiled process runs first while recorded, and so does py-spy
(niceness -20, as root: the run's figures are not the benchmark's then), which
brought them to 1.1-2x, and the profile is weighed by the CPU time each thread
spent meanwhile (Linux /proc): the samples at a wait or a wake-up (IDLE) are
dropped, and each thread's other samples share its CPU time. The weights are
then CPU seconds, and a profile's total is the process's CPU time; its name
says how many seconds of samples were weighed to how many of CPU. Files are
named as the repository or their package name them (no paths of the machine).

`bench/load_chat.py --py-spy DIR` records its first daphne worker and the job
cluster during its measured run with this; for any other benchmark, attach to
its worker by pid while it runs:

    .venv/bin/python bench/profile_worker.py --pid PID --seconds 30 --out daphne.speedscope.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.profile_summary import relative  # noqa: E402

RATE = 100  # samples a second: a 10 ms grain, and a few MB for a minute of one busy process

# Innermost frames (file, function) where a thread waits, or has just woken
# another thread or process (a socket's send, asyncio's self-pipe, a pool's
# queue) and is often preempted right there: py-spy shows the Python frame that
# made the call, and counts the time the thread then waits for a core as
# running. Their own CPU, microseconds a call (a whole trip to a thread is
# 80 µs: docs/performance/turn.md), goes to the thread's other samples.
IDLE = {
    ("selectors.py", "EpollSelector.select"),
    ("selectors.py", "PollSelector.select"),
    ("selectors.py", "SelectSelector.select"),
    ("threading.py", "Condition.wait"),
    ("threading.py", "Thread._wait_for_tstate_lock"),
    ("concurrent/futures/thread.py", "_worker"),  # the pool's queue.get
    ("concurrent/futures/thread.py", "ThreadPoolExecutor.submit"),  # wakes a pool thread
    ("asyncio/selector_events.py", "BaseSelectorEventLoop._write_to_self"),  # wakes the loop
    ("asyncio/selector_events.py", "_SelectorSocketTransport.write"),  # a socket's send
    ("twisted/python/util.py", "untilConcludes"),  # Twisted's socket calls
    ("multiprocessing/synchronize.py", "Condition.wait"),
    ("multiprocessing/synchronize.py", "SemLock.__enter__"),
    ("multiprocessing/connection.py", "Connection._recv"),
    ("multiprocessing/connection.py", "wait"),
    ("multiprocessing/popen_fork.py", "Popen.poll"),
    ("django_q/brokers/orm.py", "ORM.dequeue"),  # its sleep between polls
    ("psycopg/client_cursor.py", "ClientCursorMixin._execute_send"),  # to PostgreSQL
    ("psycopg/connection.py", "Connection.wait"),  # for PostgreSQL's answer
    ("psycopg/_connection_base.py", "BaseConnection._exec_command"),  # BEGIN, COMMIT
    ("psycopg/waiting.py", "wait_c"),
    ("memory/tasks.py", "EmbeddingRequests.run"),  # its sleep between jobs
}


def py_spy() -> str:
    return shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))


def thread_cpu(pid: int, children: bool = False) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of `pid`, and of its
    descendants' with `children`, by thread id."""
    tick = os.sysconf("SC_CLK_TCK")
    pids = [pid]
    if children:
        parents: dict[int, list[int]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, IndexError):
                parents.setdefault(int(stat.read_text().rsplit(")", 1)[1].split()[1]), []).append(
                    int(stat.parent.name)
                )
        todo = [pid]
        while todo:
            pids += (found := parents.get(todo.pop(), []))
            todo += found
    times = {}
    for process in pids:
        for stat in Path(f"/proc/{process}/task").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, IndexError):
                fields = stat.read_text().rsplit(")", 1)[1].split()
                times[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) / tick
    return times


def set_nice(pid: int, children: bool, nice: int) -> None:
    """Every thread of `pid` (and of its descendants) at this niceness; threads
    and processes started later inherit it from theirs. Quietly nothing where
    it is not allowed (not root)."""
    for tid in thread_cpu(pid, children):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, tid, nice)


def idle(frame: dict) -> bool:
    return any(frame["file"].endswith(file) and frame["name"] == name for file, name in IDLE)


def weigh(profile: dict, cpu: dict[int, float]) -> dict:
    """`profile` (py-spy's speedscope, a profile per thread) with each thread's
    samples at a wait dropped and the others weighed to share its CPU seconds
    (`cpu`, by thread id). A thread that ended before it was read gets the
    median of the others' weight per sample."""
    frames = profile["shared"]["frames"]
    factors: dict[int, float] = {}
    for thread in profile["profiles"]:
        tid = int(re.findall(r"Thread (\d+)", thread["name"])[-1])
        busy = [
            (sample, weight)
            for sample, weight in zip(thread["samples"], thread["weights"], strict=True)
            if sample and not idle(frames[sample[-1]])
        ]
        thread["samples"] = [sample for sample, _ in busy]
        thread["weights"] = [weight for _, weight in busy]
        if tid in cpu and busy:
            factors[id(thread)] = cpu[tid] / sum(thread["weights"])
    usual = statistics.median(factors.values()) if factors else 1.0
    sampled = weighed = 0.0
    for thread in profile["profiles"]:
        factor = factors.get(id(thread), usual)
        sampled += sum(thread["weights"])
        thread["weights"] = [weight * factor for weight in thread["weights"]]
        thread["endValue"] = sum(thread["weights"])
        weighed += thread["endValue"]
    for frame in frames:
        frame["file"] = relative(frame["file"] or "", ROOT)
        # A process's root frame (--subprocesses) names its command line.
        frame["name"] = re.sub(r"/\S*/", "", frame["name"])
    profile["name"] = (
        f"{profile.get('name', '')} (bench/profile_worker.py: "
        f"{sampled:.2f} s of samples weighed to {weighed:.2f} s of CPU)"
    )
    return profile


@contextlib.contextmanager
def recording(
    pid: int, out: Path, *, rate: int = RATE, subprocesses: bool = False, first: bool = True
) -> Iterator[subprocess.Popen]:
    """py-spy recording `pid` (and its children, with `subprocesses`) into `out`
    as speedscope JSON meanwhile, weighed by CPU time (`weigh`) when the block
    ends. `first`: it and py-spy run before anything else meanwhile."""
    command = [py_spy(), "record", "--pid", str(pid), "--rate", str(rate)]
    command += ["--format", "speedscope", "--output", str(out)]
    if subprocesses:
        command.append("--subprocesses")
    niceness = os.getpriority(os.PRIO_PROCESS, pid)
    if first:
        set_nice(pid, subprocesses, -20)
    before = thread_cpu(pid, subprocesses)
    recorder = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        # Not starved by what it records.
        preexec_fn=(lambda: set_nice(os.getpid(), False, -20)) if first else None,
    )
    time.sleep(1)  # attached (it reads the interpreter's state first)
    if recorder.poll() is not None:
        assert recorder.stderr is not None
        raise RuntimeError(f"py-spy could not attach to {pid}: {recorder.stderr.read()!r}")
    try:
        yield recorder
    finally:
        after = thread_cpu(pid, subprocesses)
        if first:
            set_nice(pid, subprocesses, niceness)
        recorder.send_signal(signal.SIGINT)  # it writes the file and exits
        try:
            recorder.wait(timeout=60)
        except subprocess.TimeoutExpired:
            recorder.kill()
            recorder.wait()
    spent = {tid: seconds - before.get(tid, 0.0) for tid, seconds in after.items()}
    out.write_text(json.dumps(weigh(json.loads(out.read_text()), spent), separators=(",", ":")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--out", type=Path, required=True, help="speedscope JSON")
    parser.add_argument("--rate", type=int, default=RATE, help="samples a second")
    parser.add_argument("--subprocesses", action="store_true", help="its children too")
    parser.add_argument("--no-first", action="store_true", help="at its own priority")
    options = parser.parse_args()
    with recording(
        options.pid,
        options.out,
        rate=options.rate,
        subprocesses=options.subprocesses,
        first=not options.no_first,
    ):
        time.sleep(options.seconds)
    print(f"profile_worker: {options.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
