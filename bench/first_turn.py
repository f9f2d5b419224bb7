"""The first turn after a start against the fifth: the embedded model's
first-token time per turn, from a fresh `manage.py local_llm`.

Starts `manage.py local_llm` (as `manage.py serve` does) in a temporary data
dir whose models/ is NEOTASK_TEST_MODELS_DIR, and `--pause` seconds after it
writes its address (0: at once) runs `--turns` chat turns through
agent.runtime.run_turn (the real prompt: instructions, tool schemas, memory, the
exchange so far) in one chat. A turn's first token is timed from the model
request to its first streamed text (a wait for the model to load or warm
included); with it, the first request's prompt tokens and how many of them
llama.cpp took from its cache. The embedding model is left out (no vector:
recall by recency), so the figure is the model's. With `--restart`, the server
is stopped and started again on the same data dir and a new chat runs as many
turns. Repeated `--repeat` times, each with a new data dir; prints one JSON line
per run and the medians. After the turns, one turn of another new chat: the
first turn of a chat without a start before it. With `--prepare`, the data dir
is first prepared as `make run` does (`manage.py local_llm --prepare`).

    NEOTASK_TEST_MODELS_DIR=.venv/models .venv/bin/python bench/first_turn.py
    NEOTASK_TEST_MODELS_DIR=.venv/models .venv/bin/python bench/first_turn.py --restart
    NEOTASK_TEST_MODELS_DIR=.venv/models .venv/bin/python bench/first_turn.py --restart --pause 15
    NEOTASK_TEST_MODELS_DIR=.venv/models .venv/bin/python bench/first_turn.py --restart --prepare

The script imports only what main had before the warm prefix (run_turn, the
local_llm command), so a copy of it in an older checkout measures "before".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MESSAGES = (
    "Hello! In one sentence, what can you help me with?",
    "Name one good habit for the morning, in one sentence.",
    "And one for the evening?",
    "Which of the two is easier to keep, in one sentence?",
    "Thanks. Say goodbye in five words.",
    "One more: name a fruit.",
    "And a vegetable?",
)


def setup(data: Path, model: str, answer_tokens: int) -> None:
    os.environ.update(
        DJANGO_SETTINGS_MODULE="neotask_site.settings",
        NEOTASK_CONFIG="",
        NEOTASK_DATA_DIR=str(data),
        NEOTASK_LLM_LOCAL_MODEL=model,
        NEOTASK_LLM_MAX_ANSWER_TOKENS=str(answer_tokens),
    )
    os.environ.pop("NEOTASK_LLM_BASE_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def start_model(data: Path, key: str) -> tuple[subprocess.Popen, str, float]:
    """The model's server process, its address, and seconds until it served."""
    from agent.llm import LOCAL_KEY_VARIABLE

    address_file = data / "local_llm.address"
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "manage.py", "local_llm", "--address-file", str(address_file)],
        cwd=ROOT,
        env={**os.environ, LOCAL_KEY_VARIABLE: key},
        stdout=subprocess.DEVNULL,
    )
    while process.poll() is None:
        with contextlib.suppress(FileNotFoundError):
            if address := address_file.read_text().strip().splitlines()[0]:
                return process, address, time.monotonic() - started
        time.sleep(0.05)
    raise SystemExit(f"local_llm exited with {process.returncode}")


def timed_client() -> type:
    """An LLMClient that notes when the model was asked and when its first text came:
    the time to the first token, any wait for the model to load or warm included."""
    from agent.llm import Completion, LLMClient, OnDelta

    class Timed(LLMClient):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.marks: dict[str, float] = {}
            self.tokens: list[tuple[int, int]] = []  # (prompt, of which cached) per round

        async def stream(
            self,
            messages: list[dict[str, Any]],
            tools: list[dict[str, Any]] | None = None,
            on_delta: OnDelta | None = None,
            max_tokens: int | None = None,
        ) -> Completion:
            self.marks.setdefault("sent", time.perf_counter())

            async def timed(text: str) -> None:
                self.marks.setdefault("first", time.perf_counter())
                if on_delta is not None:
                    await on_delta(text)

            completion = await super().stream(messages, tools, timed, max_tokens)
            self.marks.setdefault("first", time.perf_counter())  # a call, no text
            self.tokens.append((completion.usage.input, completion.usage.cache_read))
            return completion

    return Timed


async def turns(count: int, chat: str) -> list[dict[str, Any]]:
    from asgiref.sync import sync_to_async
    from django.contrib.auth import get_user_model

    import agent.runtime
    from agent.llm import configured_endpoint
    from agent.runtime import TurnRequest, run_turn

    async def no_vector(text: str) -> None:
        return None

    agent.runtime.query_vector = no_vector
    Timed = timed_client()
    owner, _ = await sync_to_async(get_user_model().objects.get_or_create)(username="bench")
    rows = []
    # The chat's turns, then the first turn of another new chat: what a chat's first
    # turn costs without a start before it.
    for number in range(count + 1):
        client = Timed(configured_endpoint())

        async def emit(frame: Any) -> None:
            pass

        request = TurnRequest(owner=owner, session_id=chat if number < count else f"{chat}-new")
        started = time.perf_counter()
        result = await run_turn(request, MESSAGES[number % len(MESSAGES)], emit, client)
        rows.append(
            {
                "turn": number + 1 if number < count else "new chat",
                "first_token_ms": round((client.marks["first"] - client.marks["sent"]) * 1000),
                "turn_ms": round((time.perf_counter() - started) * 1000),
                "prompt_tokens": client.tokens[0][0],
                "cached_tokens": client.tokens[0][1],
                "ended": result.status,
            }
        )
    return rows


def one_run(options: argparse.Namespace) -> dict[str, Any]:
    """In a child process of its own (Django is set up once per process): a fresh
    start, and with --restart a second start on the same data dir, as after
    stopping and starting Neotask again."""
    data = Path(tempfile.mkdtemp(prefix="bench-first-turn-"))
    try:
        (data / "models").symlink_to(Path(options.models).resolve())
        setup(data, options.model, options.answer_tokens)
        from agent.llm import LOCAL_KEY_VARIABLE, LOCAL_URL_VARIABLE

        run: dict[str, Any] = {"pause_s": options.pause}
        if options.prepare:  # as `make run` does before it serves
            started = time.monotonic()
            subprocess.run(
                [sys.executable, "manage.py", "local_llm", "--prepare"],
                cwd=ROOT,
                check=True,
                stdout=subprocess.DEVNULL,
            )
            run["prepare_s"] = round(time.monotonic() - started, 1)
        for start in ("fresh", "restart")[: 2 if options.restart else 1]:
            key = secrets.token_urlsafe(24)
            process, address, load_s = start_model(data, key)
            os.environ[LOCAL_KEY_VARIABLE] = key
            os.environ[LOCAL_URL_VARIABLE] = f"{address}/v1"
            try:
                time.sleep(options.pause)
                rows = asyncio.run(turns(options.turns, f"bench-{start}"))
            finally:
                process.terminate()
                process.wait(timeout=60)
            run[start] = {"model_load_s": round(load_s, 1), "turns": rows}
        return run
    finally:
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--models", default=os.environ.get("NEOTASK_TEST_MODELS_DIR", ""))
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=1, help="runs, each from a new start")
    parser.add_argument("--answer-tokens", type=int, default=32, help="[llm] max_answer_tokens")
    parser.add_argument(
        "--pause", type=float, default=0.0, help="seconds between the start and the first turn"
    )
    parser.add_argument(
        "--restart", action="store_true", help="also measure a second start on the same data dir"
    )
    parser.add_argument(
        "--prepare", action="store_true", help="run `local_llm --prepare` first, as `make run` does"
    )
    parser.add_argument("--one-run", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if not options.models:
        parser.error("set NEOTASK_TEST_MODELS_DIR (or --models) to the fetched models' directory")
    if options.one_run:
        print(json.dumps(one_run(options)), flush=True)
        return
    runs = []
    for _ in range(options.repeat):
        child = subprocess.run(
            [sys.executable, __file__, "--one-run", *sys.argv[1:]],
            capture_output=True,
            text=True,
            check=True,
        )
        run = json.loads(child.stdout.strip().splitlines()[-1])
        runs.append(run)
        print(json.dumps(run), flush=True)
    fifth = min(4, options.turns - 1)
    for start in ("fresh", "restart"):
        if start not in runs[0]:
            continue
        firsts = [run[start]["turns"][0]["first_token_ms"] for run in runs]
        fifths = [run[start]["turns"][fifth]["first_token_ms"] for run in runs]
        others = [run[start]["turns"][-1]["first_token_ms"] for run in runs]
        summary = {
            "start": start,
            "runs": len(runs),
            "first_turn_ms": [min(firsts), statistics.median(firsts), max(firsts)],
            f"turn_{fifth + 1}_ms": [min(fifths), statistics.median(fifths), max(fifths)],
            "first_over_fifth": round(statistics.median(firsts) / statistics.median(fifths), 2),
            "new_chat_first_ms": [min(others), statistics.median(others), max(others)],
        }
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
