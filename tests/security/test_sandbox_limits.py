"""Limits per sandbox, not per process: a command's processes together stay within
memory_mb, every tmpfs it can write is capped, and the workspace within workspace_mb.

Through the real terminal tool in the real sandbox. Before these limits, six
processes each held 60 MB under memory_mb = 100, /dev/shm took what the host had,
and a command wrote as much into its workspace as the disk held.
"""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.contrib.auth.models import User

from agent import cgroups, sandbox
from agent.tools import ToolContext
from memory.files import quota
from memory.workspace import workspace_dir
from tests.support.records import allow_terminal
from tests.support.tools import run_terminal

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

MB = 1024 * 1024


@pytest.fixture
def terminal(configure):
    configure(
        "terminal",
        enabled=True,
        timeout_seconds=20.0,
        cpu_seconds=10,
        memory_mb=100,
        file_size_mb=100,
        max_processes=16,
        output_limit_bytes=8192,
        tmp_size_mb=8,
        workspace_mb=20,
    )
    user = allow_terminal(User.objects.create_user("carol"))
    return ToolContext(user, "s1", "main", workspace_dir(user.pk, "main"))


def holders(count: int, mb: int) -> str:
    """`count` processes at once, each holding `mb` MB for 2 s, then printing "kept"
    if it is still alive (the OOM killer may end one that already held its share)."""
    python = (
        f"import time; b = bytearray({mb} << 20); b[::4096] = b'x' * len(b[::4096]); "
        "time.sleep(2); print('kept', flush=True)"
    )
    return f'for i in $(seq {count}); do python3 -c "{python}" & done; wait; echo done'


def test_the_processes_of_a_sandbox_share_its_memory(terminal):
    if not cgroups.in_force().memory:
        pytest.skip("no memory cgroup the server may make here (the other test covers it)")
    output = run_terminal(terminal, holders(6, 30))
    # 100 MB for the sandbox: three of 30 MB at most, never all six.
    assert 1 <= output.count("kept") <= 3
    assert output.rstrip().endswith("done")


def test_without_a_memory_cgroup_each_process_gets_a_share(terminal, monkeypatch):
    def no_memory(controller: str) -> cgroups.Parent | None:
        return None if controller == "memory" else real(controller)

    real = cgroups.find_parent
    monkeypatch.setattr(cgroups, "find_parent", no_memory)
    output = run_terminal(
        terminal, "prlimit --pid $$ --as --nproc --noheadings --output=RESOURCE,SOFT"
    )
    limits = dict(line.split()[0:2] for line in output.splitlines()[1:])
    assert int(limits["AS"]) * int(limits["NPROC"]) <= 100 * MB
    assert run_terminal(terminal, holders(6, 30)).count("kept") == 0


def test_every_tmpfs_is_capped_or_read_only(terminal):
    places = {"/tmp": "/tmp/fill", "/dev/shm": "/dev/shm/fill", "/": "/fill"}
    places |= {"/etc": "/etc/fill", "/dev": "/dev/fill", "/usr": "/usr/fill"}
    fills = " ".join(
        f"{{ head -c 30M /dev/zero > {path}; }} 2>/dev/null; "
        f"echo {where} $(wc -c 2>/dev/null < {path} || echo none);"
        for where, path in places.items()
    )
    sizes = dict(line.split() for line in run_terminal(terminal, fills).splitlines()[1:])
    assert sizes == {
        "/tmp": str(8 * MB),
        "/dev/shm": str(8 * MB),
        # The root, /etc (a part of it), /dev and /usr are read-only: nothing is made.
        "/": "none",
        "/etc": "none",
        "/dev": "none",
        "/usr": "none",
    }


def test_a_command_cannot_fill_the_workspace(terminal):
    # One file cannot take more than the room left (RLIMIT_FSIZE) ...
    output = run_terminal(terminal, "head -c 50M /dev/zero > big; echo status $?")
    assert (terminal.workspace / "big").stat().st_size <= 20 * MB
    # ... and many small ones are stopped at the next look, with the reason.
    output = run_terminal(terminal, "i=0; while :; do i=$((i+1)); head -c 1M /dev/zero > f$i; done")
    assert output.startswith("stopped: The command was stopped: The workspace holds")
    assert "[terminal] workspace_mb" in output and "What it wrote is kept" in output
    used = quota.used_bytes(terminal.workspace)
    assert 20 * MB < used < 20 * MB + 400 * MB  # stopped, not let run to the wall clock
    assert (terminal.workspace / "big").exists()  # nothing is deleted for the user
    # A full workspace still runs the command that makes room.
    assert run_terminal(terminal, "rm -f big f*; echo removed") == "exit code 0\nremoved\n"
    assert quota.used_bytes(terminal.workspace) < MB


def test_a_command_that_passes_the_limit_at_once_is_told(terminal, monkeypatch):
    # Quicker than the watch's next look (as it is when the machine is idle; under
    # load the watch may stop it first, which the test above covers): the check
    # after the command tells.
    monkeypatch.setattr(quota.WorkspaceWatch, "__call__", lambda self: None)
    output = run_terminal(
        terminal, "for i in 1 2 3; do head -c 8M /dev/zero > f$i; done; echo written"
    )
    assert re.search(r"written\n\n\[The workspace holds 2\d\.\d MB, more than its limit", output)


def test_the_sandbox_reports_its_peak(terminal):
    if not cgroups.in_force().memory:
        pytest.skip("no memory cgroup here")
    limits = sandbox.Limits.from_options({**settings.NEOTASK["terminal"], "memory_mb": 100})
    outcome = sandbox.run_sandboxed(terminal.workspace, holders(1, 30), limits, False)
    assert outcome.memory_peak_bytes is not None
    assert 30 * MB < outcome.memory_peak_bytes <= 100 * MB


@pytest.mark.parametrize(("memory_mb", "refused"), [(256, True), (512, False)])
def test_start_up_refuses_a_share_too_small_to_run_a_process(monkeypatch, memory_mb, refused):
    real = cgroups.find_parent
    monkeypatch.setattr(cgroups, "find_parent", lambda c: None if c == "memory" else real(c))
    options = {**settings.NEOTASK["terminal"], "enabled": True}
    problem = sandbox.problem({**options, "memory_mb": memory_mb, "max_processes": 32})
    if refused:
        assert problem == (
            "[terminal] memory_mb = 256 shared by max_processes = 32 leaves 8 MB per process "
            "(no memory cgroup here caps the sandbox as a whole); give each at least 16"
        )
    else:
        assert problem is None
