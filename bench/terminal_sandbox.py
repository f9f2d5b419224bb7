"""Start-up cost of one terminal command: a sandboxed `true` against an unconfined one.

Runs the terminal tool's own code path (agent.sandbox) with the default
[terminal] limits; prints the median and 95th percentile of `--runs` runs.

    .venv/bin/python bench/terminal_sandbox.py [--runs 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent import sandbox  # noqa: E402  (no Django needed)
from neotask_site.config import SCHEMA  # noqa: E402


def percentiles(run: Callable[[], object], runs: int) -> tuple[float, float]:
    run()  # the first start warms the page cache
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return statistics.median(times), times[max(0, round(runs * 0.95) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    runs = parser.parse_args().runs
    options = {key: option.default for key, option in SCHEMA["terminal"].items()}
    limits = sandbox.Limits.from_options(options)
    with tempfile.TemporaryDirectory() as workspace:
        cases = {
            "sandboxed": lambda: sandbox.run_sandboxed(Path(workspace), "true", limits, False),
            "sandboxed, network on": lambda: sandbox.run_sandboxed(
                Path(workspace), "true", limits, True
            ),
            'unconfined (sandbox = "none")': lambda: sandbox.run_unconfined(
                Path(workspace), "true", limits
            ),
        }
        as_root = " (as root: with a pids cgroup)" if sandbox.runs_as_root() else ""
        print(f"`true`, {runs} runs{as_root}")
        for name, run in cases.items():
            median, p95 = percentiles(run, runs)
            print(f"  {name:30} median {median:5.1f} ms   p95 {p95:5.1f} ms")


if __name__ == "__main__":
    main()
