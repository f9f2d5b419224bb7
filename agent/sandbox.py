"""Where terminal commands run: a bubblewrap sandbox holding the agent's workspace
and nothing else of the server's, under hard limits of time, CPU, memory, file
size, processes and output.

No Django imports: settings.py calls `problem()` at start-up, before Django is set up.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
# RLIMIT_NPROC does not bind processes whose real uid is 0 (the kernel exempts
# root), so a server running as root caps processes with a pids cgroup instead.
PIDS_CGROUPS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))
KILL_WAIT_SECONDS = 5.0


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
        mb = 1024 * 1024
        return cls(
            wall_seconds=options["timeout_seconds"],
            cpu_seconds=options["cpu_seconds"],
            memory_bytes=options["memory_mb"] * mb,
            file_size_bytes=options["file_size_mb"] * mb,
            processes=options["max_processes"],
            output_bytes=options["output_limit_bytes"],
            tmp_bytes=options["tmp_size_mb"] * mb,
        )


@dataclass(frozen=True)
class Outcome:
    exit_code: int | None  # None when the command was stopped
    output: bytes  # at most Limits.output_bytes
    timed_out: bool = False
    output_cut: bool = False


class SandboxError(RuntimeError):
    """The sandbox cannot run; the message says what to install or configure."""


def bwrap_path() -> str | None:
    return shutil.which("bwrap", path=os.environ.get("PATH", PATH))


def prlimit_path() -> str:
    # util-linux is essential on Debian; the sandbox sees it under /usr.
    return shutil.which("prlimit", path=PATH) or "/usr/bin/prlimit"


def rlimits(limits: Limits, processes: bool) -> list[str]:
    """prlimit's arguments; a single value sets the soft and the hard limit,
    so the command cannot raise them again."""
    arguments = [
        prlimit_path(),
        f"--cpu={limits.cpu_seconds}",
        f"--as={limits.memory_bytes}",
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
        "--size",
        str(limits.tmp_bytes),
        "--tmpfs",
        "/tmp",
        "--bind",
        str(workspace),
        WORKSPACE,
        "--chdir",
        WORKSPACE,
    ]


def inside(command: str, limits: Limits) -> list[str]:
    """What bwrap runs: the rlimits, then the shell."""
    return ["--", *rlimits(limits, processes=True), "/bin/sh", "-c", command]


def unconfined_command(command: str, limits: Limits) -> list[str]:
    """`[terminal] sandbox = "none"`: the limits that need no namespace, no more.
    RLIMIT_NPROC would count every process of the server's user, so it is not set."""
    return [*rlimits(limits, processes=False), "/bin/sh", "-c", command]


def runs_as_root() -> bool:
    return os.getuid() == 0


def pids_cgroup_parent() -> Path | None:
    for path in PIDS_CGROUPS:
        if (path / "cgroup.procs").exists() and os.access(path, os.W_OK):
            controllers = path / "cgroup.subtree_control"
            # cgroup v2 needs the pids controller enabled for children; v1's
            # pids hierarchy has no such file and always has it.
            if controllers.exists() and "pids" not in controllers.read_text().split():
                continue
            return path
    return None


@contextlib.contextmanager
def pids_cgroup(limit: int) -> Iterator[Path]:
    """A fresh pids cgroup capped at `limit`; yields its cgroup.procs file."""
    parent = pids_cgroup_parent()
    if parent is None:
        raise SandboxError(
            "Neotask runs as root, and the kernel does not cap root's processes with "
            "rlimits: the terminal needs a writable pids cgroup, or run Neotask as an "
            "ordinary user."
        )
    group = parent / f"neotask-{secrets.token_hex(6)}"
    group.mkdir()
    try:
        (group / "pids.max").write_text(str(limit))
        yield group / "cgroup.procs"
    finally:
        # The sandbox's processes are gone by now, but their exit is asynchronous.
        deadline = time.monotonic() + KILL_WAIT_SECONDS
        while True:
            try:
                group.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)


def run_sandboxed(workspace: Path, command: str, limits: Limits, network: bool) -> Outcome:
    bwrap = bwrap_path()
    if bwrap is None:
        raise SandboxError(f"bwrap is not installed (Debian package `{PACKAGE}`).")
    argv = [bwrap, *bwrap_options(workspace, limits, network), *inside(command, limits)]
    if not runs_as_root():
        return collect(argv, workspace, {"PATH": PATH}, limits)
    with pids_cgroup(limits.processes) as procs:
        # The shell joins the cgroup, then becomes bwrap: no process of the
        # sandbox ever starts outside it.
        joined = ["/bin/sh", "-c", 'echo 0 > "$0" && exec "$@"', str(procs), *argv]
        return collect(joined, workspace, {"PATH": PATH}, limits)


def run_unconfined(workspace: Path, command: str, limits: Limits) -> Outcome:
    env = {"PATH": PATH, "LANG": "C.UTF-8", "HOME": str(workspace), **GIT_SAFE_ENV}
    return collect(unconfined_command(command, limits), workspace, env, limits)


def collect(argv: list[str], cwd: Path, env: dict[str, str], limits: Limits) -> Outcome:
    """Run argv, reading its output as it comes: stop it at the wall-clock limit
    or as soon as it passes the output limit, so neither time nor memory is
    unbounded, whatever the command does with its descendants."""
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
    deadline = time.monotonic() + limits.wall_seconds
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                if not selector.select(remaining):
                    continue
                chunk = os.read(process.stdout.fileno(), 65536)
                if not chunk:
                    break  # every writer closed its end
                output += chunk
                if len(output) > limits.output_bytes:
                    cut = True
                    del output[limits.output_bytes :]
                    break
        if not (timed_out or cut):
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
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
    if runs_as_root() and pids_cgroup_parent() is None:
        return (
            "[terminal] enabled: Neotask runs as root and finds no writable pids cgroup to "
            "cap the sandbox's processes; run it as an ordinary user"
        )
    limits = Limits.from_options(options)
    try:
        with tempfile.TemporaryDirectory(prefix="neotask-probe-") as empty:
            argv = [bwrap, *bwrap_options(Path(empty), limits, network=False)]
            result = subprocess.run(
                [*argv, *inside("true", limits)],
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
