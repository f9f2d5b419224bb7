"""Runs in a sandbox under the system's python3, copied into the workspace:
`python3 swapper.py ALICES_FILE ALICES_MEMORY_DIR SECRET` swaps names in
/workspace/memory with links to those three, in a loop (rename over a name, and
renameat2's RENAME_EXCHANGE), until /workspace/stop exists; it prints "ready"
once its links are made, and how many rounds it swapped at the end."""

from __future__ import annotations

import ctypes
import os
import sys

EXCHANGE = 2  # RENAME_EXCHANGE
AT = -100  # AT_FDCWD

libc = ctypes.CDLL(None, use_errno=True)


def exchange(a: str, b: str) -> None:
    libc.renameat2(AT, a.encode(), AT, b.encode(), EXCHANGE)


def main() -> None:
    alice_file, alice_memory, secret = sys.argv[1:4]
    os.chdir("/workspace/memory")
    os.symlink(alice_file, ".to-alice")
    os.symlink(secret, ".to-secret")
    os.symlink(alice_memory, ".to-alice-dir")
    print("ready", flush=True)
    n = 0
    while not os.path.exists("/workspace/stop"):
        n += 1
        exchange("race.md", ".to-alice")
        exchange("race.md", ".to-alice")
        exchange("race.md", ".to-secret")
        exchange("race.md", ".to-secret")
        exchange("sub", ".to-alice-dir")
        exchange("sub", ".to-alice-dir")
        # A plain rename: a fresh link over the name, then a regular file back over it.
        try:
            os.symlink(alice_file if n % 2 else secret, ".new-link")
            os.rename(".new-link", "swapped.md")
            with open(".new-file", "w") as handle:
                handle.write("bob's swapped note\n")
            os.rename(".new-file", "swapped.md")
        except OSError:
            pass
    print("swaps", n)


if __name__ == "__main__":
    main()
