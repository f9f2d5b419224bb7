"""`python3 -m tests.programs.sandboxed WORKSPACE COMMAND`, from the repository
and without its virtualenv (the system's python3, as another user): runs
COMMAND in the terminal's sandbox in WORKSPACE, with small limits, and prints
its output."""

from __future__ import annotations

import sys
from pathlib import Path

from agent import sandbox


def main() -> None:
    workspace, command = sys.argv[1:3]
    limits = sandbox.Limits(10, 5, 256 << 20, 1 << 20, 16, 4096, 1 << 20)
    outcome = sandbox.run_sandboxed(Path(workspace), command, limits, False)
    sys.stdout.write(outcome.output.decode())


if __name__ == "__main__":
    main()
