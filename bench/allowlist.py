"""What the allow-list costs a command: parsing it against the table, and for a
git command a rule covers, the repository's config read in the sandbox first.

    .venv/bin/python bench/allowlist.py [--runs 50]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent import rules, safe_git, sandbox  # noqa: E402  (no Django needed)
from bench.terminal_sandbox import percentiles  # noqa: E402
from core.config import SCHEMA  # noqa: E402

COMMANDS = [
    "ls -la memory",
    "grep -rn --include='*.md' 'TODO:' memory",
    "git --no-pager log -n5 --oneline --stat -- memory",
    "find . -maxdepth 0 ${U:--exec} sh memory/p.md {} +",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    runs = parser.parse_args().runs
    print(f"rules.rule_for, {runs * 100} runs each")
    for command in COMMANDS:
        started = time.perf_counter()
        for _ in range(runs * 100):
            rules.rule_for(command)
        each = (time.perf_counter() - started) / (runs * 100) * 1e6
        print(f"  {each:6.1f} µs  {command}")

    options = {key: option.default for key, option in SCHEMA["terminal"].items()}
    limits = sandbox.Limits.from_options(options)
    with tempfile.TemporaryDirectory() as workspace:
        subprocess.run(["git", "init", "-q", workspace], check=True)
        as_root = " (as root: with a pids cgroup)" if sandbox.runs_as_root() else ""
        print(f"a git repository's config read first, {runs} runs{as_root}")
        for name, run in {
            "`git status`": lambda: sandbox.run_sandboxed(
                Path(workspace), "git status", limits, False
            ),
            f"`{safe_git.LIST_CONFIG}`": lambda: sandbox.run_sandboxed(
                Path(workspace), safe_git.LIST_CONFIG, limits, False
            ),
        }.items():
            median, p95 = percentiles(run, runs)
            print(f"  median {median:5.1f} ms   p95 {p95:5.1f} ms  {name}")


if __name__ == "__main__":
    main()
