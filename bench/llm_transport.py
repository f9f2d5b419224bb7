"""What the LLM client's network layer costs per streamed delta: agent/transport.py
(httpx and httpcore on asyncio's own streams) against stock httpx (httpcore on
anyio), side by side in one process, alternating runs.

A scripted LLM in a process of its own streams answers of --deltas deltas with
no pause between them; this process reads them through `LLMClient.stream`, the
app's own code, with --chats answers at once. Reported: this process's CPU time
per delta (user + system), which is what a worker pays for each token it
relays, min and median over the runs.

    .venv/bin/python bench/llm_transport.py [--runs 3] [--chats 20] [--deltas 200] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


async def stream_all(chats: int, answers: int) -> int:
    """`answers` answers on each of `chats` concurrent streams; the deltas read."""
    from agent.llm import LLMClient, configured_endpoint

    client = LLMClient(configured_endpoint())
    deltas = 0

    async def on_delta(text: str) -> None:
        nonlocal deltas
        deltas += 1

    async def one_chat() -> None:
        for _ in range(answers):
            await client.stream([{"role": "user", "content": "go"}], on_delta=on_delta)

    await asyncio.gather(*(one_chat() for _ in range(chats)))
    return deltas


def measure(transport: str, chats: int, answers: int) -> float:
    """CPU microseconds per delta with the `transport` ("asyncio" or "stock")."""
    import httpx

    from agent import llm

    async def run() -> tuple[float, int]:
        llm._http_clients.clear()
        if transport == "stock":
            limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
            loop = asyncio.get_running_loop()
            llm._http_clients[loop] = httpx.AsyncClient(limits=limits)
        await stream_all(chats, 1)  # connections made, code warm
        started = time.process_time()
        deltas = await stream_all(chats, answers)
        cpu = time.process_time() - started
        await llm.http_client().aclose()
        return cpu, deltas

    cpu, deltas = asyncio.run(run())
    return cpu * 1e6 / deltas


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--answers", type=int, default=5, help="answers per chat and run")
    parser.add_argument("--deltas", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()

    llm = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.scripted_llm",
            "--deltas",
            str(options.deltas),
            "--interval",
            "0",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert llm.stdout is not None
        url, key = llm.stdout.readline().split()
        os.environ.update(
            NEOTASK_LLM_BASE_URL=url,
            NEOTASK_LLM_API_KEY=key,
            NEOTASK_CONFIG="",
            DJANGO_SETTINGS_MODULE="neotask_site.settings",
        )
        os.environ.setdefault("NEOTASK_DATA_DIR", str(Path("/tmp/neotask-bench-transport")))
        import django

        django.setup()
        results: dict[str, list[float]] = {"asyncio": [], "stock": []}
        for _ in range(options.runs):
            for transport in results:  # alternating, so both see the same machine
                results[transport].append(measure(transport, options.chats, options.answers))
    finally:
        llm.kill()
    summary = {
        name: {"min_us": round(min(runs), 1), "median_us": round(statistics.median(runs), 1)}
        for name, runs in results.items()
    }
    if options.json:
        print(json.dumps({"per_delta": summary, "runs": results}))
    else:
        for name, figures in summary.items():
            print(
                f"{name:>8}: {figures['min_us']} µs of CPU per delta (min), "
                f"{figures['median_us']} µs (median)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
