"""The escape suite: bob, holding the terminal permission and approving his own
commands, tries through the real terminal tool to reach past his workspace.

Each attack asserts that nothing leaked (no marker of alice's, no secret of the
server's) and that nothing outside bob's workspace changed. Runs on whichever
profile the suite runs on: on the team profile PostgreSQL and Redis listen on
127.0.0.1 and must stay out of reach.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from agent import sandbox
from agent.approvals import ApprovalError, create_request, decide
from agent.tools import ToolContext, ToolError, get_tool
from memory.files.indexing import index_workspace
from memory.files.paths import MemoryPathError, read_memory_file
from memory.models import MemoryChunk
from memory.workspace import workspace_dir
from tests.support.processes import PROGRAMS, ROOT
from tests.support.records import allow_terminal
from tests.support.tools import run_terminal
from tests.support.world import MARK

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# A marker only the server's own environment holds.
SERVER_SECRET = "server-env-secret-5c1d"


@pytest.fixture
def bob_terminal(world, bob, configure, monkeypatch):
    """Bob's terminal, with short limits so that the attacks end quickly."""
    configure(
        "terminal",
        enabled=True,
        timeout_seconds=3.0,
        cpu_seconds=2,
        memory_mb=256,
        file_size_mb=1,
        max_processes=16,
        output_limit_bytes=4096,
    )
    monkeypatch.setenv("NEOTASK_LOCAL_LLM_KEY", SERVER_SECRET)
    allow_terminal(bob)
    return ToolContext(bob, "s1", "main", workspace_dir(bob.pk, "main"))


def run(context: ToolContext, command: str) -> str:
    """Through the real tool, as after bob's "Allow once"."""
    tool = get_tool("terminal")
    assert tool.approval_subject is not None
    assert tool.approval_subject(context, {"command": command}) == command
    return run_terminal(context, command)


def host_paths(world) -> dict[str, Path]:
    """What the server holds that bob's commands must not reach."""
    database = Path(str(settings.DATABASES["default"]["NAME"]))
    return {
        "alice's workspace": world.workspace,
        "alice's memory": world.workspace / "MEMORY.md",
        "the data dir": Path(settings.DATA_DIR),
        "the secret key": Path(os.environ["NEOTASK_DATA_DIR"]) / "secret_key",
        "the database": database,
        "the code": ROOT / "neotask_site" / "settings.py",
        "the server's environment": Path(f"/proc/{os.getpid()}/environ"),
    }


def assert_nothing_leaked(output: str) -> None:
    assert MARK not in output
    assert SERVER_SECRET not in output
    assert settings.SECRET_KEY not in output


def processes_running(marker: str) -> list[str]:
    """Host processes whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline and str(os.getpid()) != entry.name:
            found.append(cmdline)
    return found


def test_it_sees_only_its_own_workspace(bob_terminal, world):
    top = set(run(bob_terminal, "ls /").splitlines()[1:])
    system = {Path(path).name for path in sandbox.SYSTEM_DIRS}
    assert (
        {"usr", "etc", "proc", "dev", "tmp", "workspace"}
        <= top
        <= {
            *system,
            *("etc", "proc", "dev", "tmp", "workspace"),
        }
    )
    assert_nothing_leaked(run(bob_terminal, "cat ../../*/main/MEMORY.md ../*/MEMORY.md"))


@pytest.mark.parametrize(
    "what",
    [
        "alice's workspace",
        "alice's memory",
        "the data dir",
        "the secret key",
        "the database",
        "the code",
        "the server's environment",
    ],
)
def test_it_cannot_read_what_the_server_holds(bob_terminal, world, what):
    if what == "the database" and connection.vendor != "sqlite":
        pytest.skip("PostgreSQL is reached by its port: test_it_cannot_connect_to_local_services")
    path = host_paths(world)[what]
    assert path.exists()  # the attack aims at something real
    output = run(bob_terminal, f"ls -la {path}; cat {path}; cat {path}/*")
    assert "No such file or directory" in output
    assert_nothing_leaked(output)


def test_it_finds_no_marker_anywhere_it_can_look(bob_terminal, world):
    output = run(
        bob_terminal,
        f"grep -rl -e {MARK} -e {SERVER_SECRET} /workspace /tmp /etc /proc/[0-9]*/environ; "
        "cat /proc/[0-9]*/environ | tr '\\0' '\\n'",
    )
    assert_nothing_leaked(output)
    assert "HOME=/workspace" in output  # it did read its own environment


def test_it_sees_none_of_the_servers_processes(bob_terminal):
    output = run(bob_terminal, "ls /proc | grep -E '^[0-9]+$' | wc -l; cat /proc/1/cmdline")
    assert int(output.splitlines()[1]) <= 6  # bwrap's init, the shell, ls, grep and wc
    assert "bwrap" in output  # pid 1 is the sandbox's own init, not the host's


def test_it_cannot_write_outside_its_workspace(bob_terminal, world, tmp_path):
    target = tmp_path / "written-by-bob"
    before = sorted(p.name for p in world.workspace.rglob("*"))
    output = run(
        bob_terminal,
        f"echo x > {target}; echo x > {world.workspace}/pwned; echo x > /usr/pwned; "
        "echo x > /etc/pwned; echo x > /tmp/private; "
        "git init -q repo && cd repo && git -c user.email=b@b -c user.name=b "
        f"commit -q --allow-empty -m x && git log --output={target}",
    )
    assert "Read-only file system" in output
    assert not target.exists()
    assert not Path("/usr/pwned").exists() and not Path("/etc/pwned").exists()
    assert not Path("/tmp/private").exists()  # its /tmp was its own
    assert sorted(p.name for p in world.workspace.rglob("*")) == before
    assert (bob_terminal.workspace / "repo" / ".git").is_dir()  # inside is fine


def test_it_leaves_the_agents_memory_tools_inside_the_workspace(bob_terminal, world, bob):
    """A symlink made in the sandbox must not lead the server's own file tools out."""
    secret_key = host_paths(world)["the secret key"]
    run(bob_terminal, f"ln -s {secret_key} MEMORY.md; ln -s {world.workspace} memory")
    with pytest.raises(MemoryPathError, match="is a symbolic link"):
        read_memory_file(bob_terminal.workspace, "MEMORY.md")
    index_workspace(bob, "main")
    indexed = MemoryChunk.objects.filter(owner=bob).values_list("text", flat=True)
    assert_nothing_leaked(" ".join(indexed))


@pytest.mark.parametrize("port", [5432, 6379])
def test_it_cannot_connect_to_local_services(bob_terminal, port):
    output = run(
        bob_terminal,
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\"",
    )
    assert "ConnectionRefusedError" in output or "Network is unreachable" in output


def test_it_stops_cat_dev_zero_without_growing_the_server(bob_terminal):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    output = run(bob_terminal, "cat /dev/zero")
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert output.endswith("[output cut at 4096 bytes; the command was stopped]")
    assert grown_kib < 32 * 1024


def in_thread(function, *arguments):
    """Call `function`; the test fails rather than hangs if it never returns."""
    results: list[str] = []
    thread = threading.Thread(target=lambda: results.append(function(*arguments)))
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the terminal tool never returned"
    return results[0]


def test_it_stops_a_setsid_sleeper_holding_its_output(bob_terminal):
    output = in_thread(run, bob_terminal, "setsid sleep 613.1 & exec sleep 613.2")
    assert output.startswith("stopped: The command did not finish within 3 s")
    assert processes_running("sleep 613.") == []


def test_it_ends_what_a_command_left_behind_when_it_exits(bob_terminal):
    output = in_thread(run, bob_terminal, "setsid sleep 614.1 > /dev/null 2>&1 & echo left")
    assert output == "exit code 0\nleft\n"
    assert processes_running("sleep 614.") == []


def test_it_bounds_a_fork_bomb(bob_terminal):
    in_thread(run, bob_terminal, "b(){ b | b & }; b; sleep 615.1")
    assert processes_running("sleep 615.") == []


def test_it_caps_the_number_of_processes(bob_terminal):
    shutil.copy(PROGRAMS / "forks.py", bob_terminal.workspace / "forks.py")
    output = run(bob_terminal, "python3 forks.py")
    refused = output.splitlines()[1].split()
    assert refused[:2] == ["refused", "after"]
    assert int(refused[2]) < 16
    assert processes_running("616.1") == []


def test_it_caps_memory_and_file_size(bob_terminal):
    memory = run(bob_terminal, "python3 -c 'bytearray(512 * 1024 * 1024)'")
    assert "MemoryError" in memory
    run(bob_terminal, "head -c 5000000 /dev/zero > big")
    assert (bob_terminal.workspace / "big").stat().st_size == 1024 * 1024


def test_it_caps_cpu_time(bob_terminal, configure):
    # A wall clock far beyond the CPU limit: what stops the loop is the CPU limit.
    configure("terminal", timeout_seconds=120.0, cpu_seconds=1)
    output = run(bob_terminal, "python3 -c 'while True: pass'; echo status $?")
    # SIGKILL (137) or SIGXCPU (152): the kernel's two signals at the CPU limit.
    assert output.splitlines()[-1] in ("status 137", "status 152")


def test_it_cannot_raise_its_own_limits(bob_terminal):
    output = run(bob_terminal, "prlimit --nproc=unlimited --pid $$; prlimit --pid $$ --nproc")
    assert "Operation not permitted" in output
    assert output.splitlines()[-1].split()[-3:-1] == ["16", "16"]


@pytest.fixture
def nobodys_workspace():
    top = Path(tempfile.mkdtemp(prefix="neotask-nobody-"))
    top.chmod(0o755)
    workspace = top / "ws"
    workspace.mkdir()
    os.chown(workspace, 65534, 65534)
    yield workspace
    shutil.rmtree(top)


def test_it_runs_unprivileged_as_an_ordinary_user(nobodys_workspace):
    """Neotask as an ordinary user (the suite may run as root): the sandbox still
    starts, and RLIMIT_NPROC, which the kernel skips for root, caps processes."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if os.getuid() != 0 or python is None:
        pytest.skip("needs root to become nobody, and a system python3 nobody can run")
    forks = "for i in $(seq 40); do sleep 617.1 & done; echo never"
    result = subprocess.run(
        [
            *("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python),
            *("-m", "tests.programs.sandboxed", str(nobodys_workspace), f"id -u; {forks}"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"]},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("65534\n")
    assert "Cannot fork" in result.stdout and "never" not in result.stdout
    assert processes_running("sleep 617.") == []


# "Allow always" through the real tool: what a remembered rule lets run unasked.


@pytest.mark.parametrize(
    ("approved", "attempted"),
    [
        ("python3 --version", "python3 -c 'import os; os.system(\"id\")'"),
        ("find . -name x", "find . -exec sh -c id +"),
        ("cat notes", "cat notes; id"),
        ("cat notes", "cat $(id)"),
        ("git status", "git status --config=core.pager=sh"),
        ("git log", "git log --upload-pack=id"),
        ("make build", "make build -f evil.mk"),
        ("make build", "make build SHELL=/bin/sh"),
        ("tar -tf a.tar", "tar -xf a.tar --to-command=sh"),
        ("ls -l", "env ls"),
    ],
)
def test_it_lets_no_approval_reach_further_than_it_says(bob_terminal, bob, approved, attempted):
    request = create_request(bob, "s1", approved)
    if request.prefix:
        decide(bob, request.pk, "always")
    else:
        with pytest.raises(ApprovalError, match="not offered"):
            decide(bob, request.pk, "always")
    tool = get_tool("terminal")
    assert tool.approval_subject(bob_terminal, {"command": attempted}) == attempted


def test_it_stops_everything_when_the_permission_is_revoked(bob_terminal, bob):
    decide(bob, create_request(bob, "s1", "ls -l").pk, "always")
    tool = get_tool("terminal")
    assert tool.approval_subject(bob_terminal, {"command": "ls"}) is None
    bob.user_permissions.clear()
    trusted = ToolContext(bob, "s1", "main", bob_terminal.workspace, trusted=True)
    for context in (bob_terminal, trusted):
        with pytest.raises(ToolError, match="needs the permission"):
            tool.approval_subject(context, {"command": "ls"})


def test_it_checks_the_sandbox_it_will_use(settings):
    assert sandbox.problem({**settings.NEOTASK["terminal"], "enabled": True}) is None
