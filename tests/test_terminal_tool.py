from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agent import sandbox
from agent.safe_git import GIT_SAFE_ENV
from agent.tools import ToolContext, ToolError, get_tool
from tests.support.processes import ROOT
from tests.support.records import allow_terminal


@pytest.fixture
def context(alice, tmp_path, configure):
    configure("terminal", enabled=True, timeout_seconds=2.0, output_limit_bytes=300)
    return ToolContext(owner=alice, session_id="s1", agent_name="main", workspace=tmp_path)


def run(context, command):
    return get_tool("terminal").run(context, {"command": command})


def test_it_runs_in_the_workspace(context, tmp_path):
    (tmp_path / "notes.md").write_text("x")
    assert run(context, "ls") == "exit code 0\nnotes.md\n"
    assert run(context, 'pwd; echo "$HOME"') == "exit code 0\n/workspace\n/workspace\n"
    run(context, "echo made > made.txt")
    assert (tmp_path / "made.txt").read_text() == "made\n"


def test_it_reports_the_exit_code_and_errors(context):
    assert run(context, "ls /no/such/dir").startswith("exit code 2\n")


def test_it_gives_commands_a_cleared_environment(context, monkeypatch, configure):
    configure("terminal", output_limit_bytes=4096)
    monkeypatch.setenv("NEOTASK_LOCAL_LLM_KEY", "top-secret-key")
    monkeypatch.setenv("DATABASE_URL", "postgresql://secret@db/x")
    lines = set(run(context, "env").splitlines()[1:])
    assert lines == {
        "PATH=/usr/local/bin:/usr/bin:/bin",
        "LANG=C.UTF-8",
        "HOME=/workspace",
        "PWD=/workspace",
        *(f"{name}={value}" for name, value in GIT_SAFE_ENV.items()),
    }


def test_it_stops_a_command_that_runs_too_long(context):
    with pytest.raises(ToolError, match="did not finish within 2 s"):
        run(context, "echo started; sleep 30")


def test_it_stops_a_command_at_the_output_limit(context):
    output = run(context, "yes")
    assert output.startswith("exit code: stopped\ny\ny\n")
    assert output.endswith("[output cut at 300 bytes; the command was stopped]")
    assert len(output) < 400


def test_it_runs_unconfined_when_the_sandbox_is_off(context, configure, tmp_path):
    configure("terminal", sandbox="none")
    assert run(context, "pwd") == f"exit code 0\n{tmp_path}\n"
    assert "HOME=" + str(tmp_path) in run(context, "env")


def test_it_says_when_bwrap_is_missing(context, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ToolError, match="Debian package `bubblewrap`"):
        run(context, "true")


def test_it_is_off_unless_enabled(configure):
    configure("terminal", enabled=False)
    with pytest.raises(ToolError, match="Unknown tool 'terminal'"):
        get_tool("terminal")


def test_it_refuses_users_without_the_terminal_permission(context, alice):
    tool = get_tool("terminal")
    with pytest.raises(ToolError, match="needs the permission"):
        tool.approval_subject(context, {"command": "ls"})
    allow_terminal(alice)
    assert tool.approval_subject(context, {"command": "ls"}) == "ls"
    # Trusted (a scheduled task) or not, a revoked permission stops it at once:
    # the same user object, with its permission cache, is asked again.
    trusted = ToolContext(alice, "s1", "main", context.workspace, trusted=True)
    assert tool.approval_subject(trusted, {"command": "ls"}) is None
    alice.user_permissions.clear()
    with pytest.raises(ToolError, match="needs the permission"):
        tool.approval_subject(trusted, {"command": "ls"})


def test_it_finds_no_problem_with_a_working_sandbox(settings):
    options = {**settings.NEOTASK["terminal"], "enabled": True}
    assert sandbox.problem(options) is None
    assert sandbox.problem({**options, "sandbox": "none"}) is None
    assert sandbox.problem({**options, "enabled": False}) is None


def test_it_names_the_package_when_bwrap_is_missing(settings, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    reason = sandbox.problem({**settings.NEOTASK["terminal"], "enabled": True})
    assert "install the Debian package `bubblewrap`" in reason
    assert 'sandbox = "none"' in reason


def test_it_names_the_package_when_bwrap_cannot_start(settings, monkeypatch, tmp_path):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = sandbox.problem({**settings.NEOTASK["terminal"], "enabled": True})
    assert "No permissions to create new namespace" in reason
    assert "`bubblewrap`" in reason


def start_up(tmp_path, **variables):
    env = {**os.environ, "NEOTASK_CONFIG": "", "NEOTASK_DATA_DIR": str(tmp_path / "data")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.update(variables)
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )


@pytest.mark.slow
def test_it_stops_start_up_without_bwrap_in_one_line(tmp_path):
    result = start_up(tmp_path, NEOTASK_TERMINAL_ENABLED="true", PATH="/nonexistent")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "neotask: configuration error: [terminal] enabled needs bwrap: install the Debian "
        'package `bubblewrap` (or set [terminal] sandbox = "none" to run commands unconfined)'
    ]


@pytest.mark.slow
def test_it_starts_unconfined_only_when_told_and_warns(tmp_path):
    result = start_up(
        tmp_path,
        NEOTASK_TERMINAL_ENABLED="true",
        NEOTASK_TERMINAL_SANDBOX="none",
        PATH="/nonexistent",
    )
    assert result.returncode == 0, result.stderr
    assert '[terminal] sandbox = "none": commands run unconfined' in result.stderr
    assert "WARNING" in result.stderr
