"""Where terminal commands run: a bubblewrap sandbox holding the agent's workspace
and nothing else of the server's, under hard limits of time, CPU, memory, file
size, processes and output. Memory and processes are capped for the sandbox as a
whole by cgroups (agent.cgroups) where the server can make them; elsewhere each
process gets memory_mb / max_processes, so that together they cannot pass memory_mb.

No Django imports: settings.py calls `problem()` at start-up, before Django is set up.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agent import cgroups
from agent.safe_git import GIT_SAFE_ENV

PACKAGE = "bubblewrap"
# Inside the sandbox the workspace always has this name: a command learns
# neither the data dir's location nor the owner's id from its own cwd.
WORKSPACE = "/workspace"
PATH = "/usr/local/bin:/usr/bin:/bin"
SANDBOX_UID = 65534  # "nobody" inside; the server's own uid outside
# System directories, read-only. On merged-/usr systems the top-level ones are
# symlinks into /usr and are recreated as such.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What programs need of /etc, and no more: never the whole directory, which
# holds keys and shadow files readable to a server running as root.
ETC_FILES = (
    "alternatives",
    "ca-certificates",
    "ssl/certs",
    "gai.conf",
    "group",
    "host.conf",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "magic",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "protocols",
    "resolv.conf",
    "services",
    "timezone",
)
KILL_WAIT_SECONDS = 5.0
# How often a command's `stop_when` is asked (it may answer from what it last saw).
WATCH_SECONDS = 0.05
# Below this, a process cannot even start a shell: with no memory cgroup,
# memory_mb / max_processes must leave each process at least this much.
MIN_PROCESS_MB = 16
MB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    wall_seconds: float
    cpu_seconds: int
    memory_bytes: int
    file_size_bytes: int
    processes: int
    output_bytes: int
    tmp_bytes: int

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> Limits:
        """From the [terminal] section of the config."""
        return cls(
            wall_seconds=options["timeout_seconds"],
            cpu_seconds=options["cpu_seconds"],
            memory_bytes=options["memory_mb"] * MB,
            file_size_bytes=options["file_size_mb"] * MB,
            processes=options["max_processes"],
            output_bytes=options["output_limit_bytes"],
            tmp_bytes=options["tmp_size_mb"] * MB,
        )

    def per_process_memory(self, group: cgroups.Group | None) -> int:
        """RLIMIT_AS: the whole allowance under a memory cgroup (one process cannot
        pass the group's cap anyway; the rlimit makes it a MemoryError rather than
        the OOM killer), else a share that `processes` of them cannot exceed."""
        if group is not None and group.memory is not None:
            return self.memory_bytes
        return self.memory_bytes // self.processes


@dataclass(frozen=True)
class Outcome:
    exit_code: int | None  # None when the command was stopped
    output: bytes  # at most Limits.output_bytes
    timed_out: bool = False
    output_cut: bool = False
    stopped_because: str | None = None  # what `stop_when` said
    memory_peak_bytes: int | None = None  # the sandbox's, where a memory cgroup tells

    @property
    def ending(self) -> str:
        """How the command ended, in a word (the sandbox-runs metric's label)."""
        if self.timed_out:
            return "timed_out"
        if self.stopped_because:
            return "stopped"
        if self.output_cut:
            return "output_cut"
        return "exited" if self.exit_code == 0 else "failed"


class SandboxError(RuntimeError):
    """The sandbox cannot run; the message says what to install or configure."""


def bwrap_path() -> str | None:
    return shutil.which("bwrap", path=os.environ.get("PATH", PATH))


def prlimit_path() -> str:
    # util-linux is essential on Debian; the sandbox sees it under /usr.
    return shutil.which("prlimit", path=PATH) or "/usr/bin/prlimit"


def rlimits(limits: Limits, processes: bool, address_space: int) -> list[str]:
    """prlimit's arguments; a single value sets the soft and the hard limit,
    so the command cannot raise them again."""
    arguments = [
        prlimit_path(),
        f"--cpu={limits.cpu_seconds}",
        f"--as={address_space}",
        f"--fsize={limits.file_size_bytes}",
        "--core=0",
    ]
    if processes:
        arguments.append(f"--nproc={limits.processes}")
    return [*arguments, "--"]


def system_mounts() -> list[str]:
    arguments: list[str] = []
    for directory in SYSTEM_DIRS:
        path = Path(directory)
        if path.is_symlink():
            arguments += ["--symlink", os.readlink(path), directory]
        elif path.is_dir():
            arguments += ["--ro-bind", directory, directory]
    for name in ETC_FILES:
        arguments += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return arguments


def bwrap_options(workspace: Path, limits: Limits, network: bool) -> list[str]:
    """bwrap's options, everything but the command."""
    return [
        "--unshare-all",
        "--unshare-user",  # --unshare-all only tries it, and it is what drops root
        "--disable-userns",  # no nested namespace to regain capabilities in
        *(["--share-net"] if network else []),
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
        "--cap-drop",
        "ALL",
        "--hostname",
        "neotask",
        "--die-with-parent",
        "--new-session",  # no TIOCSTI into the server's terminal
        "--clearenv",
        "--setenv",
        "PATH",
        PATH,
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "HOME",
        WORKSPACE,
        *[option for item in GIT_SAFE_ENV.items() for option in ("--setenv", *item)],
        *system_mounts(),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        # Every tmpfs has a size, or is read-only: /tmp and /dev/shm are capped
        # (and, under a memory cgroup, count as the sandbox's memory); / and
        # /dev are remounted read-only once everything is in place.
        "--size",
        str(limits.tmp_bytes),
        "--tmpfs",
        "/dev/shm",
        "--size",
        str(limits.tmp_bytes),
        "--tmpfs",
        "/tmp",
        "--bind",
        str(workspace),
        WORKSPACE,
        "--remount-ro",
        "/dev",
        "--remount-ro",
        "/",
        "--chdir",
        WORKSPACE,
    ]


def inside(command: str, limits: Limits, group: cgroups.Group | None) -> list[str]:
    """What bwrap runs: the rlimits, then the shell."""
    address_space = limits.per_process_memory(group)
    return ["--", *rlimits(limits, True, address_space), "/bin/sh", "-c", command]


def unconfined_command(command: str, limits: Limits) -> list[str]:
    """`[terminal] sandbox = "none"`: the limits that need no namespace, no more.
    RLIMIT_NPROC would count every process of the server's user, so it is not set;
    without a memory cgroup, nothing caps how many processes share memory_mb."""
    return [*rlimits(limits, False, limits.memory_bytes), "/bin/sh", "-c", command]


def runs_as_root() -> bool:
    return os.getuid() == 0


def joined(group: cgroups.Group, argv: list[str]) -> list[str]:
    """argv, started by a shell that first joins the sandbox's groups: no process
    of the command ever runs outside them."""
    if not group.procs:
        return argv
    join = 'for procs; do [ "$procs" = -- ] && break; echo 0 > "$procs"; shift; done; shift'
    return ["/bin/sh", "-ec", f'{join}; exec "$@"', "sh", *map(str, group.procs), "--", *argv]


def run_sandboxed(
    workspace: Path,
    command: str,
    limits: Limits,
    network: bool,
    stop_when: Callable[[], str | None] | None = None,
) -> Outcome:
    bwrap = bwrap_path()
    if bwrap is None:
        raise SandboxError(f"bwrap is not installed (Debian package `{PACKAGE}`).")
    with cgroups.sandbox_group(limits.memory_bytes, limits.processes) as group:
        if runs_as_root() and group.pids is None:
            raise SandboxError(
                "Neotask runs as root, and the kernel does not cap root's processes with "
                "rlimits: the terminal needs a writable pids cgroup, or run Neotask as an "
                "ordinary user."
            )
        argv = [bwrap, *bwrap_options(workspace, limits, network), *inside(command, limits, group)]
        outcome = collect(joined(group, argv), workspace, {"PATH": PATH}, limits, stop_when)
        return replace(outcome, memory_peak_bytes=group.memory_peak())


def run_unconfined(
    workspace: Path,
    command: str,
    limits: Limits,
    stop_when: Callable[[], str | None] | None = None,
) -> Outcome:
    env = {"PATH": PATH, "LANG": "C.UTF-8", "HOME": str(workspace), **GIT_SAFE_ENV}
    # Git must not find a repository above the workspace (the data dir may sit in one).
    env["GIT_CEILING_DIRECTORIES"] = str(workspace.parent)
    with cgroups.sandbox_group(limits.memory_bytes, limits.processes) as group:
        argv = joined(group, unconfined_command(command, limits))
        outcome = collect(argv, workspace, env, limits, stop_when)
        return replace(outcome, memory_peak_bytes=group.memory_peak())


def collect(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    limits: Limits,
    stop_when: Callable[[], str | None] | None = None,
) -> Outcome:
    """Run argv, reading its output as it comes: stop it at the wall-clock limit,
    as soon as it passes the output limit, or when `stop_when` (asked every
    WATCH_SECONDS) gives a reason, so neither time nor memory is unbounded,
    whatever the command does with its descendants."""
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # one process group to kill
    )
    assert process.stdout is not None
    output = bytearray()
    timed_out = cut = False
    because: str | None = None
    deadline = time.monotonic() + limits.wall_seconds
    watch_at = time.monotonic() + WATCH_SECONDS
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while True:
                now = time.monotonic()
                if now >= deadline:
                    timed_out = True
                    break
                if stop_when is not None and now >= watch_at:
                    if because := stop_when():
                        break
                    watch_at = time.monotonic() + WATCH_SECONDS
                wait = deadline if stop_when is None else min(deadline, watch_at)
                if not selector.select(max(0.0, wait - now)):
                    continue
                chunk = os.read(process.stdout.fileno(), 65536)
                if not chunk:
                    break  # every writer closed its end
                output += chunk
                if len(output) > limits.output_bytes:
                    cut = True
                    del output[limits.output_bytes :]
                    break
        while not (timed_out or cut or because):
            # The output is closed; the command may still run (and write).
            try:
                process.wait(timeout=max(0.0, min(deadline, watch_at) - time.monotonic()))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    timed_out = True
                elif stop_when is not None:
                    because = stop_when()
                    watch_at = time.monotonic() + WATCH_SECONDS
    finally:
        stopped = process.poll() is None
        # The whole group: bwrap, and with it (--die-with-parent, then the pid
        # namespace's end) everything inside; unconfined, the shell's group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=KILL_WAIT_SECONDS)
        process.stdout.close()
    return Outcome(
        exit_code=None if stopped else process.returncode,
        output=bytes(output),
        timed_out=timed_out,
        output_cut=cut,
        stopped_because=because,
    )


def problem(options: Mapping[str, Any]) -> str | None:
    """Why terminal commands cannot run with these [terminal] options, or None.

    Runs a sandboxed `true`: bwrap may be installed yet unusable (user
    namespaces disabled, or a container that forbids them)."""
    if not options["enabled"] or options["sandbox"] == "none":
        return None
    bwrap = bwrap_path()
    if bwrap is None:
        return (
            f"[terminal] enabled needs bwrap: install the Debian package `{PACKAGE}` "
            '(or set [terminal] sandbox = "none" to run commands unconfined)'
        )
    in_force = cgroups.in_force()
    if runs_as_root() and not in_force.pids:
        return (
            "[terminal] enabled: Neotask runs as root and finds no writable pids cgroup to "
            "cap the sandbox's processes; run it as an ordinary user"
        )
    per_process_mb = options["memory_mb"] // options["max_processes"]
    if not in_force.memory and per_process_mb < MIN_PROCESS_MB:
        return (
            f"[terminal] memory_mb = {options['memory_mb']} shared by max_processes = "
            f"{options['max_processes']} leaves {per_process_mb} MB per process (no memory "
            f"cgroup here caps the sandbox as a whole); give each at least {MIN_PROCESS_MB}"
        )
    limits = Limits.from_options(options)
    try:
        with tempfile.TemporaryDirectory(prefix="neotask-probe-") as empty:
            argv = [bwrap, *bwrap_options(Path(empty), limits, network=False)]
            result = subprocess.run(
                [*argv, *inside("true", limits, None)],
                capture_output=True,
                text=True,
                timeout=30,
                stdin=subprocess.DEVNULL,
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        reason = str(exc)
    else:
        if result.returncode == 0:
            return None
        reason = (result.stderr.strip().splitlines() or ["no message"])[-1]
    return (
        f"[terminal] enabled, but bwrap cannot start a sandbox here ({reason}); the Debian "
        f"package `{PACKAGE}` needs unprivileged user namespaces"
    )
