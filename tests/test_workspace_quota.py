"""The workspace's size limit (`[terminal] workspace_mb`, memory/files/quota.py) for
memory-file writes: a write that would pass it is refused with the reason, and
nothing already there changes. The terminal's side: tests/security/test_sandbox_limits.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.tools import ToolContext, ToolError, get_tool
from memory.files import quota, workspace_fs
from memory.files.paths import read_memory_file, write_memory_file
from memory.files.workspace_fs import WorkspaceFS
from memory.workspace import workspace_dir

MB = 1024 * 1024


@pytest.fixture
def workspace(alice, configure) -> Path:
    configure("terminal", workspace_mb=2)
    return workspace_dir(alice.pk, "main")


def fill(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))  # random: no file system can store it sparse


def test_it_counts_what_is_on_disk_hidden_files_too_and_never_a_links_target(workspace, tmp_path):
    fill(workspace / ".git" / "objects" / "pack", MB)
    fill(workspace / "memory" / "a.md", MB // 2)
    fill(tmp_path / "outside", 50 * MB)
    (workspace / "memory" / "big").symlink_to(tmp_path / "outside")
    (workspace / "memory" / "dir").symlink_to(tmp_path)
    used = quota.used_bytes(workspace)
    assert 1.5 * MB <= used < 1.6 * MB


def test_a_missing_workspace_holds_nothing(tmp_path):
    assert quota.used_bytes(tmp_path / "never-made") == 0
    assert not (tmp_path / "never-made").exists()


def test_a_write_that_would_pass_the_limit_is_refused_and_nothing_changes(workspace):
    write_memory_file(workspace, "memory/notes.md", "keep me\n")
    fill(workspace / "download.bin", int(1.5 * MB))
    with pytest.raises(quota.WorkspaceFull, match=r"past its limit of 2\.0 MB .*workspace_mb"):
        write_memory_file(workspace, "memory/notes.md", "x" * 900_000)
    with pytest.raises(quota.WorkspaceFull, match="Nothing was written"):
        write_memory_file(workspace, "memory/new.md", "y" * 900_000)
    assert read_memory_file(workspace, "memory/notes.md")[0] == "keep me\n"
    assert not (workspace / "memory" / "new.md").exists()
    assert [p.name for p in (workspace / "memory").iterdir()] == ["notes.md"]  # no temp file
    # What fits is written; a write that shrinks a file always may.
    write_memory_file(workspace, "memory/notes.md", "z" * 100_000)
    fill(workspace / "download2.bin", MB)
    write_memory_file(workspace, "memory/notes.md", "shorter\n")
    assert read_memory_file(workspace, "memory/notes.md")[0] == "shorter\n"


def test_a_workspace_too_deep_to_measure_counts_as_full(workspace, monkeypatch):
    monkeypatch.setattr(workspace_fs, "MAX_USAGE_DEPTH", 3)
    deep = workspace / "a" / "b" / "c" / "d" / "e"
    deep.mkdir(parents=True)
    assert quota.used_bytes(workspace) > quota.limit_bytes()
    with pytest.raises(quota.WorkspaceFull, match="more than 3 deep"):
        write_memory_file(workspace, "MEMORY.md", "x")
    with WorkspaceFS(workspace) as files, pytest.raises(workspace_fs.TooDeep):
        files.usage()


def test_the_agents_tool_says_why(alice, workspace):
    fill(workspace / "download.bin", 2 * MB)
    context = ToolContext(owner=alice, session_id="s", agent_name="main", workspace=workspace)
    with pytest.raises(ToolError, match="delete files to make room"):
        get_tool("write_memory_file").run(context, {"path": "MEMORY.md", "text": "x" * 10_000})
    assert not (workspace / "MEMORY.md").exists()


def test_the_files_page_says_why_and_keeps_the_typed_text(alice_client, workspace):
    write_memory_file(workspace, "MEMORY.md", "old\n")
    _, sha = read_memory_file(workspace, "MEMORY.md")
    fill(workspace / "download.bin", 2 * MB)
    response = alice_client.post(
        "/memory/files/view/?agent=main&path=MEMORY.md",
        {"path": "MEMORY.md", "sha256": sha, "text": "new " * 5000},
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "past its limit of 2.0 MB" in page and "new new new" in page
    assert read_memory_file(workspace, "MEMORY.md")[0] == "old\n"
