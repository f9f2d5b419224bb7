"""Another user's chat turn while one socket floods the server with junk frames
(issue 40, L12): the turn's time from message to `done`, quiet and under the
flood. Without a per-socket limit every junk frame cost the consumer a database
query and an error frame; with it the flooding socket is closed after its burst
(sessions_app/consumers.py, FRAME_BURST and FRAMES_PER_SECOND).

One daphne on the embedded profile (SQLite), a scripted LLM; loopback only.

    .venv/bin/python bench/frame_flood.py [--frames 20000] [--turns 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.processes import (  # noqa: E402
    app_env,
    chat_socket,
    free_port,
    logged_in_chat,
    message_frame,
    start_daphne,
    stop_process,
    until_done,
)
from tests.support.scripted_llm import Reply, ScriptedLLM  # noqa: E402


async def turn_ms(port: int, cookie: str, key: str) -> float:
    async with chat_socket(port, cookie, key) as socket:
        started = time.perf_counter()
        await socket.send(message_frame("hello"))
        await until_done(socket, seconds=120)
        return (time.perf_counter() - started) * 1000


async def flood(port: int, cookie: str, key: str, frames: int) -> int:
    """Junk frames sent as fast as the socket takes them, its answers read as they
    come (so that the server never waits on this client), until every frame is
    answered or the socket is closed; how many frames the server answered."""
    import websockets

    answered = 0
    try:
        async with chat_socket(port, cookie, key) as socket:

            async def drain() -> None:
                nonlocal answered
                async for _ in socket:
                    answered += 1
                    if answered == frames:
                        return

            reader = asyncio.ensure_future(drain())
            for _ in range(frames):
                await socket.send("junk")
            await asyncio.wait_for(reader, 300)
    except websockets.ConnectionClosed:
        pass
    return answered


async def measure(port: int, victim: tuple[str, str], flooder: tuple[str, str], args) -> dict:
    quiet = [await turn_ms(port, *victim) for _ in range(args.turns)]
    flooded, answered = [], []
    for _ in range(args.turns):
        flooding = asyncio.ensure_future(flood(port, *flooder, args.frames))
        await asyncio.sleep(0.2)  # the flood under way
        flooded.append(await turn_ms(port, *victim))
        answered.append(await flooding)
    print(f"junk frames the server read and answered, per flood: {answered}")
    return {"quiet": quiet, "flooded": flooded}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--turns", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir, ScriptedLLM() as llm:
        llm.next_reply = lambda body: Reply(text="Hello there.")  # type: ignore[method-assign]
        env = app_env(data_dir, NEOTASK_LLM_BASE_URL=llm.url, NEOTASK_LLM_API_KEY=llm.api_key)
        env.pop("DATABASE_URL", None)
        env.pop("REDIS_URL", None)
        victim = logged_in_chat(env, "victim", migrate=True)
        flooder = logged_in_chat(env, "flooder")
        port = free_port()
        server = start_daphne(env, port)
        try:
            result = asyncio.run(measure(port, victim, flooder, args))
        finally:
            stop_process(server)
    for name, times in result.items():
        during = f", {args.frames} junk frames each" if name == "flooded" else ""
        print(
            f"{name:8} turn p50 {statistics.median(times):7.0f} ms  max {max(times):7.0f} ms"
            f"  ({len(times)} turns{during})"
        )


if __name__ == "__main__":
    main()
