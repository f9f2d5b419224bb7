"""The import page: uploads become django-q2 jobs whose progress and report the page shows."""

from __future__ import annotations

import io
import json
import sqlite3
import stat
import zipfile
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from importers import uploads
from importers.aidaemon.reading import count_rows
from importers.jobs import JOB_TIMEOUT, run_import, upload_path
from importers.models import ImportJob
from importers.report import ImportRefused
from memory.models import Event
from sessions_app.models import Session
from tests.support.imports import CAT, TELEGRAM, build_db, upload, zipped
from tests.support.records import take_queued_tasks
from tests.support.web import HTMX


def imports_dir() -> Path:
    return Path(settings.DATA_DIR) / "imports"


def stored_uploads() -> list[Path]:
    return list(imports_dir().glob("*/*")) if imports_dir().exists() else []


def test_it_offers_both_importers_from_the_nav(alice_client):
    page = alice_client.get("/import/").content.decode()
    assert 'href="/import/"' in alice_client.get("/tasks/").content.decode()
    assert 'name="aidaemon-file"' in page and 'name="openclaw-file"' in page
    assert 'enctype="multipart/form-data"' in page


def test_it_imports_an_uploaded_database_in_a_job_and_shows_the_report(
    alice, alice_client, tmp_path
):
    take_queued_tasks()
    database = build_db(tmp_path / "aidaemon.db")

    response = upload(alice_client, "aidaemon", "aidaemon.db", database.read_bytes())

    job = ImportJob.objects.get(owner=alice)
    assert response.status_code == 302 and response["Location"] == f"/import/{job.pk}/"
    assert (job.status, job.filename, job.agent, job.dry_run) == (
        "queued",
        "aidaemon.db",
        "main",
        False,
    )
    assert upload_path(job).read_bytes() == database.read_bytes()
    waiting = alice_client.get(f"/import/{job.pk}/").content.decode()
    assert "Waiting for a worker" in waiting and 'hx-trigger="every 1s"' in waiting
    [queued] = take_queued_tasks()  # for the cluster: the request imports nothing
    assert queued["func"] == "importers.jobs.run_import"
    assert queued["args"] == (str(job.pk),) and queued["timeout"] == JOB_TIMEOUT
    assert not Event.objects.exists()

    run_import(*queued["args"])  # what the worker does

    job.refresh_from_db()
    assert job.status == "done" and job.error == ""
    assert job.progress_done == job.progress_total == count_rows(database)
    assert ["messages", 5, 4, 1] in [row[:4] for row in job.report["rows"]]
    assert not job.upload_dir.exists()  # the upload is deleted
    page = alice_client.get(f"/import/{job.pk}/", **HTMX).content.decode()
    assert "Imported." in page and "created_at is not a timestamp (1)" in page
    assert "hx-trigger" not in page  # done: no more polling
    chat = alice_client.get(f"/chat/agent:main:import:{TELEGRAM}/").content.decode()
    assert CAT in chat

    run_import(str(job.pk))  # delivered twice by the broker: runs once
    assert Event.objects.filter(owner=alice).count() == 7


def test_it_shows_the_progress_of_a_running_job(alice, alice_client):
    job = ImportJob.objects.create(
        owner=alice, kind="aidaemon", filename="a.db", status="running", progress_total=400
    )
    job.progress_done = 100
    job.save()

    page = alice_client.get(f"/import/{job.pk}/", **HTMX).content.decode()

    assert '<progress value="100" max="400">' in page and "25%" in page
    assert 'hx-trigger="every 1s"' in page


def test_it_runs_a_dry_run_upload_without_writing(alice, alice_client, tmp_path):
    take_queued_tasks()
    database = build_db(tmp_path / "aidaemon.db")
    upload(alice_client, "aidaemon", "aidaemon.db", database.read_bytes(), dry_run="on")
    [queued] = take_queued_tasks()

    run_import(*queued["args"])

    job = ImportJob.objects.get(owner=alice)
    assert job.dry_run and job.report["dry_run"] and job.status == "done"
    assert not Event.objects.exists() and not Session.objects.exists()
    assert (
        "Dry run: nothing was written." in alice_client.get(f"/import/{job.pk}/").content.decode()
    )


def test_it_reports_a_failed_import_and_removes_the_upload(alice, alice_client, tmp_path):
    take_queued_tasks()
    path = tmp_path / "recipes.db"
    with sqlite3.connect(path) as db:  # SQLite, but not aidaemon's
        db.execute("CREATE TABLE recipes (name TEXT)")
    upload(alice_client, "aidaemon", "recipes.db", path.read_bytes())
    [queued] = take_queued_tasks()

    run_import(*queued["args"])

    job = ImportJob.objects.get(owner=alice)
    assert job.status == "failed" and "none of aidaemon's tables" in job.error
    assert not job.upload_dir.exists()
    page = alice_client.get(f"/import/{job.pk}/").content.decode()
    assert "The import failed: recipes.db has none of aidaemon&#x27;s tables" in page


def test_it_says_so_when_the_job_cannot_be_queued(alice, alice_client, tmp_path, monkeypatch):
    def broker_down(*args: object, **kwargs: object) -> None:
        raise ConnectionError("redis is down")

    monkeypatch.setattr("django_q.tasks.async_task", broker_down)
    upload(alice_client, "aidaemon", "a.db", build_db(tmp_path / "a.db").read_bytes())

    job = ImportJob.objects.get(owner=alice)
    assert job.status == "failed" and "could not be queued (redis is down)" in job.error
    assert not job.upload_dir.exists()


def test_it_refuses_a_file_that_is_not_sqlite_at_once(alice, alice_client):
    response = upload(alice_client, "aidaemon", "notes.txt", b"hello, not a database")

    assert response.status_code == 400
    assert "notes.txt is not a SQLite database." in response.content.decode()
    assert not ImportJob.objects.exists() and not stored_uploads()


def test_it_refuses_an_oversized_upload(alice, alice_client, monkeypatch):
    monkeypatch.setattr(uploads, "MAX_UPLOAD_BYTES", 4 * 1024 * 1024)

    # Told by its size before it is read...
    huge = upload(alice_client, "aidaemon", "big.db", b"SQLite format 3\x00" + bytes(5 << 20))
    # ...or, within the allowance for the form around it, by the form.
    large = upload(alice_client, "aidaemon", "big.db", uploads.SQLITE_HEADER + bytes(4 << 20))

    assert huge.status_code == 413
    assert "The upload is 5 MB; uploads are limited to 4 MB." in huge.content.decode()
    assert large.status_code == 400
    assert "The file is 4 MB; uploads are limited to 4 MB." in large.content.decode()
    assert not ImportJob.objects.exists() and not stored_uploads()


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("../evil.md", "a path leading out of the folder (..)"),
        ("agent/../../evil.md", "a path leading out of the folder (..)"),
        ("/etc/cron.d/evil.md", "an absolute path"),
        ("C:/Windows/evil.md", "an absolute path"),
        ("agent\\..\\evil.md", "a path with backslashes or NUL characters"),
    ],
)
def test_it_refuses_a_zip_leading_out_of_its_folder(alice, alice_client, name, problem):
    content = zipped({"agent/MEMORY.md": b"# Notes\n", name: b"gotcha"})

    response = upload(alice_client, "openclaw", "agent.zip", content)

    assert response.status_code == 400
    page = response.content.decode()
    assert "The zip is refused:" in page and f"evil.md&#x27; is {problem}." in page
    assert not ImportJob.objects.exists() and not stored_uploads()


def test_it_refuses_symlinks_and_zip_bombs(tmp_path, monkeypatch):
    link = zipfile.ZipInfo("agent/MEMORY.md")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(link, "/etc/passwd")
    with pytest.raises(ImportRefused, match="is a symbolic link"):
        uploads.check_zip(zipfile.ZipFile(buffer), len(buffer.getvalue()))

    monkeypatch.setattr(uploads, "MAX_UNPACKED_BYTES", 1024 * 1024)
    bomb = tmp_path / "bomb.zip"
    bomb.write_bytes(zipped({"agent/memory/zeros.md": bytes(2 * 1024 * 1024)}))
    assert bomb.stat().st_size < 10_000
    with pytest.raises(ImportRefused, match="unpacks to 2 MB; at most 1 MB"):
        uploads.unpack_zip(bomb, tmp_path / "out")


def test_it_unpacks_a_zip_into_its_top_folder(tmp_path):
    archive = tmp_path / "a.zip"
    archive.write_bytes(zipped({"my-agent/MEMORY.md": b"# Notes\n", "my-agent/sessions/x": b"{}"}))

    folder = uploads.unpack_zip(archive, tmp_path / "out")

    assert folder == tmp_path / "out" / "my-agent"
    assert (folder / "MEMORY.md").read_bytes() == b"# Notes\n"


def test_it_imports_an_uploaded_openclaw_zip(alice, alice_client):
    take_queued_tasks()
    transcript = [
        {"type": "session", "id": "abc123", "timestamp": "2025-06-01T10:00:00Z"},
        {
            "type": "message",
            "id": "e1",
            "timestamp": "2025-06-01T10:00:01Z",
            "message": {"role": "user", "content": [{"type": "text", "text": "Where is Ana?"}]},
        },
        {
            "type": "message",
            "id": "e2",
            "timestamp": "2025-06-01T10:00:02Z",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "In Lisbon."}]},
        },
    ]
    index = {"agent:main:main": {"sessionId": "abc123", "updatedAt": 1748772002000}}
    content = zipped(
        {
            "agent/sessions/sessions.json": json.dumps(index).encode(),
            "agent/sessions/abc123.jsonl": "\n".join(map(json.dumps, transcript)).encode(),
            "agent/MEMORY.md": b"# Memory\n\nAna lives in Lisbon.\n",
        }
    )

    upload(alice_client, "openclaw", "agent.zip", content)
    [queued] = take_queued_tasks()
    run_import(*queued["args"])

    job = ImportJob.objects.get(owner=alice)
    assert job.status == "done", job.error
    transcript_bytes = len("\n".join(map(json.dumps, transcript)))
    assert job.progress_total == transcript_bytes  # the page shows a real bar
    assert {"Where is Ana?", "In Lisbon."} <= set(
        Event.objects.owned_by(alice).values_list("text", flat=True)
    )
    assert not job.upload_dir.exists()
    assert "Imported." in alice_client.get(f"/import/{job.pk}/").content.decode()


def test_it_shows_each_user_only_their_own_imports(alice, bob_client):
    job = ImportJob.objects.create(owner=alice, kind="aidaemon", filename="alice-secret.db")

    assert bob_client.get(f"/import/{job.pk}/").status_code == 404
    assert bob_client.get(f"/import/{job.pk}/", **HTMX).status_code == 404
    assert "alice-secret.db" not in bob_client.get("/import/").content.decode()


def test_it_lists_the_users_recent_imports(alice, alice_client):
    ImportJob.objects.create(owner=alice, kind="openclaw", filename="agent.zip", status="done")

    page = alice_client.get("/import/").content.decode()

    assert "Your imports" in page and "OpenClaw folder: agent.zip" in page


def test_it_asks_anonymous_visitors_to_log_in(alice, client):
    response = client.get("/import/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_it_says_a_job_whose_worker_died_failed(alice, alice_client):
    started = timezone.now() - timedelta(seconds=JOB_TIMEOUT + 60)
    dead = ImportJob.objects.create(
        owner=alice, kind="aidaemon", filename="old.db", status="running", started_at=started
    )
    dead.upload_dir.mkdir(parents=True)
    alive = ImportJob.objects.create(
        owner=alice, kind="aidaemon", filename="new.db", status="running", started_at=timezone.now()
    )

    page = alice_client.get(f"/import/{dead.pk}/", **HTMX).content.decode()
    assert "The import failed: The import stopped without finishing" in page
    assert 'hx-trigger="every 1s"' not in page  # no more polling
    assert not dead.upload_dir.exists()
    alive.refresh_from_db()
    assert alive.status == "running"
