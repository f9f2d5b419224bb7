"""Exporting everything of a user: the archive's layout and content, and the
three ways to ask for it (the Your data page, the API, the command), each
running the same background job; another user's data never in it."""

from __future__ import annotations

import io
import json
import threading
import zipfile
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from importers.archive import jobs as archive_jobs
from importers.archive import layout, writing
from importers.archive.jobs import run_export
from importers.archive.writing import export_user
from importers.models import ExportJob, ImportJob
from memory import recording
from memory.files.paths import write_memory_file
from memory.models import Event, Fact
from memory.workspace import workspace_dir
from sessions_app import chat
from sessions_app.models import Agent, ApiToken, Session
from tests.support.archives import USAGE, build_user_data, lines, members
from tests.support.records import take_queued_tasks
from tests.support.web import HTMX, text


@pytest.fixture
def bob_lookalike(bob) -> None:
    """Bob has the same kinds of things, each marked as his."""
    build_user_data(bob, marker=" (bob)")


def test_it_writes_the_manifest_first_with_a_checksum_per_member(alice, tmp_path):
    build_user_data(alice)
    path = tmp_path / "alice.zip"

    counts = export_user(alice, path)

    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        manifest = json.loads(archive.read(names[0]))
    assert names[0] == layout.MANIFEST
    assert (manifest["format"], manifest["version"]) == ("neotask-export", 1)
    assert (
        manifest["counts"]
        == counts
        == {
            "agents": 2,
            "sessions": 4,
            "events": 7,
            "facts": 2,
            "macros": 1,
            "tasks": 1,
            "rules": 1,
            "memory_files": 2,
        }
    )
    assert sorted(manifest["members"]) == sorted(names[1:])
    found = members(path)
    assert found["memory/main/MEMORY.md"] == b"# Me\nTea\n"
    assert found["memory/coder/memory/stack/python.md"] == b"# Py\n3.11\n"


def test_it_writes_sessions_with_tool_calls_results_and_usage(alice, tmp_path):
    build_user_data(alice)
    path = tmp_path / "alice.zip"
    export_user(alice, path)
    first = Session.objects.get(owner=alice, continues_from__isnull=True, chat="plans")

    head, user, assistant, call, result = lines(members(path)[f"sessions/{first.pk}.jsonl"])

    assert head["type"] == "session" and head["key"] == "agent:main:web:plans"
    assert head["tokens"] == USAGE and head["status"] == "archived"
    assert user["content"] == "Book the lake house" and user["role"] == "user"
    assert assistant["usage"] == USAGE and assistant["tool_calls"][0]["id"] == "call_1"
    assert call["tool_call"] == {
        "id": "call_1",
        "name": "terminal",
        "arguments": '{"command": "ls"}',
    }
    assert result["tool_call_id"] == "call_1" and result["importance"] == 1.0


def test_it_never_exports_another_users_rows(alice, bob_lookalike, tmp_path):
    build_user_data(alice)
    recording.record(
        alice.__class__.objects.get(username="bob"),
        "loose",
        "user_message",
        {"content": "a loose message (bob)"},
    )
    path = tmp_path / "alice.zip"

    export_user(alice, path)

    assert not [name for name, data in members(path).items() if b"(bob)" in data]


def test_it_leaves_out_links_and_binary_files_in_the_workspace(alice, tmp_path):
    Agent.objects.default_for(alice)
    workspace = workspace_dir(alice.pk, "main")
    write_memory_file(workspace, "MEMORY.md", "# Mine\n")
    secret = tmp_path / "secret.md"
    secret.write_text("server secrets")
    (workspace / "memory").mkdir()
    (workspace / "memory" / "link.md").symlink_to(secret)
    (workspace / "memory" / "photo.md").write_bytes(b"\x89PNG\x00\x00")
    path = tmp_path / "alice.zip"

    export_user(alice, path)

    assert [name for name in members(path) if name.startswith("memory/")] == [
        "memory/main/MEMORY.md"
    ]


# The command


def test_it_exports_from_the_shell_with_progress(alice, tmp_path):
    build_user_data(alice)
    out, err = io.StringIO(), io.StringIO()
    path = tmp_path / "alice.zip"

    call_command("export_user", "alice", "--output", str(path), stdout=out, stderr=err)

    assert f"Wrote {path}" in out.getvalue() and "7 events" in out.getvalue()
    assert "100%" in err.getvalue()
    assert members(path)[layout.MANIFEST]


def test_it_refuses_to_overwrite_or_to_export_nobody(alice, tmp_path):
    taken = tmp_path / "taken.zip"
    taken.write_bytes(b"mine")

    with pytest.raises(CommandError, match="exists"):
        call_command("export_user", "alice", "--output", str(taken))
    with pytest.raises(CommandError, match='no user "nobody"'):
        call_command("export_user", "nobody", "--output", str(tmp_path / "x.zip"))
    assert taken.read_bytes() == b"mine"


# The page


def test_it_offers_the_page_from_the_nav(alice_client):
    assert 'href="/data/"' in text(alice_client.get("/tasks/"))
    page = text(alice_client.get("/data/"))
    assert "Export my data" in page and 'name="neotask-file"' in page


def test_it_exports_in_a_job_and_offers_the_download_only_when_done(alice, alice_client):
    build_user_data(alice)
    take_queued_tasks()

    response = alice_client.post("/data/export/")

    job = ExportJob.objects.get(owner=alice)
    assert response.status_code == 302 and response["Location"] == f"/data/exports/{job.pk}/"
    waiting = text(alice_client.get(f"/data/exports/{job.pk}/", **HTMX))
    assert "Waiting for a worker" in waiting and 'hx-trigger="every 1s"' in waiting
    assert "download" not in waiting
    assert alice_client.get(f"/data/exports/{job.pk}/download").status_code == 404
    [queued] = take_queued_tasks()
    assert queued["func"] == "importers.archive.jobs.run_export"

    run_export(*queued["args"])

    done = text(alice_client.get(f"/data/exports/{job.pk}/", **HTMX))
    assert "Ready" in done and f"/data/exports/{job.pk}/download" in done
    assert "hx-trigger" not in done
    download = alice_client.get(f"/data/exports/{job.pk}/download")
    archive = b"".join(download)
    assert download["Content-Type"] == "application/zip"
    assert json.loads(members(archive)[layout.MANIFEST])["counts"]["sessions"] == 4


def test_it_shows_the_progress_of_a_running_export(alice, alice_client):
    job = ExportJob.objects.create(owner=alice, status="running", progress_total=8)
    job.progress_done = 2
    job.save()

    page = text(alice_client.get(f"/data/exports/{job.pk}/", **HTMX))

    assert '<progress value="2" max="8">' in page and "25%" in page


def test_it_imports_an_uploaded_export_in_a_job(alice, alice_client, bob, tmp_path):
    build_user_data(bob)
    path = tmp_path / "bob.zip"
    export_user(bob, path)
    take_queued_tasks()

    with path.open("rb") as upload:
        response = alice_client.post("/data/import/", {"neotask-file": upload})

    job = ImportJob.objects.get(owner=alice)
    assert job.kind == "neotask" and response["Location"] == f"/import/{job.pk}/"
    [queued] = [t for t in take_queued_tasks() if t["func"] == "importers.jobs.run_import"]
    from importers.jobs import run_import

    run_import(*queued["args"])
    job.refresh_from_db()
    assert job.status == "done", job.error
    assert Session.objects.filter(owner=alice).count() == 4
    assert "Imported." in text(alice_client.get(f"/import/{job.pk}/"))


def test_it_refuses_an_upload_that_is_no_export_on_the_form(alice, alice_client):
    upload = io.BytesIO(b"just text")
    upload.name = "notes.zip"

    response = alice_client.post("/data/import/", {"neotask-file": upload})

    assert response.status_code == 400
    assert "not a Neotask export" in text(response)
    assert not ImportJob.objects.exists()


# The API


@pytest.fixture
def api(alice) -> Client:
    return Client(headers={"Authorization": f"Bearer {ApiToken.issue(alice, 'script')[1]}"})


def test_it_exports_through_the_api(alice, api):
    build_user_data(alice)
    take_queued_tasks()

    started = api.post("/api/v1/export")

    body = started.json()
    assert started.status_code == 202 and started["Location"] == f"/api/v1/export/{body['id']}"
    assert body["status"] == "queued" and body["download"] is None
    assert api.get(f"/api/v1/export/{body['id']}/download").status_code == 409
    [queued] = take_queued_tasks()
    run_export(*queued["args"])
    state = api.get(f"/api/v1/export/{body['id']}").json()
    assert state["status"] == "done" and state["counts"]["events"] == 7
    archive = b"".join(api.get(state["download"]))
    assert members(archive)[layout.FACTS].count(b"\n") == 2


def test_it_imports_through_the_api(alice, api, bob, tmp_path):
    build_user_data(bob)
    path = tmp_path / "bob.zip"
    export_user(bob, path)
    take_queued_tasks()

    with path.open("rb") as upload:
        response = api.post("/api/v1/import", {"file": upload, "dry_run": "true"})

    body = response.json()
    assert response.status_code == 202 and body["dry_run"] is True
    job = ImportJob.objects.get(pk=body["id"], owner=alice)
    assert job.kind == "neotask"
    assert api.get(f"/api/v1/import/{job.pk}").json()["status"] == "queued"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "in the field 'file'"),
        ({"file": io.BytesIO(b"PK not a zip")}, "not a Neotask export"),
    ],
)
def test_it_answers_a_bad_import_upload_with_400(alice, api, data, message):
    for upload in data.values():
        upload.name = "x.zip"

    response = api.post("/api/v1/import", data)

    assert response.status_code == 400 and message in response.json()["error"]
    assert not ImportJob.objects.exists()


def test_it_answers_other_users_jobs_with_404(alice, api, bob):
    theirs = ExportJob.objects.create(owner=bob)
    their_import = ImportJob.objects.create(owner=bob, kind="neotask")

    for path in (
        f"/api/v1/export/{theirs.pk}",
        f"/api/v1/export/{theirs.pk}/download",
        f"/api/v1/import/{their_import.pk}",
        "/api/v1/export/not-a-uuid",
    ):
        assert api.get(path).status_code == 404, path


def test_it_refuses_an_oversized_upload_before_reading_it(alice, alice_client, api):
    too_large = str(200 * 1024 * 1024 + 65 * 1024)

    page = alice_client.post("/data/import/", CONTENT_LENGTH=too_large)
    answer = api.post("/api/v1/import", CONTENT_LENGTH=too_large)

    assert page.status_code == 413 and "uploads are limited to 200 MB" in text(page)
    assert answer.status_code == 413 and "import_user" in answer.json()["error"]
    assert not ImportJob.objects.exists()


def test_it_keeps_the_three_newest_exports_and_removes_older_archives(alice):
    take_queued_tasks()
    for _ in range(4):
        job = archive_jobs.start(alice)
        run_export(str(job.pk))
    take_queued_tasks()

    kept = list(ExportJob.objects.filter(owner=alice))

    assert len(kept) == 3 and job in kept
    exports = {path.name for path in (Path(settings.DATA_DIR) / "exports").iterdir()}
    assert exports == {str(export.pk) for export in kept}


def test_it_removes_the_archive_with_its_job(alice):
    job = archive_jobs.start(alice)
    run_export(str(job.pk))
    job.refresh_from_db()
    assert job.archive_path is not None and job.archive_path.is_file()

    ExportJob.objects.filter(pk=job.pk).delete()

    assert not job.folder.exists()


@pytest.mark.django_db(transaction=True)
def test_it_exports_one_consistent_moment_while_a_chat_goes_on(tmp_path, monkeypatch):
    """A message and a fact stored (by another connection) after the export began are
    not in it, though the export reads the sessions and facts after they were stored."""
    owner = User.objects.create_user("erin")
    session = chat.start_chat(owner)
    recording.record(owner, str(session.pk), "user_message", {"content": "before"})
    Fact.objects.create(owner=owner, category="home", key="city", value="Lyon")
    staged = writing.Staging.path

    def while_chatting(staging: writing.Staging, name: str) -> Path:
        if name == layout.AGENTS:  # read already; sessions and facts not yet
            worker = threading.Thread(target=chat_meanwhile, args=(owner, session))
            worker.start()
            worker.join()
        return staged(staging, name)

    monkeypatch.setattr(writing.Staging, "path", while_chatting)
    path = tmp_path / "erin.zip"

    counts = export_user(owner, path)

    assert counts["events"] == 1 and counts["facts"] == 1
    assert Event.objects.filter(owner=owner).count() == 2  # stored, after the moment
    assert Fact.objects.filter(owner=owner).count() == 2


def chat_meanwhile(owner: User, session: Session) -> None:
    try:
        recording.record(owner, str(session.pk), "assistant_response", {"content": "after"})
        Fact.objects.create(owner=owner, category="home", key="pet", value="cat")
    finally:
        connection.close()
