"""Per-delta latency the server adds to a streamed answer, at 1 and 50 chats.

The scripted LLM stamps each of its 200 deltas with the time it sent it; the
websocket clients subtract that from the time the frame reached them. The
difference is what Neotask adds: reading the LLM stream, the agent turn, the
channel layer and the websocket. Loopback only; bounded in count and time.

    .venv/bin/python bench/chat_latency.py [--chats 1 50] [--deltas 200] [--interval 0.02]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
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


async def one_chat(url: str, cookie: str, key: str, deltas: int) -> tuple[list[float], int, int]:
    import websockets

    latencies: list[float] = []
    expected = 0
    problems = 0
    async with websockets.connect(
        f"{url}/ws/chat/{key}/",
        additional_headers={"Cookie": cookie, "Origin": "http" + url.removeprefix("ws")},
        max_size=2**20,
    ) as socket:
        await socket.send(json.dumps({"type": "message", "text": "stream please"}))
        while True:
            frame = json.loads(await asyncio.wait_for(socket.recv(), timeout=120))
            now = time.time_ns()
            if frame["type"] == "delta":
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
    return latencies, deltas - expected, problems


async def run(url: str, cookie: str, keys: list[str], deltas: int) -> dict:
    started = time.monotonic()
    results = await asyncio.gather(*(one_chat(url, cookie, key, deltas) for key in keys))
    latencies = sorted(x for lat, _, _ in results for x in lat)
    return {
        "chats": len(keys),
        "deltas": len(latencies),
        "p50_ms": round(statistics.median(latencies), 2),
        "p95_ms": round(latencies[int(len(latencies) * 0.95) - 1], 2),
        "max_ms": round(latencies[-1], 2),
        "lost": sum(missing for _, missing, _ in results),
        "reordered": sum(problems for _, _, problems in results),
        "seconds": round(time.monotonic() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chats", type=int, nargs="+", default=[1, 50])
    parser.add_argument("--deltas", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between deltas")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()

    from tests.support.processes import app_env, free_port, start_daphne

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
        cookie, keys = prepare(data_dir, max(options.chats))
        port = free_port()
        server = start_daphne(env, port)
        try:
            rows = []
            for chats in options.chats:
                rows.append(
                    asyncio.run(run(f"ws://127.0.0.1:{port}", cookie, keys[:chats], options.deltas))
                )
        finally:
            server.terminate()
            server.wait(timeout=15)
            llm.terminate()
            llm.wait(timeout=15)
    if options.json:
        print(json.dumps(rows, indent=2))
        return
    print("chats  deltas  p50 ms  p95 ms  max ms  lost  reordered  seconds")
    for row in rows:
        print(
            f"{row['chats']:>5}  {row['deltas']:>6}  {row['p50_ms']:>6}  {row['p95_ms']:>6}  "
            f"{row['max_ms']:>6}  {row['lost']:>4}  {row['reordered']:>9}  {row['seconds']:>7}"
        )


if __name__ == "__main__":
    main()
