"""Importing a Neotask export: the round trip, no trust carried, and bad archives
refused whole with nothing written."""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from agent.models import TerminalAllowedPrefix
from importers.archive import layout
from importers.archive.importing import import_archive
from importers.archive.writing import export_user
from importers.report import ImportRefused
from memory.models import Event, Fact, Macro, MemoryFile, default_importance
from scheduler.models import ScheduledTask
from sessions_app.models import Agent, Session
from tests.support.archives import build_user_data, content, members
from tests.support.world import snapshot


@pytest.fixture
def archive(alice, tmp_path) -> Path:
    build_user_data(alice)
    path = tmp_path / "alice.zip"
    export_user(alice, path)
    return path


def test_it_gives_back_the_same_content_after_a_round_trip(alice, archive, tmp_path, db):
    carol = User.objects.create_user("carol")

    report = import_archive(archive, carol)

    again = tmp_path / "carol.zip"
    export_user(carol, again)
    expected = content(archive)
    # No trust is carried: the task arrives untrusted, the rule switched off.
    for task in expected[layout.TASKS]:
        task["is_trusted"] = False
    for rule in expected[layout.RULES]:
        rule["active"] = False
    # A fact keeps where it came from when that turn came along (linked to the
    # imported turn); the others came from this import.
    carried = [fact for fact in expected[layout.FACTS] if fact["origin_event_id"]]
    assert carried and carried[0]["origin"] == "turn"
    for fact in expected[layout.FACTS]:
        if not fact["origin_event_id"]:
            fact.update(origin="import", origin_label=f"Neotask export {archive.name}")
    # No event arrives above its kind's usual importance (the pinned tool result).
    for session in expected["sessions"]:
        for record in session[1:]:
            record["importance"] = min(record["importance"], default_importance(record["type"]))
    assert content(again) == expected
    assert report.imported["sessions"] == 4 and report.imported["events"] == 7
    assert not ScheduledTask.objects.get(owner=carol).is_trusted
    assert not TerminalAllowedPrefix.objects.get(owner=carol).active


def test_it_links_the_imported_task_to_its_runs_chat_and_continued_sessions(alice, archive, db):
    carol = User.objects.create_user("carol")

    import_archive(archive, carol)

    task = ScheduledTask.objects.get(owner=carol)
    assert Session.objects.filter(owner=carol, key=task.chat_key).exists()
    second = Session.objects.get(owner=carol, continues_from__isnull=False)
    assert second.continues_from.key == second.key == "agent:main:web:plans"
    assert task.agent == Agent.objects.get(owner=carol, name="coder")


def test_it_queues_the_imported_events_for_embedding_and_indexes_memory_files(alice, archive, db):
    carol = User.objects.create_user("carol")

    import_archive(archive, carol)

    assert Event.objects.filter(owner=carol, embedding__isnull=True).exists()
    assert set(MemoryFile.objects.filter(owner=carol).values_list("agent", "path")) == {
        ("main", "MEMORY.md"),
        ("coder", "memory/stack/python.md"),
    }


def test_it_never_touches_another_users_data(alice, bob, archive, db):
    build_user_data(bob, marker=" (bob)")
    before = snapshot(bob)

    import_archive(archive, alice)

    assert snapshot(bob) == before


def test_it_keeps_what_the_user_has_when_imported_again(alice, archive):
    facts = list(Fact.objects.filter(owner=alice).values_list("value", flat=True))

    report = import_archive(archive, alice)

    assert list(Fact.objects.filter(owner=alice).values_list("value", flat=True)) == facts
    assert report.skipped["facts"] == 2 and report.skipped["macros"] == 1
    # The chats come again under keys of their own: nothing of the user's is overwritten.
    keys = list(Session.objects.filter(owner=alice).values_list("key", flat=True))
    assert len(keys) == 8 and len({key for key in keys if "-imported-" in key}) == 2


def test_it_writes_nothing_in_a_dry_run(alice, archive, db):
    carol = User.objects.create_user("carol")

    report = import_archive(archive, carol, dry_run=True)

    assert report.imported["events"] == 7 and report.imported["memory files"] == 2
    assert not Event.objects.filter(owner=carol).exists()
    assert not Agent.objects.filter(owner=carol).exists()
    assert snapshot(carol)["files"] == {}


# Bad archives: refused, with a message, and nothing written


def rewrite(archive: Path, target: Path, change, manifest_first: bool = True) -> Path:
    """The archive with `change(members)` applied and its manifest made to match."""
    found = members(archive)
    manifest = json.loads(found.pop(layout.MANIFEST))
    change(found, manifest)
    with zipfile.ZipFile(target, "w") as out:
        out.writestr(layout.MANIFEST, json.dumps(manifest))
        for name, data in found.items():
            out.writestr(name, data)
    return target


def resealed(found: dict[str, bytes], manifest: dict) -> None:
    manifest["members"] = {
        name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for name, data in found.items()
    }


def bad_session_line(found, manifest):
    name = next(n for n in found if n.startswith(layout.SESSIONS_DIR))
    found[name] += b'{"type": "user_message", "content": "x", "timestamp": "yesterday"}\n'
    resealed(found, manifest)


def not_json_line(found, manifest):
    found[layout.FACTS] += b"{not json\n"
    resealed(found, manifest)


def edited(found, manifest):
    found[layout.FACTS] = found[layout.FACTS].replace(b"Lyon", b"Rome")


def newer(found, manifest):
    manifest["version"] = 2


def escaping(found, manifest):
    found["memory/main/../../../../etc/cron.d/x.md"] = b"# x\n"
    resealed(found, manifest)


def absolute(found, manifest):
    found["/etc/passwd"] = b"root"
    resealed(found, manifest)


def not_a_memory_file(found, manifest):
    found["memory/main/notes.sh"] = b"rm -rf /"
    resealed(found, manifest)


def missing_member(found, manifest):
    del found[layout.FACTS]


def unlisted(found, manifest):
    found["extra.txt"] = b"hello"


def bad_task(found, manifest):
    found[layout.TASKS] = json.dumps({"name": "x", "cron_expr": "every blue moon"}).encode()
    resealed(found, manifest)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (bad_session_line, "'timestamp' must be a timestamp"),
        (not_json_line, "facts.jsonl line 3 is not valid JSON"),
        (edited, "facts.jsonl does not match its checksum"),
        (newer, "version 2 of the format, made by a newer Neotask"),
        (escaping, "a path leading out of the folder"),
        (absolute, "an absolute path"),
        (not_a_memory_file, "is not a memory file"),
        (missing_member, "missing: facts.jsonl"),
        (unlisted, "not in the manifest: extra.txt"),
        (bad_task, "tasks.jsonl line 1"),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_it_refuses_a_bad_archive_and_writes_nothing(alice, archive, tmp_path, change, message):
    carol = User.objects.create_user("carol")
    bad = rewrite(archive, tmp_path / "bad.zip", change)

    with pytest.raises(ImportRefused, match=re.escape(message)):
        import_archive(bad, carol)

    assert snapshot(carol)["rows"] == snapshot(User.objects.create_user("dave"))["rows"]
    assert snapshot(carol)["files"] == {}


def test_it_refuses_a_truncated_archive(alice, archive, tmp_path, db):
    carol = User.objects.create_user("carol")
    truncated = tmp_path / "truncated.zip"
    truncated.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])

    with pytest.raises(ImportRefused, match="not a zip archive, or a truncated one"):
        import_archive(truncated, carol)
    assert not Agent.objects.filter(owner=carol).exists()


def test_it_refuses_links_and_device_files(alice, archive, tmp_path, db):
    for mode, what in ((0o120777, "a symbolic link"), (0o020666, "a device file")):
        bad = tmp_path / "special.zip"
        with zipfile.ZipFile(bad, "w") as out:
            out.writestr(layout.MANIFEST, members(archive)[layout.MANIFEST])
            info = zipfile.ZipInfo("memory/main/MEMORY.md")
            info.external_attr = mode << 16
            out.writestr(info, "/etc/passwd")
        with pytest.raises(ImportRefused, match=what):
            import_archive(bad, alice)


def test_it_refuses_a_decompression_bomb(alice, tmp_path, db, monkeypatch):
    monkeypatch.setattr(layout, "MAX_MEMBER_BYTES", 1024 * 1024)
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as out:
        out.writestr(layout.MANIFEST, json.dumps({"format": layout.FORMAT, "version": 1}))
        out.writestr(layout.FACTS, b"\n" * (2 * 1024 * 1024))

    with pytest.raises(ImportRefused, match="larger than 1 MB"):
        import_archive(bomb, alice)


def test_it_refuses_a_file_that_is_no_export(alice, tmp_path, db):
    plain = tmp_path / "photos.zip"
    with zipfile.ZipFile(plain, "w") as out:
        out.writestr("cat.jpg", b"\xff\xd8")

    with pytest.raises(ImportRefused, match=re.escape("first member is not manifest.json")):
        import_archive(plain, alice)


# The command


def test_it_imports_from_the_shell_with_progress(alice, archive, db):
    carol = User.objects.create_user("carol")
    out, err = io.StringIO(), io.StringIO()

    call_command("import_user", str(archive), "--user", "carol", stdout=out, stderr=err)

    assert "sessions" in out.getvalue() and "Neotask export" in err.getvalue()
    assert Session.objects.filter(owner=carol).count() == 4
    assert Macro.objects.filter(owner=carol).count() == 1


def test_it_says_why_the_command_refuses_an_archive(alice, tmp_path, db):
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"PK\x03\x04 not really")

    with pytest.raises(CommandError, match="not a Neotask export"):
        call_command("import_user", str(bad), "--user", "alice", stderr=io.StringIO())
    with pytest.raises(CommandError, match='no user "nobody"'):
        call_command("import_user", str(bad), "--user", "nobody")


def test_it_refuses_too_many_members(alice, archive, monkeypatch):
    monkeypatch.setattr(layout, "MAX_MEMBERS", 3)

    with pytest.raises(ImportRefused, match=re.escape("holds 12 members; at most 3")):
        import_archive(archive, alice)


def test_it_keeps_content_that_is_not_a_string_as_the_event_stored_it(alice, tmp_path, db):
    session = Session.start(alice, Agent.objects.default_for(alice), "web", "parts")
    parts = [{"type": "text", "text": "a picture of the lake"}]
    Event.objects.create(
        owner=alice, session_id=str(session.pk), event_type="user_message", data={"content": parts}
    )
    path = tmp_path / "alice.zip"
    export_user(alice, path)
    carol = User.objects.create_user("carol")

    import_archive(path, carol)

    assert Event.objects.get(owner=carol).data == {"content": parts}
