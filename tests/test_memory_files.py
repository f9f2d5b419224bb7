from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
from django_q.models import Schedule

from agent.tools import ToolContext, ToolError, get_tool
from memory import recording
from memory.files import indexing
from memory.files.chunking import chunk_markdown
from memory.files.indexing import index_all_workspaces, index_workspace
from memory.files.paths import MemoryPathError, memory_path, read_memory_file, write_memory_file
from memory.files.search import forget_chunk_indexes, search_files
from memory.models import MemoryChunk, MemoryFile
from memory.search import search_memory
from memory.tasks import FILES_SCHEDULE, install_schedules
from memory.workspace import workspace_dir
from tests.support.embeddings import CountingEmbed, fake_vector
from tests.support.files import write
from tests.support.profiles import in_process_vectors


@pytest.fixture(params=["numpy", "lancedb"])
def backend(request, configure) -> str:
    """Runs a test against each vector backend of memory files."""
    if request.param == "lancedb":
        pytest.importorskip("lancedb", reason='the LanceDB plugin (pip install ".[lancedb]")')
    configure("memory", vector_backend=request.param)
    return request.param


@pytest.fixture
def embed(monkeypatch) -> CountingEmbed:
    counting = CountingEmbed()
    monkeypatch.setattr(indexing, "embed_texts", counting)
    return counting


@pytest.fixture
def workspace(alice) -> Path:
    return workspace_dir(alice.pk, "main")


@pytest.fixture
def context(alice, workspace) -> ToolContext:
    return ToolContext(owner=alice, session_id="s1", agent_name="main", workspace=workspace)


def run_tool(context: ToolContext, name: str, **arguments: str) -> str:
    return get_tool(name).run(context, arguments)


# Paths

ESCAPES = [
    "../x.md",
    "/etc/passwd",
    "memory/../../x.md",
    "memory/../MEMORY.md",
    "C:/x.md",
    "~/x.md",
]


@pytest.mark.parametrize("path", [*ESCAPES, "notes.txt", "memory/x.txt", "", "memory/.hidden.md"])
def test_it_refuses_paths_that_are_not_memory_files_of_the_workspace(path):
    with pytest.raises(MemoryPathError):
        memory_path(path)


def test_it_explains_why_a_path_is_refused():
    with pytest.raises(MemoryPathError, match=r"'\.\.' is not allowed"):
        memory_path("memory/../../x.md")
    with pytest.raises(MemoryPathError, match="absolute path"):
        memory_path("/etc/passwd")


@pytest.mark.parametrize("inside", [False, True])
def test_it_refuses_symlinks_wherever_they_point(workspace, tmp_path, inside):
    outside = write(tmp_path, "outside/secret.md", "secret")
    target = write(workspace, "memory/real/secret.md", "mine") if inside else outside
    (workspace / "memory").mkdir(exist_ok=True)
    (workspace / "memory" / "link.md").symlink_to(target)
    (workspace / "memory" / "dir").symlink_to(target.parent, target_is_directory=True)
    for path in ["memory/link.md", "memory/dir/secret.md"]:
        with pytest.raises(MemoryPathError, match="symbolic link; links in a workspace are not"):
            read_memory_file(workspace, path)
    with pytest.raises(MemoryPathError, match="memory/dir/, a symbolic link"):
        write_memory_file(workspace, "memory/dir/new.md", "written through")
    assert not (target.parent / "new.md").exists()
    assert outside.read_text() == "secret"


@pytest.mark.parametrize("path", ESCAPES)
@pytest.mark.parametrize("tool", ["read_memory_file", "write_memory_file", "append_memory_file"])
def test_it_refuses_escapes_in_tool_calls(context, tmp_path, path, tool):
    arguments = {"path": path} if tool == "read_memory_file" else {"path": path, "text": "x"}
    with pytest.raises(ToolError):
        run_tool(context, tool, **arguments)
    assert not (tmp_path / "x.md").exists()


def test_it_refuses_a_symlink_out_in_tool_calls(context, workspace, tmp_path):
    outside = write(tmp_path, "outside.md", "secret")
    (workspace / "memory").mkdir()
    (workspace / "memory" / "link.md").symlink_to(outside)
    with pytest.raises(ToolError, match="is a symbolic link"):
        run_tool(context, "read_memory_file", path="memory/link.md")
    with pytest.raises(ToolError, match="is a symbolic link"):
        run_tool(context, "write_memory_file", path="memory/link.md", text="overwritten")
    assert outside.read_text() == "secret"


# Chunking


def test_it_chunks_whole_lines_up_to_the_size_with_overlap():
    text = "\n".join(f"line {n:03d} " + "x" * 40 for n in range(1, 41))  # 49 chars a line
    chunks = chunk_markdown(text, size=500, overlap=100)
    assert all(len(chunk.text) <= 500 for chunk in chunks)
    assert chunks[0].start_line == 1 and chunks[-1].end_line == 40
    for previous, chunk in itertools.pairwise(chunks):
        # Overlap of whole lines: the next chunk repeats the last one or two lines.
        assert previous.end_line - chunk.start_line + 1 in (1, 2)
        assert chunk.text.startswith(text.splitlines()[chunk.start_line - 1])
    covered = {n for chunk in chunks for n in range(chunk.start_line, chunk.end_line + 1)}
    assert covered == set(range(1, 41))


def test_it_keeps_headings_as_context_and_records_line_ranges():
    text = (
        "Intro line\n"
        "# Trips\n"
        "We love travelling.\n"
        "## Japan\n"
        "Kyoto in April.\n"
        "```\n# not a heading\n```\n"
        "## Peru\n"
        "Machu Picchu.\n"
        "# Food\n"
        "Ramen.\n"
    )
    chunks = chunk_markdown(text, size=1000, overlap=200)
    summary = [(c.heading, c.start_line, c.end_line) for c in chunks]
    assert summary == [
        ("", 1, 1),
        ("Trips", 2, 3),
        ("Trips > Japan", 4, 8),
        ("Trips > Peru", 9, 10),
        ("Food", 11, 12),
    ]
    assert chunks[2].embedded_text.startswith("Trips > Japan\n## Japan")


def test_it_cuts_a_line_longer_than_a_chunk():
    chunks = chunk_markdown("a" * 2500, size=1000, overlap=200)
    assert [len(c.text) for c in chunks] == [1000, 1000, 500]
    assert all((c.start_line, c.end_line) == (1, 1) for c in chunks)


def test_it_has_no_chunks_for_blank_text():
    assert chunk_markdown("", 1000, 200) == []
    assert chunk_markdown("\n\n  \n", 1000, 200) == []


# Indexing


def test_it_indexes_a_1000_file_workspace_and_re_embeds_only_the_edited_chunks(
    alice, workspace, embed, configure
):
    configure("memory", file_chunk_chars=400, file_chunk_overlap_chars=0)
    for n in range(1000):
        body = "\n".join(f"Note {n}, line {line}: something worth keeping." for line in range(20))
        write(workspace, f"memory/notes/{n:04d}.md", f"# File {n}\n{body}\n")
    stats = index_workspace(alice)
    assert stats.files_seen == stats.files_changed == 1000
    chunks = MemoryChunk.objects.filter(owner=alice).count()
    assert stats.chunks_embedded == chunks and embed.texts == chunks > 2000

    embed.reset()
    assert index_workspace(alice).files_changed == 0
    assert embed.calls == []

    edited = workspace / "memory/notes/0500.md"
    lines = edited.read_text().splitlines()
    lines[-1] = "Note 500, line 19: the door code is 4711."
    edited.write_text("\n".join(lines) + "\n")
    stats = index_workspace(alice)
    assert (stats.files_changed, stats.chunks_embedded) == (1, 1)
    assert len(embed.calls) == 1 and embed.calls[0][0].endswith("the door code is 4711.")
    assert MemoryChunk.objects.filter(owner=alice).count() == chunks


def test_it_reuses_vectors_when_an_edit_moves_chunks(alice, workspace, embed):
    write(workspace, "MEMORY.md", "# A\nalpha\n# B\nbeta\n")
    index_workspace(alice)
    embed.reset()
    write(workspace, "MEMORY.md", "# New\nfresh\n# A\nalpha\n# B\nbeta\n")
    index_workspace(alice)
    assert embed.calls == [["New\n# New\nfresh"]]
    positions = list(MemoryChunk.objects.order_by("position").values_list("heading", "start_line"))
    assert positions == [("New", 1), ("A", 3), ("B", 5)]
    assert not MemoryChunk.objects.filter(embedding__isnull=True).exists()


def test_it_drops_the_chunks_of_a_deleted_file(alice, workspace, embed):
    write(workspace, "MEMORY.md", "keep me")
    gone = write(workspace, "memory/old.md", "# Old\nforget me")
    index_workspace(alice)
    gone.unlink()
    stats = index_workspace(alice)
    assert stats.files_deleted == 1
    assert list(MemoryFile.objects.values_list("path", flat=True)) == ["MEMORY.md"]
    assert list(MemoryChunk.objects.values_list("text", flat=True)) == ["keep me"]


def test_it_skips_binary_huge_and_invalid_utf8_files_with_a_reason(
    alice, workspace, embed, configure
):
    configure("memory", file_max_bytes=2048)
    write(workspace, "memory/binary.md", b"PNG\x00\x01\x02")
    write(workspace, "memory/huge.md", "x" * 3000)
    write(workspace, "memory/latin1.md", "caf\xe9".encode("latin-1"))
    write(workspace, "memory/empty.md", "")
    write(workspace, "memory/fine.md", "caf\u00e9 au lait")
    stats = index_workspace(alice)
    assert (stats.files_seen, stats.files_skipped) == (5, 3)
    reasons = dict(MemoryFile.objects.values_list("path", "skip_reason"))
    assert reasons["memory/binary.md"] == "binary (contains NUL bytes)"
    assert reasons["memory/huge.md"] == "larger than 2048 bytes"
    assert reasons["memory/latin1.md"] == "not valid UTF-8 (at byte 3)"
    assert reasons["memory/empty.md"] == reasons["memory/fine.md"] == ""
    assert list(MemoryChunk.objects.values_list("file__path", flat=True)) == ["memory/fine.md"]


def test_it_lists_a_symlink_out_as_skipped_without_reading_it(alice, workspace, tmp_path, embed):
    outside = write(tmp_path, "secret.md", "the secret")
    (workspace / "memory").mkdir()
    (workspace / "memory" / "link.md").symlink_to(outside)
    index_workspace(alice)
    assert MemoryFile.objects.get().skip_reason == (
        "a symbolic link (links in a workspace are not followed)"
    )
    assert not MemoryChunk.objects.exists() and embed.calls == []


def test_it_stores_nothing_new_when_indexing_twice_or_after_a_touch(alice, workspace, embed):
    path = write(workspace, "MEMORY.md", "# Pets\nBiscuit is a dog.\n")
    index_workspace(alice)
    rows = list(MemoryChunk.objects.values_list("id", "content_hash", "embedded_at"))
    os.utime(path, ns=(1, 1))  # stat changed, content not
    assert index_workspace(alice).files_changed == 1
    assert index_workspace(alice).files_changed == 0
    assert list(MemoryChunk.objects.values_list("id", "content_hash", "embedded_at")) == rows
    assert embed.texts == 1


def test_it_embeds_the_same_text_twice_in_a_file_once(alice, workspace, embed):
    write(workspace, "MEMORY.md", "# Same\nrepeat\n# Same\nrepeat\n")
    index_workspace(alice)
    index_workspace(alice)
    rows = list(MemoryChunk.objects.values_list("position", "content_hash", "start_line"))
    assert [(p, s) for p, _, s in rows] == [(0, 1), (1, 3)]
    assert rows[0][1] == rows[1][1]
    assert embed.calls == [["Same\n# Same\nrepeat"]]


def test_it_retries_the_embedding_after_a_failure(alice, workspace, monkeypatch):
    def broken(texts, batch_size=32):
        raise RuntimeError("model missing")

    monkeypatch.setattr(indexing, "embed_texts", broken)
    write(workspace, "MEMORY.md", "hello")
    assert index_workspace(alice).chunks_embedded == 0
    assert MemoryChunk.objects.get().embedding_error == "RuntimeError: model missing"
    monkeypatch.setattr(indexing, "embed_texts", CountingEmbed())
    assert index_workspace(alice).chunks_embedded == 1
    assert MemoryChunk.objects.get().embedding_error is None


def test_it_keeps_each_users_and_agents_files_apart(alice, bob, embed, backend):
    write(workspace_dir(alice.pk, "main"), "MEMORY.md", "alice main")
    write(workspace_dir(alice.pk, "work"), "MEMORY.md", "alice work")
    write(workspace_dir(bob.pk, "main"), "MEMORY.md", "bob main")
    for owner, agent in [(alice, "main"), (alice, "work"), (bob, "main")]:
        index_workspace(owner, agent)
    hits = search_files(alice, "main", fake_vector("alice main"), k=10)
    assert [hit.text for hit in hits] == ["alice main"]


# Search


def test_it_finds_the_right_chunk_with_the_real_model(alice, workspace, backend):
    write(
        workspace,
        "memory/household.md",
        "# Household\n\n## Wifi\nThe wifi password is on the fridge: sunflower42.\n\n"
        "## Plants\nWater the ficus every Sunday.\n",
    )
    write(workspace, "MEMORY.md", "# Work\nStand-up is at 9:30 with the platform team.\n")
    index_all_workspaces()  # written outside Neotask: the watcher job indexes them
    from memory.embeddings import embed_text

    hits = search_files(alice, "main", embed_text("how often do I water the plant?"), k=3)
    assert hits[0].path == "memory/household.md"
    assert hits[0].heading == "Household > Plants"
    assert hits[0].source == "memory/household.md:6-7"
    assert hits[0].score > hits[-1].score


def test_it_picks_up_changes_at_each_look_of_the_watcher(alice, workspace, embed, backend):
    write(workspace, "MEMORY.md", "first")
    index_all_workspaces()
    assert [h.text for h in search_files(alice, "main", fake_vector("first"), k=5)] == ["first"]
    write(workspace, "MEMORY.md", "second version")
    index_all_workspaces()
    assert [h.text for h in search_files(alice, "main", fake_vector("x"), k=5)] == [
        "second version"
    ]
    (workspace / "MEMORY.md").unlink()
    index_all_workspaces()
    assert search_files(alice, "main", fake_vector("x"), k=5) == []


def test_it_joins_file_chunks_with_conversation_memory_in_search(alice, workspace, backend):
    from memory.tasks import embed_missing

    recording.record(alice, "s1", "user_message", {"content": "I adopted a cat called Miso."})
    embed_missing()
    write(workspace, "MEMORY.md", "# Car\nThe car is a blue 2015 Volvo, plate KX-201.\n")
    index_all_workspaces()
    hits = search_memory(alice, "which car do I drive?")
    assert hits[0].kind == "file" and hits[0].source == "MEMORY.md:1-2"
    assert any(hit.kind == "event" for hit in hits)
    assert search_memory(alice, "which car do I drive?", files=False)[0].kind == "event"

    output = run_tool(
        ToolContext(owner=alice, session_id="s1", agent_name="main", workspace=workspace),
        "search_memory",
        query="which car do I drive?",
    )
    assert "Volvo" in output and "(source: MEMORY.md:1-2)" in output


# Tools


def test_it_writes_appends_reads_and_lists_memory_files(alice, context, workspace, embed):
    assert "no memory files" in run_tool(context, "list_memory_files")
    written = run_tool(context, "write_memory_file", path="MEMORY.md", text="# Me")
    assert written == "Wrote MEMORY.md (4 characters)."
    run_tool(context, "append_memory_file", path="MEMORY.md", text="I like tea.")
    run_tool(context, "append_memory_file", path="memory/people/ann.md", text="Ann: sister")
    assert run_tool(context, "read_memory_file", path="MEMORY.md") == "# Me\nI like tea."
    assert (workspace / "memory/people/ann.md").read_text() == "Ann: sister"
    listing = run_tool(context, "list_memory_files")
    assert "MEMORY.md (16 bytes)" in listing and "memory/people/ann.md" in listing
    # Written files are indexed at once.
    assert set(MemoryChunk.objects.values_list("text", flat=True)) == {
        "# Me\nI like tea.",
        "Ann: sister",
    }
    assert not MemoryChunk.objects.filter(embedding__isnull=True).exists()


def test_it_reports_missing_binary_and_too_large_files_to_the_model(context, workspace, configure):
    configure("memory", file_max_bytes=1024)
    with pytest.raises(ToolError, match="does not exist"):
        run_tool(context, "read_memory_file", path="memory/none.md")
    write(workspace, "memory/blob.md", b"\x00\x01")
    with pytest.raises(ToolError, match="binary"):
        run_tool(context, "read_memory_file", path="memory/blob.md")
    with pytest.raises(ToolError, match="more than the 1024 allowed"):
        run_tool(context, "write_memory_file", path="MEMORY.md", text="x" * 2000)
    assert not (workspace / "MEMORY.md").exists()


def test_it_leaves_no_temporary_files_behind(context, workspace, embed):
    run_tool(context, "write_memory_file", path="memory/a.md", text="one")
    run_tool(context, "write_memory_file", path="memory/a.md", text="two")
    assert os.listdir(workspace / "memory") == ["a.md"]


# The page


def test_it_lists_the_users_files_with_skip_reasons(alice_client, alice, workspace, embed):
    write(workspace, "MEMORY.md", "# Me\nhello")
    write(workspace, "memory/blob.md", b"\x00")
    index_all_workspaces()  # the watcher job
    content = alice_client.get("/memory/files/").content.decode()
    assert "MEMORY.md" in content and "memory/blob.md" in content
    assert "Skipped: binary (contains NUL bytes)" in content
    assert 'href="/memory/files/"' in alice_client.get("/memory/").content.decode()


def test_it_lists_the_files_on_disk_without_indexing_them(alice_client, alice, workspace, embed):
    write(workspace, "MEMORY.md", "# Me\nhello")
    index_workspace(alice)
    write(workspace, "memory/new.md", "written outside Neotask")
    (workspace / "MEMORY.md").unlink()
    indexed = list(MemoryFile.objects.values_list("path", "sha256", "indexed_at"))
    embed.reset()
    content = alice_client.get("/memory/files/").content.decode()
    assert "memory/new.md" in content and "Not yet" in content
    assert "MEMORY.md</a>" not in content  # gone from disk, though its rows are still there
    assert list(MemoryFile.objects.values_list("path", "sha256", "indexed_at")) == indexed
    assert embed.calls == []


def test_a_search_only_reads_and_the_watcher_finds_a_file_edited_outside_neotask(
    alice_client, alice, workspace, embed
):
    full = write(workspace, "MEMORY.md", "# Pets\nThe cat is called Tom.")
    index_workspace(alice)
    full.write_text("# Pets\nThe dog is called Rex.", encoding="utf-8")
    os.utime(full, ns=(full.stat().st_atime_ns, full.stat().st_mtime_ns + 1_000_000_000))
    assert "Not yet" in alice_client.get("/memory/files/").content.decode()
    rows = list(MemoryChunk.objects.values_list("text", flat=True))
    embed.reset()
    hits = search_files(alice, "main", fake_vector("# Pets\nThe dog is called Rex."), k=1)
    assert [hit.text for hit in hits] == ["# Pets\nThe cat is called Tom."]  # what was indexed
    assert list(MemoryChunk.objects.values_list("text", flat=True)) == rows
    assert embed.calls == []
    index_all_workspaces()  # the watcher job
    hits = search_files(alice, "main", fake_vector("# Pets\nThe dog is called Rex."), k=1)
    assert [hit.text for hit in hits] == ["# Pets\nThe dog is called Rex."]
    assert "Not yet" not in alice_client.get("/memory/files/").content.decode()


def test_it_shows_and_saves_a_file(alice_client, alice, workspace, embed):
    write(workspace, "MEMORY.md", "old text")
    response = alice_client.get("/memory/files/view/", {"path": "MEMORY.md"})
    assert response.status_code == 200 and "old text" in response.content.decode()
    sha = response.context["sha256"]
    response = alice_client.post(
        "/memory/files/view/", {"path": "MEMORY.md", "sha256": sha, "text": "new\r\ntext"}
    )
    assert response.status_code == 302
    assert (workspace / "MEMORY.md").read_text() == "new\ntext"
    assert MemoryChunk.objects.get().text == "new\ntext"


def test_it_refuses_to_overwrite_a_file_changed_meanwhile(alice_client, alice, workspace, embed):
    write(workspace, "MEMORY.md", "opened version")
    sha = alice_client.get("/memory/files/view/", {"path": "MEMORY.md"}).context["sha256"]
    write(workspace, "MEMORY.md", "changed by the agent")
    response = alice_client.post(
        "/memory/files/view/", {"path": "MEMORY.md", "sha256": sha, "text": "my edit"}
    )
    assert response.status_code == 409
    content = response.content.decode()
    assert "changed since you opened it" in content
    assert "changed by the agent" in content and "my edit" in content
    assert (workspace / "MEMORY.md").read_text() == "changed by the agent"
    # Saving again from the conflict page is a deliberate choice.
    response = alice_client.post(
        "/memory/files/view/",
        {"path": "MEMORY.md", "sha256": response.context["sha256"], "text": "my edit"},
    )
    assert response.status_code == 302
    assert (workspace / "MEMORY.md").read_text() == "my edit"


def test_it_creates_and_deletes_a_file(alice_client, alice, workspace, embed):
    response = alice_client.post("/memory/files/new/", {"name": "ideas"})
    assert response.status_code == 302 and "memory%2Fideas.md" in response.url
    assert (workspace / "memory/ideas.md").read_text() == ""
    response = alice_client.post("/memory/files/new/", {"name": "ideas"}, follow=True)
    assert "already exists" in response.content.decode()

    confirm = alice_client.get("/memory/files/delete/", {"path": "memory/ideas.md"})
    assert confirm.status_code == 200 and "cannot be undone" in confirm.content.decode()
    assert (workspace / "memory/ideas.md").exists()
    response = alice_client.post("/memory/files/delete/", {"path": "memory/ideas.md"})
    assert response.status_code == 302
    assert not (workspace / "memory/ideas.md").exists()
    assert not MemoryFile.objects.exists()


@pytest.mark.parametrize("path", ESCAPES)
def test_it_refuses_escapes_in_the_page(alice_client, alice, tmp_path, path):
    assert alice_client.get("/memory/files/view/", {"path": path}).status_code == 404
    response = alice_client.post("/memory/files/view/", {"path": path, "sha256": "", "text": "x"})
    assert response.status_code == 404
    assert alice_client.post("/memory/files/delete/", {"path": path}).status_code == 404
    response = alice_client.post("/memory/files/new/", {"name": path}, follow=True)
    assert response.status_code == 200
    assert not (tmp_path / "x.md").exists() and not (tmp_path / "data/x.md").exists()
    assert alice_client.get("/memory/files/", {"agent": "../1"}).status_code == 404


def test_it_never_shows_another_users_files(alice_client, bob_client, alice, workspace, embed):
    write(workspace, "memory/diary.md", "alice's secret")
    assert alice_client.get("/memory/files/view/", {"path": "memory/diary.md"}).status_code == 200
    assert bob_client.get("/memory/files/view/", {"path": "memory/diary.md"}).status_code == 404
    assert "diary" not in bob_client.get("/memory/files/").content.decode()
    response = bob_client.post("/memory/files/delete/", {"path": "memory/diary.md"})
    assert response.status_code == 404 and (workspace / "memory/diary.md").exists()
    response = bob_client.get("/memory/files/view/", {"path": f"../../{alice.pk}/main/MEMORY.md"})
    assert response.status_code == 404


def test_it_asks_anonymous_visitors_to_log_in(client, db):
    assert client.get("/memory/files/").status_code == 302


# The watcher


def test_it_re_indexes_every_workspace_with_files_in_the_watcher_job(alice, bob, embed):
    write(workspace_dir(alice.pk, "main"), "MEMORY.md", "alice")
    write(workspace_dir(bob.pk, "work"), "memory/a.md", "bob")
    assert index_all_workspaces() == 2
    assert set(MemoryChunk.objects.values_list("owner_id", "agent", "text")) == {
        (alice.pk, "main", "alice"),
        (bob.pk, "work", "bob"),
    }
    (workspace_dir(alice.pk, "main") / "MEMORY.md").unlink()
    index_all_workspaces()
    assert list(MemoryChunk.objects.values_list("text", flat=True)) == ["bob"]


def test_it_schedules_the_watcher_every_minute(db):
    install_schedules(sender=None)
    schedule = Schedule.objects.get(name=FILES_SCHEDULE)
    assert schedule.func == "memory.files.indexing.index_all_workspaces"
    assert (schedule.schedule_type, schedule.minutes) == (Schedule.MINUTES, 1)


@in_process_vectors
def test_it_rebuilds_a_missing_or_corrupt_lancedb_table(alice, workspace, embed, configure, caplog):
    pytest.importorskip("lancedb", reason='the LanceDB plugin (pip install ".[lancedb]")')
    import shutil

    from django.conf import settings

    configure("memory", vector_backend="lancedb")
    write(workspace, "MEMORY.md", "first")
    index_all_workspaces()
    assert [h.text for h in search_files(alice, "main", fake_vector("first"), k=5)] == ["first"]
    table = Path(settings.DATA_DIR) / "lancedb" / f"chunks_{alice.pk}_main.lance"
    assert table.is_dir()
    for damage in ("corrupt", "missing"):
        forget_chunk_indexes()  # a new process
        if damage == "corrupt":
            for part in table.rglob("*"):
                if part.is_file():
                    part.write_bytes(b"garbage")
        else:
            shutil.rmtree(table)
        caplog.clear()
        with caplog.at_level("WARNING"):
            hits = search_files(alice, "main", fake_vector("first"), k=5)
        assert [h.text for h in hits] == ["first"]
        assert "rebuilding the LanceDB table" in caplog.text


@in_process_vectors
def test_it_names_the_plugin_when_lancedb_is_chosen_but_missing(
    alice, workspace, embed, configure, monkeypatch
):
    import builtins

    real_import = builtins.__import__

    def no_lancedb(name, *args, **kwargs):
        if name == "lancedb":
            raise ImportError("No module named 'lancedb'")
        return real_import(name, *args, **kwargs)

    configure("memory", vector_backend="lancedb")
    monkeypatch.setattr(builtins, "__import__", no_lancedb)
    write(workspace, "MEMORY.md", "first")
    with pytest.raises(RuntimeError, match=r'pip install "\.\[lancedb\]"'):
        search_files(alice, "main", fake_vector("first"), k=5)


def test_a_terminal_command_that_writes_a_memory_file_indexes_it(context, embed, configure):
    configure("terminal", enabled=True, timeout_seconds=10.0)
    output = get_tool("terminal").run(context, {"command": "printf 'The boat is red.' > MEMORY.md"})
    assert output == "exit code 0\n"
    hits = search_files(context.owner, "main", fake_vector("The boat is red."), k=1)
    assert [hit.text for hit in hits] == ["The boat is red."]
