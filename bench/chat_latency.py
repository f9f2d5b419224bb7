"""Per-delta latency the server adds to a streamed answer, at 1 and 50 chats.

The scripted LLM stamps each of its 200 deltas with the time it sent it; the
websocket clients subtract that from the time the frame reached them. The
difference is what Neotask adds: reading the LLM stream, the agent turn, the
channel layer and the websocket. Loopback only; bounded in count and time.
`status ms` is the sign of life: from sending the message to its turn's first
`status` frame (sent before the message is embedded).

With `--workers N` (REDIS_URL set) the chats are spread over N daphne
processes, each warmed up by a turn of its own (the first loads the embedding
model); with `--tabs T` each chat has T tabs, on its own worker and the next
ones in turn, so that with two workers every frame also reaches a tab in the
other process. Every tab counts its deltas. `--py-spy FILE` records the first
worker while the last row's chats stream (a speedscope profile).

    .venv/bin/python bench/chat_latency.py [--chats 1 50] [--deltas 200] [--interval 0.02]
        [--workers 1] [--tabs 1] [--py-spy FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STAMP = re.compile(r"\[(\d+)@(\d+)\]")


def prepare(data_dir: str, chats: int) -> tuple[str, list[str]]:
    """A user, `chats` chat sessions and a login cookie, in a fresh database."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "neotask_site.settings"
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from sessions_app.chat import start_chat
    from tests.support.records import login_session

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench", password="bench-password-1")
    keys = [start_chat(user).key for _ in range(chats)]
    return f"{settings.SESSION_COOKIE_NAME}={login_session(user)}", keys


async def open_tab(url: str, cookie: str, key: str):
    import websockets

    return await websockets.connect(
        f"{url}/ws/chat/{key}/",
        additional_headers={"Cookie": cookie, "Origin": "http" + url.removeprefix("ws")},
        max_size=2**20,
    )


async def joined(socket) -> None:
    """Once the server answers a frame, the socket's connect (which joins the
    chat's group) is over: a consumer handles its frames one after another."""
    await socket.send(json.dumps({"type": "message", "text": "/help"}))
    while json.loads(await asyncio.wait_for(socket.recv(), timeout=60))["type"] != "notice":
        pass


Read = tuple[list[float], int, int, float]


async def read_stream(socket, deltas: int, sent: float) -> Read:
    latencies: list[float] = []
    expected = 0
    problems = 0
    status_ms = float("nan")
    while True:
        frame = json.loads(await asyncio.wait_for(socket.recv(), timeout=120))
        now = time.time_ns()
        if frame["type"] == "status" and status_ms != status_ms:  # the first (nan != nan)
            status_ms = (time.monotonic() - sent) * 1000
        elif frame["type"] == "delta":
            # Deltas that arrived together come as one frame: every stamp counts.
            for match in STAMP.finditer(frame["text"]):
                number, sent = int(match[1]), int(match[2])
                if number != expected:
                    problems += 1  # lost or reordered
                expected = number + 1
                latencies.append((now - sent) / 1e6)
        elif frame["type"] == "error":
            print("error frame:", frame["message"], file=sys.stderr)
        elif frame["type"] == "done":
            break
    return latencies, deltas - expected, problems, status_ms


async def one_chat(urls: list[str], cookie: str, key: str, deltas: int) -> list[Read]:
    """The chat's stream as each of its tabs saw it; the first tab asks."""
    tabs = [await open_tab(url, cookie, key) for url in urls]
    try:
        if len(tabs) > 1:
            await asyncio.gather(*map(joined, tabs))
        sent = time.monotonic()
        await tabs[0].send(json.dumps({"type": "message", "text": "stream please"}))
        return await asyncio.gather(*(read_stream(tab, deltas, sent) for tab in tabs))
    finally:
        await asyncio.gather(*(tab.close() for tab in tabs))


async def run(urls: list[str], cookie: str, keys: list[str], deltas: int, tabs: int) -> dict:
    def tabs_of(number: int) -> list[str]:  # the chat's worker first, then the next ones
        return [urls[(number + tab) % len(urls)] for tab in range(tabs)]

    started = time.monotonic()
    chats = await asyncio.gather(
        *(one_chat(tabs_of(number), cookie, key, deltas) for number, key in enumerate(keys))
    )
    results = [tab for chat in chats for tab in chat]
    latencies = sorted(x for lat, _, _, _ in results for x in lat)
    signs = sorted(status for _, _, _, status in results)
    return {
        "chats": len(keys),
        "workers": len(urls),
        "tabs": tabs,
        "deltas": len(latencies),
        "p50_ms": round(statistics.median(latencies), 2),
        "p95_ms": round(latencies[int(len(latencies) * 0.95) - 1], 2),
        "max_ms": round(latencies[-1], 2),
        "lost": sum(missing for _, missing, _, _ in results),
        "reordered": sum(problems for _, _, problems, _ in results),
        "status_p50_ms": round(statistics.median(signs), 1),
        "status_max_ms": round(signs[-1], 1),
        "seconds": round(time.monotonic() - started, 1),
    }


def py_spy(pid: int, output: str) -> subprocess.Popen:
    """py-spy recording `pid` until it is sent SIGINT (it then writes `output`):
    the threads holding the GIL (Python's CPU time, not its waits), without
    stopping the process for each sample (bench/profile_summary.py reads it)."""
    return subprocess.Popen(
        [
            *(str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(pid)),
            *("--gil", "--nonblocking", "--rate", "100", "--format", "speedscope"),
            *("--output", output),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chats", type=int, nargs="+", default=[1, 50])
    parser.add_argument("--deltas", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between deltas")
    parser.add_argument("--workers", type=int, default=1, help="daphne processes")
    parser.add_argument("--tabs", type=int, default=1, help="websockets per chat")
    parser.add_argument("--py-spy", metavar="FILE", help="profile the first worker's last row")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    if options.workers > 1 and not os.environ.get("REDIS_URL"):
        parser.error("several workers need REDIS_URL (the in-memory layer serves one process)")

    from bench.load_report import cpu_seconds
    from tests.support.processes import (
        app_env,
        free_port,
        spawn_daphne,
        stop_process,
        wait_for_health,
    )

    # The scripted LLM runs in a process of its own, answering every request
    # with the same stamped stream.
    llm = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.scripted_llm",
            "--deltas",
            str(options.deltas),
            "--interval",
            str(options.interval),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert llm.stdout is not None
    llm_url, llm_key = llm.stdout.readline().split()
    with tempfile.TemporaryDirectory() as data_dir:
        env = app_env(data_dir, NEOTASK_LLM_BASE_URL=llm_url, NEOTASK_LLM_API_KEY=llm_key)
        os.environ.update(env)
        cookie, keys = prepare(data_dir, max(options.chats) + options.workers)
        keys, warmups = keys[: -options.workers], keys[-options.workers :]
        ports: list[int] = []
        workers: list[subprocess.Popen] = []
        try:
            for _ in range(options.workers):
                ports.append(free_port())
                workers.append(spawn_daphne(env, ports[-1]))
            for port, worker in zip(ports, workers, strict=True):
                wait_for_health(port, worker)
            urls = [f"ws://127.0.0.1:{port}" for port in ports]
            # One turn per worker first, not measured: each loads the embedding
            # model on its first turn, which would slow the other chats' streams.
            asyncio.run(run(urls, cookie, warmups, options.deltas, 1))
            rows = []
            for number, chats in enumerate(options.chats):
                last = number == len(options.chats) - 1
                profiler = None
                if options.py_spy and last:
                    profiler = py_spy(workers[0].pid, options.py_spy)
                    time.sleep(1)  # attached
                try:
                    cpu = cpu_seconds(workers)
                    row = asyncio.run(run(urls, cookie, keys[:chats], options.deltas, options.tabs))
                    # What a streamed delta costs the workers (less noisy than latency
                    # on a shared machine): their CPU time over the deltas the LLM sent.
                    row["cpu_ms_per_delta"] = round(
                        (cpu_seconds(workers) - cpu) * 1000 / (chats * options.deltas), 3
                    )
                    rows.append(row)
                finally:
                    if profiler is not None:
                        profiler.send_signal(signal.SIGINT)
                        profiler.wait(timeout=60)
        finally:
            for worker in workers:
                stop_process(worker, seconds=15)
            stop_process(llm, seconds=15)
    if options.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        "chats  workers  tabs  deltas  p50 ms  p95 ms  max ms  lost  reordered  seconds  cpu/delta"
        "  status ms (p50/max)"
    )
    for row in rows:
        print(
            f"{row['chats']:>5}  {row['workers']:>7}  {row['tabs']:>4}  "
            f"{row['deltas']:>6}  {row['p50_ms']:>6}  {row['p95_ms']:>6}  "
            f"{row['max_ms']:>6}  {row['lost']:>4}  {row['reordered']:>9}  {row['seconds']:>7}  "
            f"{row['cpu_ms_per_delta']:>6} ms  {row['status_p50_ms']}/{row['status_max_ms']}"
        )


if __name__ == "__main__":
    main()
