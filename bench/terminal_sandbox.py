"""Start-up cost of one terminal command: a sandboxed `true` against an unconfined one;
then what the per-sandbox limits hold against the attacks of issue 24, and what
measuring a workspace's size costs.

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

from django.conf import settings  # noqa: E402

from agent import cgroups, sandbox  # noqa: E402
from core.config import SCHEMA  # noqa: E402

# The workspace's limit is all of Neotask's settings the terminal's code reads here.
settings.configure(NEOTASK={"terminal": {"workspace_mb": 100}})

from memory.files import quota  # noqa: E402
from memory.files.workspace_fs import WorkspaceFS  # noqa: E402

MB = 1024 * 1024
HOLD = (
    'for i in $(seq 6); do python3 -c "import time; b = bytearray(60 << 20); '
    "b[::4096] = b'x' * len(b[::4096]); time.sleep(2); print('kept', flush=True)\" & done; wait"
)


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
        attacks(Path(workspace), options)
        usage_cost(Path(workspace))


def attacks(workspace: Path, options: dict) -> None:
    print(f"limits in force here: {cgroups.in_force().describe(100, options['max_processes'])}")
    limits = sandbox.Limits.from_options({**options, "memory_mb": 100})
    outcome = sandbox.run_sandboxed(workspace, HOLD, limits, False)
    kept = outcome.output.decode().count("kept")
    peak = outcome.memory_peak_bytes
    print(
        f"  6 processes x 60 MB, memory_mb = 100: {kept} kept their 60 MB"
        + (f", the sandbox's peak {peak / MB:.0f} MB" if peak else "")
    )
    fill = "; ".join(
        f"{{ head -c 512M /dev/zero > {path}; }} 2>/dev/null; echo $(wc -c 2>/dev/null < {path})"
        for path in ("/dev/shm/x", "/x", "/tmp/x")
    )
    limits = sandbox.Limits.from_options({**options, "file_size_mb": 1024})
    held = sandbox.run_sandboxed(workspace, fill, limits, False).output.decode().split("\n")
    print(
        f"  512 MB into /dev/shm, / and /tmp (tmp_size_mb = {options['tmp_size_mb']}): "
        + ", ".join(f"{int(size or 0) / MB:.0f} MB" for size in held[:3])
    )
    stop_when = quota.WorkspaceWatch(workspace)
    started = time.perf_counter()
    flood = "i=0; while :; do i=$((i+1)); head -c 4M /dev/zero > f$i; done"
    limits = sandbox.Limits.from_options({**options, "timeout_seconds": 60})
    outcome = sandbox.run_sandboxed(workspace, flood, limits, False, stop_when)
    took = time.perf_counter() - started
    with WorkspaceFS(workspace) as files:
        used = files.usage()
    print(
        f"  4 MB files in a loop, workspace_mb = 100: "
        f"{'stopped' if outcome.stopped_because else 'NOT stopped'} after {took:.2f} s "
        f"at {used / MB:.0f} MB"
    )
    sandbox.run_sandboxed(workspace, "rm -f f*", limits, False)


def usage_cost(workspace: Path) -> None:
    """What one look at the workspace's size costs (before, during and after a command)."""
    for count in (100, 20_000):
        folder = workspace / f"files{count}"
        folder.mkdir()
        for number in range(count):
            (folder / f"{number}.md").write_text("x" * 500)
        with WorkspaceFS(workspace) as files:
            median, p95 = percentiles(files.usage, 20)
        print(f"  size of a workspace of {count:6} files: median {median:6.1f}, p95 {p95:6.1f} ms")


if __name__ == "__main__":
    main()
