"""A cgroup per sandbox: the memory and the processes of one command, all of them
together, not each process on its own.

An rlimit binds one process: six processes under a 100 MB address-space limit
held 470 MB. A cgroup's `memory.max` (v1: `memory.limit_in_bytes`) and
`pids.max` count every process and thread of the command, and the memory its
tmpfs files hold. Each command gets fresh groups, made under the server's own
group where it can (a limit set above the server still holds), and removed after.

No Django imports: settings.py checks the sandbox at start-up.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids")
REMOVE_WAIT_SECONDS = 5.0


@dataclass(frozen=True)
class Parent:
    """A cgroup directory where a sandbox's group can be made, for one controller."""

    path: Path
    v2: bool


def own_group(hierarchy: str) -> str:
    """This process's group in a hierarchy ("" for v2's unified one), from /proc."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, names, path = line.split(":", 2)
            if hierarchy in names.split(",") or (hierarchy == "" and names == ""):
                return path.lstrip("/")
    return ""


def usable(path: Path) -> bool:
    return (path / "cgroup.procs").exists() and os.access(path, os.W_OK)


def find_parent(controller: str) -> Parent | None:
    """Where a group with this controller can be made: under the server's own group
    first, else at the hierarchy's root; v2 needs the controller delegated there."""
    if (ROOT / "cgroup.controllers").exists():  # the unified hierarchy (v2)
        for path in (ROOT / own_group(""), ROOT):
            enabled = path / "cgroup.subtree_control"
            if usable(path) and enabled.exists() and controller in enabled.read_text().split():
                return Parent(path, v2=True)
        return None
    top = ROOT / controller  # a v1 hierarchy of its own
    for path in (top / own_group(controller), top):
        if usable(path):
            return Parent(path, v2=False)
    return None


@dataclass
class Group:
    """The groups one sandbox runs in; `procs` are the files its first process joins."""

    memory: Path | None = None
    pids: Path | None = None
    v2_memory: bool = False
    made: list[Path] = field(default_factory=list)

    @property
    def procs(self) -> list[Path]:
        return [group / "cgroup.procs" for group in dict.fromkeys(self.made)]

    def memory_peak(self) -> int | None:
        """The most memory the sandbox held at once, where the kernel says."""
        if self.memory is None:
            return None
        name = "memory.peak" if self.v2_memory else "memory.max_usage_in_bytes"
        try:
            return int((self.memory / name).read_text())
        except (OSError, ValueError):
            return None


def write(path: Path, value: int | str) -> None:
    path.write_text(str(value))


def limit_memory(group: Path, v2: bool, memory_bytes: int) -> None:
    if v2:
        write(group / "memory.max", memory_bytes)
        if (group / "memory.swap.max").exists():
            write(group / "memory.swap.max", 0)  # swap is memory too
        return
    write(group / "memory.limit_in_bytes", memory_bytes)
    swap = group / "memory.memsw.limit_in_bytes"  # present when swap is accounted
    if swap.exists():
        write(swap, memory_bytes)


def remove(group: Path) -> None:
    # The sandbox's processes are gone by now, but their exit is asynchronous.
    deadline = time.monotonic() + REMOVE_WAIT_SECONDS
    while True:
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)


@contextlib.contextmanager
def sandbox_group(memory_bytes: int, processes: int) -> Iterator[Group]:
    """Fresh groups capping memory and processes, for the controllers this machine
    lets the server use; a controller it cannot use is left out (see `in_force`)."""
    group = Group()
    name = f"neotask-{secrets.token_hex(6)}"
    try:
        for controller in CONTROLLERS:
            parent = find_parent(controller)
            if parent is None:
                continue
            path = parent.path / name
            if path not in group.made:
                path.mkdir()
                group.made.append(path)
            if controller == "memory":
                limit_memory(path, parent.v2, memory_bytes)
                group.memory, group.v2_memory = path, parent.v2
            else:
                write(path / "pids.max", processes)
                group.pids = path
        yield group
    finally:
        for path in reversed(group.made):
            remove(path)


@dataclass(frozen=True)
class InForce:
    """Which of the sandbox's limits bind the whole sandbox, on this machine."""

    memory: bool
    pids: bool

    def describe(self, memory_mb: int, processes: int) -> str:
        per_process = memory_mb // processes
        memory = (
            f"{memory_mb} MB for the whole sandbox (a memory cgroup)"
            if self.memory
            else f"{per_process} MB of address space per process, {processes} processes at "
            f"most (no memory cgroup here: {memory_mb} MB / max_processes)"
        )
        pids = "a pids cgroup" if self.pids else "RLIMIT_NPROC"
        return f"memory: {memory}; processes: {processes} ({pids})"


def in_force() -> InForce:
    return InForce(memory=find_parent("memory") is not None, pids=find_parent("pids") is not None)
