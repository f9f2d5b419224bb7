"""Document bombs against a running server: what each upload costs daphne's memory,
and how /healthz answers meanwhile (issue 40, H1 and M1); and what converting in a
child process costs an ordinary document.

Two parts, each printed as a table (`--json`: one JSON document):

- `bombs`: daphne in a process of its own with a fresh data dir (and, when
  DATABASE_URL is set, a fresh PostgreSQL database). Each document is posted
  through the files page's form, as a browser does, while a client asks /healthz
  of the same daphne every 10 ms; printed for each: the upload's size, the time
  to the answer, daphne's RSS before and its peak growth during the upload
  (VmHWM, reset before each), the /healthz requests' p50 / p95 / max, and the
  message shown. The documents: the test's PDF bomb (8 pages of 70 MB each once
  unpacked, 0.5 MB) and the issue's (200 pages, 13 MB), its DOCX of 9 million
  empty paragraphs (115 KB), and 13 MB of random bytes named .pdf, refused before
  any conversion: what receiving an upload of that size costs by itself; then the
  same at the 20 MB cap (a 300-page bomb, 19.5 MB, and 19.9 MB of random bytes),
  and 50 MB of random bytes (refused after Django has it: past the documents' cap,
  within the bound of a signed-in request's body, an import's).
- `ordinary`: a 500-page PDF of text, a DOCX of 6,000 paragraphs and 0.7 MB of
  HTML converted through `memory.documents.convert` (in the child) and by the
  same code in this process: the child's cost.

With `--py-spy DIR`, py-spy records daphne during each upload (`--idle --threads`,
200 Hz, folded stacks in DIR/<document>.txt) and each row also says how many of
its event loop's samples were busy and in which functions most.

    .venv/bin/python bench/document_bombs.py [--parts bombs ordinary] [--json] [--py-spy DIR]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.documents import (  # noqa: E402
    make_pdf,
    paragraph_bomb_docx,
    per_page_streams_pdf,
)
from tests.support.processes import (  # noqa: E402
    app_env,
    free_port,
    logged_in_chat,
    manage,
    start_daphne,
    stop_process,
)
from tests.support.uploads import Browser, HealthPoller, reset_peak, status_bytes  # noqa: E402

MB = 1024 * 1024


def long_docx(paragraphs: int) -> bytes:
    import docx

    document = docx.Document()
    for n in range(paragraphs):
        if n % 50 == 0:
            document.add_heading(f"Section {n // 50 + 1}", level=2)
        document.add_paragraph(f"Paragraph {n}: the budget line for item {n} is {n * 7} euros.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def bomb_documents() -> list[tuple[str, bytes]]:
    return [
        ("bomb-8-pages.pdf", per_page_streams_pdf(8)),
        ("bomb-200-pages.pdf", per_page_streams_pdf(200)),
        ("bomb-9000000-paragraphs.docx", paragraph_bomb_docx(9_000_000)),
        ("random-13-mb.pdf", os.urandom(13 * MB)),
        ("bomb-300-pages.pdf", per_page_streams_pdf(300)),
        ("random-20-mb.pdf", os.urandom(20 * MB - 100_000)),
        ("random-50-mb.pdf", os.urandom(50 * MB)),  # past the cap, within an import's
    ]


def ordinary_documents() -> list[tuple[str, bytes]]:
    lines = [f"Line {n} of the quarterly report, with figures: {n * 13} euros." for n in range(30)]
    section = "<h2>Garden</h2><p>Water the <b>tomatoes</b> every morning &amp; evening.</p>"
    return [
        ("report-500-pages.pdf", make_pdf([lines] * 500)),
        ("notes-6000-paragraphs.docx", long_docx(6000)),
        ("page-0.7-mb.html", ("<html><body>" + section * 9000 + "</body></html>").encode()),
    ]


def ordinary() -> list[dict[str, Any]]:
    """Each document converted in the child and in this process, best of three."""
    import django

    os.environ.update(NEOTASK_CONFIG="", DJANGO_SETTINGS_MODULE="neotask_site.settings")
    with tempfile.TemporaryDirectory(prefix="neotask-bombs-") as data_dir:
        os.environ["NEOTASK_DATA_DIR"] = data_dir
        django.setup()
        from memory import document_formats, documents

        rows = []
        for name, data in ordinary_documents():
            kind = documents.KINDS[Path(name).suffix]
            child = min(timed(documents.convert, name, data) for _ in range(3))
            inside = min(
                timed(document_formats.convert, name, kind, data, documents.limits())
                for _ in range(3)
            )
            markdown = documents.convert(name, data).markdown
            rows.append(
                {
                    "document": name,
                    "upload_mb": round(len(data) / MB, 2),
                    "markdown_kb": len(markdown.encode()) // 1000,
                    "in_child_s": round(child, 2),
                    "in_process_s": round(inside, 2),
                }
            )
        return rows


def timed(function: Any, *args: Any) -> float:
    started = time.perf_counter()
    function(*args)
    return time.perf_counter() - started


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples) or [float("nan")]
    return {
        "healthz_requests": len(samples),
        "healthz_p50_ms": round(statistics.median(ordered), 1),
        "healthz_p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 1),
        "healthz_max_ms": round(ordered[-1], 1),
    }


@contextlib.contextmanager
def recorded(pid: int, profile: Path | None):
    """py-spy recording `pid` meanwhile into `profile`, when there is one."""
    if profile is None:
        yield
        return
    spy = Path(sys.executable).with_name("py-spy")
    command = [str(spy), "record", "--idle", "--threads", "-r", "200", "-f", "raw"]
    recorder = subprocess.Popen(
        [*command, "-o", str(profile), "-p", str(pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1)  # attached
    try:
        yield
    finally:
        recorder.send_signal(signal.SIGINT)  # it writes the file and exits
        recorder.wait(timeout=30)


STANDARD_LIBRARY: tuple[str, ...] = ("<", "asyncio/", "concurrent/", "email/", "selectors.py")
STANDARD_LIBRARY += ("tempfile.py", "threading.py", "queue.py", "subprocess.py", "contextlib.py")


def loop_costs(profile: Path) -> dict[str, Any]:
    """Of daphne's main thread (Twisted's reactor, the asyncio event loop): its samples
    not waiting in select, and the functions most of them were in (the innermost
    one not of the standard library: the email package's parser is counted as the
    Twisted function that called it)."""
    busy: collections.Counter[str] = collections.Counter()
    for line in profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if "MainThread" not in frames[0] or frames[-1].startswith("EpollSelector.select"):
            continue
        ours = [f for f in frames[1:] if not f.split(" (")[-1].startswith(STANDARD_LIBRARY)]
        busy[ours[-1].split(" (")[0] if ours else frames[-1].split(" (")[0]] += int(count)
    top = ", ".join(f"{name} {count}" for name, count in busy.most_common(4))
    return {"loop_busy_samples": sum(busy.values()), "loop_top": top}


def bombs(profiles: Path | None = None) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="neotask-bombs-") as data_dir:
        env = app_env(data_dir)
        manage(env, "migrate", "-v0")
        session, _ = logged_in_chat(env, "bench")
        port = free_port()
        server = start_daphne(env, port)
        try:
            browser = Browser(port, session)
            browser.add_document("warm-up.pdf", b"not a PDF")  # the view's first-time costs
            before = reset_peak(server.pid)
            with HealthPoller(port) as health:
                time.sleep(3)
            rows.append(idle_row(before, server.pid, health))
            for name, data in bomb_documents():
                profile = profiles / f"{name}.txt" if profiles else None
                with recorded(server.pid, profile):
                    before = reset_peak(server.pid)
                    with HealthPoller(port) as health:
                        started = time.perf_counter()
                        shown = browser.add_document(name, data)
                        seconds = time.perf_counter() - started
                    growth = status_bytes(server.pid, "VmHWM") - before
                rows.append(
                    {
                        "document": name,
                        "upload_mb": round(len(data) / MB, 2),
                        "answer_s": round(seconds, 2),
                        "daphne_rss_mb": round(before / MB),
                        "daphne_peak_growth_mb": round(growth / MB, 1),
                        **percentiles(health.latencies),
                        "healthz_failed": len(health.failures),
                        **(loop_costs(profile) if profile else {}),
                        "shown": shown.removeprefix("Not added to memory: "),
                    }
                )
            browser.close()
        finally:
            stop_process(server)
    return rows


def idle_row(before: int, pid: int, health: HealthPoller) -> dict[str, Any]:
    """/healthz for 3 s with no upload: what the machine gives without a bomb."""
    return {
        "document": "(none, 3 s)",
        "upload_mb": 0,
        "answer_s": 0,
        "daphne_rss_mb": round(before / MB),
        "daphne_peak_growth_mb": round((status_bytes(pid, "VmHWM") - before) / MB, 1),
        **percentiles(health.latencies),
        "healthz_failed": len(health.failures),
    }


def print_table(title: str, rows: list[dict[str, Any]]) -> None:
    columns = [key for key in rows[-1] if key not in ("shown", "loop_top")]
    print(f"\n{title}\n" + " | ".join(columns))
    for row in rows:
        print(" | ".join(str(row.get(key, "")) for key in columns))
        for extra in ("loop_top", "shown"):
            if extra in row:
                print(f"    {row[extra]}")


PARTS: dict[str, Callable[[], list[dict[str, Any]]]] = {"bombs": bombs, "ordinary": ordinary}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--parts", nargs="+", choices=list(PARTS), default=list(PARTS))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--py-spy", type=Path, metavar="DIR", help="profile each upload")
    options = parser.parse_args()
    if options.py_spy:
        options.py_spy.mkdir(parents=True, exist_ok=True)
    parts: dict[str, Callable[[], list[dict[str, Any]]]] = {
        **PARTS,
        "bombs": functools.partial(bombs, options.py_spy),
    }
    results = {part: parts[part]() for part in options.parts}
    if options.json:
        print(json.dumps(results, indent=2))
        return
    for part, rows in results.items():
        print_table(part, rows)


if __name__ == "__main__":
    main()
