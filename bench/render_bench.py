"""Markdown rendering: what hostile text costs, and what one such answer does to
the server process that renders it.

Three parts, each printed as a table (`--json`: one JSON document):

- `costs`: markdown-it's and nh3's time per 10,000 characters of text built to be
  slow (runs of `[`, emphasis, backticks, nested quotes, lists, tables), at two
  lengths, and the app's `render_markdown` on 20,000 and 60,000 characters of each.
- `healthz`: daphne and a scripted LLM in processes of their own; the LLM
  streams a hostile answer (by default 60,000 `[` in 600 deltas, 5 ms apart)
  while a client asks `/healthz` of the same daphne every 10 ms, from the message
  until the answer's `done`: p50 / p95 / max of those requests.
- `page`: a chat holding one answer of 300 KB (stored as an import would) is
  opened with a plain GET, a few times: the page's time.

    .venv/bin/python bench/render_bench.py [--parts costs healthz page] [--json]
    .venv/bin/python bench/render_bench.py --parts healthz --answer brackets:60000 tables:20000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# 256 columns over 256 one-cell rows: 1.5 KB that markdown-it fills out to
# 65,536 cells, its limit for one table.
TABLE_BOMB = "|" + "a|" * 256 + "\n|" + "-|" * 256 + "\n" + "a\n" * 256 + "\n"


def repeat(unit: str) -> Callable[[int], str]:
    return lambda n: (unit * (n // len(unit) + 1))[:n]


PATTERNS: dict[str, Callable[[int], str]] = {
    "brackets": repeat("["),
    "images": repeat("!["),
    "links": repeat("[a]("),
    "asterisks": repeat("*"),
    "emphasis": repeat("*a**"),
    "underscores": repeat("_a__"),
    "backticks": repeat("`a "),
    "quotes": lambda n: "\n".join("> " * (i % 50 + 1) + "x" for i in range(n // 20))[:n],
    "list items": repeat("- a\n"),
    "table rows": lambda n: ("| a | b |\n|---|---|\n" + "| x | y |\n" * (n // 10))[:n],
    "tables": lambda n: (TABLE_BOMB * (n // len(TABLE_BOMB) + 1))[:n],
    # Code blocks in the language whose lexer was slowest within core.highlight's
    # bounds: lines of 300 symbols, quotes and escapes.
    "css code": repeat(
        "```css\n" + "\n".join(["<{[(\"'`/*\\#$@%&|;:,.!?-+=~^" * 11] * 3) + "\n```\n"
    ),
    "prose": repeat("Some **bold** and _italic_ text, `code` and a [link](https://x.org). "),
}


def timed(function: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = function(*args, **kwargs)
    return time.perf_counter() - started, result


def costs(lengths: tuple[int, int] = (5_000, 20_000)) -> list[dict[str, Any]]:
    """markdown-it and nh3 with the app's options but no size limit, then the app's renderer."""
    import nh3
    from markdown_it import MarkdownIt

    from core import markdown

    parser = MarkdownIt("commonmark", {"html": False, "breaks": True})
    parser.enable(["table", "strikethrough"])
    allowed = {"tags": markdown.ALLOWED_TAGS, "attributes": markdown.ALLOWED_ATTRIBUTES}
    rows = []
    for name, pattern in PATTERNS.items():
        row: dict[str, Any] = {"pattern": name}
        for length in lengths:
            parse, html = timed(parser.render, pattern(length))
            clean, _ = timed(nh3.clean, html, **allowed)
            per = 10_000 / length * 1000
            row[f"markdown_it_ms_per_10k_at_{length}"] = round(parse * per, 1)
            row[f"nh3_ms_per_10k_at_{length}"] = round(clean * per, 1)
            row[f"html_kb_at_{length}"] = len(html) // 1000
        for length in (20_000, 60_000):
            app, _ = timed(markdown.render_markdown, pattern(length))
            row[f"app_ms_at_{length}"] = round(app * 1000, 1)
        rows.append(row)
    return rows


def serve_llm(pattern: str, length: int, deltas: int, interval: float) -> None:
    """The scripted LLM of the `healthz` part: every request gets the same answer."""
    from tests.support.scripted_llm import Reply, ScriptedLLM

    text = PATTERNS[pattern](length)
    size = -(-len(text) // deltas)
    reply = Reply(
        deltas=[text[i : i + size] for i in range(0, len(text), size)],
        delay=interval,
        usage={"prompt_tokens": 20, "completion_tokens": length},
    )
    llm = ScriptedLLM()
    llm.next_reply = lambda body: reply  # type: ignore[method-assign]
    host, port = llm.server.socket.getsockname()[:2]
    print(f"http://{host}:{port}/v1 {llm.api_key}", flush=True)
    llm.server.serve_forever()


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples) or [float("nan")]
    return {
        "requests": len(ordered),
        "p50_ms": round(statistics.median(ordered), 1),
        "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 1),
        "max_ms": round(ordered[-1], 1),
    }


def poll_health(port: int, stop: threading.Event, samples: list[float], failed: list[str]) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=60).read()
        except urllib.error.HTTPError:  # answered: 503 for the job cluster it does not start
            samples.append((time.perf_counter() - started) * 1000)
        except OSError as exc:  # counted apart: a failed request has no latency
            failed.append(repr(exc))
        else:
            samples.append((time.perf_counter() - started) * 1000)
        stop.wait(0.01)


async def answer_while_polling(port: int, cookie: str, key: str) -> dict[str, Any]:
    """One answer, /healthz polled from the message to the answer's `done` (or
    to the socket's failure, which is reported)."""
    from tests.support.processes import chat_socket, until_done

    samples: list[float] = []
    failed: list[str] = []
    stop = threading.Event()
    poller = threading.Thread(target=poll_health, args=(port, stop, samples, failed))
    started = time.perf_counter()
    try:
        async with chat_socket(port, cookie, key) as socket:
            poller.start()
            await socket.send(json.dumps({"type": "message", "text": "Write it all out"}))
            outcome = (await until_done(socket, seconds=600))[-1]["status"]
    except Exception as exc:  # the server failed this answer: say how, keep the figures
        outcome = repr(exc)[:80]
    finally:
        took = time.perf_counter() - started
        stop.set()
        if poller.is_alive():
            poller.join()
    figures = {"answer_s": round(took, 2), **percentiles(samples), "failed": len(failed)}
    return {**figures, "outcome": outcome}


def healthz(answers: list[str], deltas: int, interval: float) -> list[dict[str, Any]]:
    from tests.support.processes import (
        app_env,
        free_port,
        logged_in_chat,
        start_daphne,
        stop_process,
    )

    rows = []
    for answer in answers:
        pattern, _, length = answer.partition(":")
        llm = subprocess.Popen(
            [sys.executable, __file__, "--serve-llm", pattern, length, str(deltas), str(interval)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert llm.stdout is not None
        try:
            llm_url, llm_key = llm.stdout.readline().split()
            with tempfile.TemporaryDirectory() as data_dir:
                env = app_env(data_dir, NEOTASK_LLM_BASE_URL=llm_url, NEOTASK_LLM_API_KEY=llm_key)
                cookie, key = logged_in_chat(env, "bench", migrate=True)
                port = free_port()
                server = start_daphne(env, port)
                try:
                    asyncio.run(answer_while_polling(port, cookie, key))  # warm-up
                    row = {"answer": answer, **asyncio.run(answer_while_polling(port, cookie, key))}
                finally:
                    stop_process(server)
        finally:
            stop_process(llm)
        rows.append(row)
    return rows


def store_answer(pattern: str, length: int) -> str:
    """An answer of `pattern` and `length` in a new chat of the user `bench`, stored as
    an import stores it (no embedding): the chat's key. Run in the app's Django
    (tests.support.processes.run_program)."""
    from core.users import find_user
    from memory import recording
    from memory.models import EventType
    from sessions_app.chat import start_chat

    user = find_user("bench")
    session = start_chat(user)
    text = PATTERNS[pattern](length)
    for kind, data in [(EventType.USER_MESSAGE, "import"), (EventType.ASSISTANT_RESPONSE, text)]:
        recording.record(user, str(session.pk), kind, {"content": data}, embed=False)
    return session.key


def fetch(request: urllib.request.Request) -> bytes:
    with urllib.request.urlopen(request, timeout=600) as response:
        return response.read()


def page(answers: list[str], opens: int) -> list[dict[str, Any]]:
    """Each answer in a chat of its own, stored as an import stores it (no embedding)."""
    from tests.support.processes import (
        app_env,
        free_port,
        logged_in_chat,
        run_program,
        start_daphne,
        stop_process,
    )

    rows = []
    with tempfile.TemporaryDirectory() as data_dir:
        env = app_env(data_dir)
        cookie, _ = logged_in_chat(env, "bench", migrate=True)
        port = free_port()
        server = start_daphne(env, port)
        try:
            for answer in answers:
                pattern, _, length = answer.partition(":")
                key = run_program(env, "bench.render_bench:store_answer", pattern, int(length))
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/chat/{key}/",
                    headers={"Cookie": f"sessionid={cookie}"},
                )
                seconds = []
                for _ in range(opens):
                    took, body = timed(fetch, request)
                    seconds.append(took)
                rows.append(
                    {
                        "answer": answer,
                        "page_kb": len(body) // 1000,
                        "min_s": round(min(seconds), 3),
                        "median_s": round(statistics.median(seconds), 3),
                        "max_s": round(max(seconds), 3),
                    }
                )
        finally:
            stop_process(server)
    return rows


def print_rows(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    columns = list(dict.fromkeys(c for row in rows for c in row))
    widths = {c: max(len(c), *(len(str(row.get(c, ""))) for row in rows)) for c in columns}
    print("  ".join(c.rjust(w) for c, w in widths.items()))
    for row in rows:
        print("  ".join(str(row.get(c, "")).rjust(w) for c, w in widths.items()))


def main() -> None:
    if sys.argv[1:2] == ["--serve-llm"]:
        pattern, length, deltas, interval = sys.argv[2:6]
        serve_llm(pattern, int(length), int(deltas), float(interval))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", nargs="+", default=["costs", "healthz", "page"])
    parser.add_argument("--answer", nargs="+", default=["brackets:60000"], help="pattern:chars")
    parser.add_argument("--deltas", type=int, default=600, help="deltas per streamed answer")
    parser.add_argument("--interval", type=float, default=0.005, help="seconds between deltas")
    parser.add_argument("--page-answer", nargs="+", default=["brackets:300000"])
    parser.add_argument("--opens", type=int, default=3, help="GETs of each chat page")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    results: dict[str, Any] = {}
    if "costs" in options.parts:
        results["costs"] = costs()
    if "healthz" in options.parts:
        results["healthz"] = healthz(options.answer, options.deltas, options.interval)
    if "page" in options.parts:
        results["page"] = page(options.page_answer, options.opens)
    if options.json:
        print(json.dumps(results, indent=2))
        return
    titles = {
        "costs": "markdown-it and nh3 (no size limit), ms per 10,000 characters; the app's, ms",
        "healthz": "/healthz on the daphne process streaming and rendering the answer",
        "page": "GET of a chat page holding one long answer, seconds",
    }
    for part, rows in results.items():
        print_rows(titles[part], rows)


if __name__ == "__main__":
    main()
