"""Workspace paths opened without following links (memory/files/workspace_fs.py): a
link anywhere on a path is refused with a message saying so, other file types too,
and a page that only looks creates nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memory.files import workspace_fs
from memory.files.indexing import index_workspace, list_files
from memory.files.paths import (
    MemoryPathError,
    delete_memory_file,
    read_memory_file,
    write_memory_file,
)
from memory.files.workspace_fs import LinkRefused, WorkspaceFS, atomic_write
from memory.models import MemoryFile
from memory.workspace import workspace_dir
from tests.support.files import write

LINK = "links in a workspace are not followed"


@pytest.fixture
def workspace(alice) -> Path:
    return workspace_dir(alice.pk, "main")


def test_it_reads_writes_and_deletes_plain_files(workspace):
    write_memory_file(workspace, "memory/a/b/notes.md", "hello\n")
    assert read_memory_file(workspace, "memory/a/b/notes.md")[0] == "hello\n"
    assert (workspace / "memory/a/b/notes.md").stat().st_mode & 0o777 == 0o600
    delete_memory_file(workspace, "memory/a/b/notes.md")
    assert not (workspace / "memory/a/b/notes.md").exists()


def test_it_refuses_a_link_even_one_that_stays_inside(workspace):
    write(workspace, "memory/real.md", "mine\n")
    (workspace / "memory" / "alias.md").symlink_to(workspace / "memory" / "real.md")
    with pytest.raises(LinkRefused, match=f"memory/alias.md is a symbolic link; {LINK}"):
        read_memory_file(workspace, "memory/alias.md")
    with pytest.raises(LinkRefused):
        write_memory_file(workspace, "memory/alias.md", "through the link")
    with pytest.raises(LinkRefused):
        delete_memory_file(workspace, "memory/alias.md")
    assert (workspace / "memory" / "real.md").read_text() == "mine\n"
    assert (workspace / "memory" / "alias.md").is_symlink()  # left as it was


def test_it_refuses_a_folder_on_the_way_that_is_a_link(workspace, tmp_path):
    elsewhere = write(tmp_path, "elsewhere/notes.md", "not yours\n").parent
    (workspace / "memory").mkdir()
    (workspace / "memory" / "sub").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(LinkRefused, match=f"inside memory/sub/, a symbolic link; {LINK}"):
        read_memory_file(workspace, "memory/sub/notes.md")
    with pytest.raises(LinkRefused):
        write_memory_file(workspace, "memory/sub/new.md", "x")
    assert sorted(p.name for p in elsewhere.iterdir()) == ["notes.md"]


def test_it_refuses_a_fifo_without_waiting_for_a_writer(workspace):
    (workspace / "memory").mkdir()
    os.mkfifo(workspace / "memory" / "pipe.md")
    with pytest.raises(MemoryPathError, match="not a regular file"):
        read_memory_file(workspace, "memory/pipe.md")
    with pytest.raises(MemoryPathError, match="not a regular file"):
        write_memory_file(workspace, "memory/pipe.md", "x")


def test_it_refuses_to_write_over_a_folder_and_leaves_no_temporary_file(workspace):
    (workspace / "memory" / "taken.md").mkdir(parents=True)
    with pytest.raises(MemoryPathError, match=r"memory/taken\.md exists and is not a regular file"):
        write_memory_file(workspace, "memory/taken.md", "x")
    assert sorted(p.name for p in (workspace / "memory").iterdir()) == ["taken.md"]


def test_it_lists_links_as_links_and_indexes_none(alice, workspace, tmp_path):
    write(workspace, "memory/real.md", "# Real\nmine\n")
    (workspace / "memory" / "alias.md").symlink_to(workspace / "memory" / "real.md")
    (workspace / "memory" / "dir").symlink_to(tmp_path, target_is_directory=True)
    write(tmp_path, "hidden.md", "# Elsewhere\n")
    index_workspace(alice, "main")
    listed = {file.path: file.is_link for file in list_files(alice, "main")}
    assert listed == {"memory/alias.md": True, "memory/real.md": False}
    assert MemoryFile.objects.get(path="memory/alias.md").skip_reason.startswith("a symbolic link")


def test_it_stops_walking_at_its_depth(alice, workspace):
    deep = "memory/" + "/".join(["d"] * (workspace_fs.MAX_DEPTH + 5))
    write(workspace, f"{deep}/too-deep.md", "x")
    write(workspace, "memory/d/shallow.md", "x")
    assert [file.path for file in list_files(alice, "main")] == ["memory/d/shallow.md"]


def test_it_writes_a_path_of_the_servers_own_atomically(tmp_path):
    target = tmp_path / "index.json"
    with atomic_write(target) as handle:
        handle.write("{}\n")
    with pytest.raises(RuntimeError), atomic_write(target) as handle:
        handle.write("half")
        raise RuntimeError("interrupted")
    assert target.read_text() == "{}\n"
    assert [p.name for p in tmp_path.iterdir()] == ["index.json"]


def test_it_reads_a_missing_workspace_as_empty_and_creates_nothing(tmp_path):
    missing = tmp_path / "no-such-workspace"
    with WorkspaceFS(missing) as files:
        assert list(files.walk("memory", ".md")) == []
        assert files.lstat("MEMORY.md") is None
    assert not missing.exists()


# The pages -------------------------------------------------------------------------


def test_the_file_page_says_a_link_is_not_followed(alice_client, workspace, tmp_path):
    secret = write(tmp_path, "secret.md", "the other user's note\n")
    (workspace / "memory").mkdir()
    (workspace / "memory" / "race.md").symlink_to(secret)
    response = alice_client.get("/memory/files/view/", {"agent": "main", "path": "memory/race.md"})
    assert response.status_code == 200
    assert f"memory/race.md is a symbolic link; {LINK}" in response.content.decode()
    assert "the other user" not in response.content.decode()
    files = alice_client.get("/memory/files/", {"agent": "main"}).content.decode()
    assert "A symbolic link: not followed" in files


def test_saving_or_deleting_a_link_from_the_pages_changes_nothing(
    alice_client, workspace, tmp_path
):
    secret = write(tmp_path, "secret.md", "the other user's note\n")
    (workspace / "memory").mkdir()
    (workspace / "memory" / "race.md").symlink_to(secret)
    save = {"agent": "main", "path": "memory/race.md", "text": "overwritten", "sha256": ""}
    response = alice_client.post("/memory/files/view/", save)
    assert response.status_code == 400 and LINK in response.content.decode()
    response = alice_client.post(
        "/memory/files/delete/", {"agent": "main", "path": "memory/race.md"}, follow=True
    )
    assert LINK in response.content.decode()
    assert secret.read_text() == "the other user's note\n"
    assert (workspace / "memory" / "race.md").is_symlink()


@pytest.mark.parametrize(
    "url", ["/memory/files/", "/memory/files/view/", "/memory/files/delete/", "/memory/search/"]
)
def test_a_page_that_only_looks_creates_no_folder(alice, alice_client, url):
    params = {"agent": "newagent", "path": "MEMORY.md", "q": "anything"}
    assert alice_client.get(url, params).status_code in (200, 404)
    assert not workspace_dir(alice.pk, "newagent", create=False).exists()


@pytest.mark.parametrize(
    "path",
    [
        "memory/" + "x" * 300 + ".md",
        "memory/" + "/".join(["y" * 150] * 3) + ".md",
        "memory/a\x00b.md",
        "memory/" + "a/" * 300 + "x.md",
        "memory/" + "é" * 120 + ".md",
    ],
)
def test_bad_paths_are_404_never_500(alice_client, workspace, path):
    write(workspace, "MEMORY.md", "x")
    for method, url in [("get", "/memory/files/view/"), ("post", "/memory/files/delete/")]:
        response = getattr(alice_client, method)(url, {"agent": "main", "path": path})
        # A NUL in a URL's query is refused before any view (a 400); in a form, a 404.
        expected = 400 if method == "get" and "\x00" in path else 404
        assert response.status_code == expected
