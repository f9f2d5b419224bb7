from __future__ import annotations

import os

import pytest

from agent.tools import ToolContext, ToolError, get_tool


@pytest.fixture
def context(alice, tmp_path, configure):
    configure("terminal", enabled=True, timeout_seconds=1.0, output_limit_bytes=300)
    return ToolContext(owner=alice, session_id="s1", agent_name="main", workspace=tmp_path)


def run(context, command):
    return get_tool("terminal").run(context, {"command": command})


def test_it_runs_in_the_workspace(context, tmp_path):
    (tmp_path / "notes.md").write_text("x")
    assert run(context, "ls") == "exit code 0\nnotes.md\n"
    assert run(context, "pwd").endswith(f"{tmp_path}\n")


def test_it_reports_the_exit_code_and_errors(context):
    assert run(context, "ls /no/such/dir").startswith("exit code 2\n")


def test_it_hides_the_apps_secrets_from_commands(context, monkeypatch):
    monkeypatch.setenv("NEOTASK_LOCAL_LLM_KEY", "top-secret-key")
    monkeypatch.setenv("DATABASE_URL", "postgresql://secret@db/x")
    output = run(context, "env")
    assert "top-secret-key" not in output and "DATABASE_URL" not in output
    assert "PATH=" in output


def test_it_stops_a_command_that_runs_too_long(context, tmp_path):
    with pytest.raises(ToolError, match="did not finish within 1 s"):
        run(context, "sleep 30")


def test_it_cuts_long_output(context):
    output = run(context, "yes | head -c 5000")
    assert "[output cut at 300 bytes of 5000]" in output
    assert len(output) < 400


def test_it_is_off_unless_enabled(configure):
    configure("terminal", enabled=False)
    with pytest.raises(ToolError, match="Unknown tool 'terminal'"):
        get_tool("terminal")
    assert os.path.exists("/bin/sh")
