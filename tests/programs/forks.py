"""Runs in a sandbox under the system's python3, copied into the workspace:
`python3 forks.py` forks children that sleep (616.1 s) until it has made 100 or a
fork is refused, and then prints "refused after N <why>"."""

from __future__ import annotations

import os
import time


def main() -> None:
    started = 0
    try:
        while started < 100:
            if os.fork() == 0:
                time.sleep(616.1)
                os._exit(0)
            started += 1
    except OSError as error:
        print("refused after", started, error.strerror)


if __name__ == "__main__":
    main()
