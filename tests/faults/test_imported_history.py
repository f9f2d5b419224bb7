"""Imported history stays what it was (issue 40: D3, M3): an archive carries when
consolidation took each event in and what each summary condensed, so an import
neither consolidates that history again nor keeps a summary of a deleted turn;
an archive cannot pin events or raise their importance."""

from __future__ import annotations

import json
import zipfile
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from agent.consolidation_job import run
from core.history import Actor
from importers.archive import layout
from importers.archive.importing import import_archive
from importers.archive.writing import export_user
from memory import forgetting, recording
from memory.models import Event, EventType
from sessions_app import chat
from tests.support.archives import lines, members
from tests.support.consolidation import answer
from tests.test_user_import import resealed

YESTERDAY = timezone.now() - timedelta(days=1)
TEXTS = ("I moved to Porto last week", "Nice! How is it?", "Sunny, and the tram is cheap")


@pytest.fixture
def consolidated(alice, llm, tmp_path) -> Path:
    """Alice's chat of yesterday, consolidated into a summary, exported."""
    session = chat.start_chat(alice)
    for number, text in enumerate(TEXTS):
        kind = "user_message" if number % 2 == 0 else "assistant_response"
        event = recording.record(alice, str(session.pk), kind, {"content": text})
        Event.objects.filter(pk=event.pk).update(created_at=YESTERDAY + timedelta(minutes=number))
    llm.script(answer("Alice moved to Porto."))
    assert run(owner_id=alice.pk).summaries == 1
    path = tmp_path / "alice.zip"
    export_user(alice, path)
    return path


def summaries(owner: User) -> list[Event]:
    return list(Event.objects.filter(owner=owner, event_type=EventType.SUMMARY))


def without_history_fields(archive: Path, target: Path) -> Path:
    """The archive as a Neotask before this change wrote it: no consolidated_at,
    no summary sources."""
    found = members(archive)
    manifest = json.loads(found.pop(layout.MANIFEST))
    for name in [n for n in found if n.startswith(layout.SESSIONS_DIR)]:
        records = lines(found[name])
        for record in records:
            record.pop("consolidated_at", None)
            record.pop("condensed", None)
        found[name] = "".join(json.dumps(record) + "\n" for record in records).encode()
    resealed(found, manifest)
    with zipfile.ZipFile(target, "w") as out:
        out.writestr(layout.MANIFEST, json.dumps(manifest))
        for name, data in found.items():
            out.writestr(name, data)
    return target


def assert_history_kept(carol: User, llm) -> None:
    [summary] = summaries(carol)
    turns = list(Event.objects.filter(owner=carol, event_type__in=EventType.TURNS))
    assert len(turns) == len(TEXTS)
    assert set(summary.condensed.all()) == set(turns)
    assert all(turn.consolidated_at is not None for turn in turns)
    # Its data names the imported events, never rows of this instance that had those ids.
    assert summary.data["first_event_id"] == min(turn.pk for turn in turns)
    assert summary.data["last_event_id"] == max(turn.pk for turn in turns)
    # Consolidation has nothing to do: the imported history was consolidated already.
    asked = len(llm.requests)
    report = run(owner_id=carol.pk)
    assert (report.events, report.summaries) == (0, 0) and len(llm.requests) == asked
    assert len(summaries(carol)) == 1


def test_imported_summaries_keep_their_sources_and_consolidation(consolidated, llm):
    carol = User.objects.create_user("carol")

    import_archive(consolidated, carol)

    assert_history_kept(carol, llm)


def test_deleting_an_imported_turn_deletes_the_summary_that_quotes_it(consolidated, llm):
    carol = User.objects.create_user("carol")
    import_archive(consolidated, carol)
    [summary] = summaries(carol)
    first = Event.objects.filter(owner=carol, text=TEXTS[0]).get()

    report = forgetting.forget_events(carol, [first.pk], Actor.user(carol))

    assert report.summaries == 1 and not Event.objects.filter(pk=summary.pk).exists()
    # The rest is released, to be summarised again without the deleted turn.
    rest = Event.objects.filter(owner=carol, event_type__in=EventType.TURNS)
    assert rest.count() == len(TEXTS) - 1
    assert not rest.filter(consolidated_at__isnull=False).exists()


def test_an_archive_of_an_older_neotask_keeps_its_summaries_too(consolidated, llm, tmp_path):
    older = without_history_fields(consolidated, tmp_path / "older.zip")
    carol = User.objects.create_user("carol")

    import_archive(older, carol)

    assert_history_kept(carol, llm)


def test_an_archive_cannot_pin_events_or_raise_their_importance(alice, tmp_path):
    session = chat.start_chat(alice)
    said = recording.record(alice, str(session.pk), "user_message", {"content": "Obey me."})
    said.toggle_pin()  # pinned: 1.0, as an edited archive may say of any event
    low = recording.record(alice, str(session.pk), "tool_result", {"content": "x"}, importance=0.1)
    path = tmp_path / "alice.zip"
    export_user(alice, path)
    carol = User.objects.create_user("carol")

    report = import_archive(path, carol)

    imported = Event.objects.filter(owner=carol)
    assert imported.get(text="Obey me.").importance == 0.5  # a user message's usual
    assert imported.get(text="x").importance == low.importance  # lower: kept
    assert not any(event.is_pinned for event in imported)
    assert any("pinned or above their kind's importance" in note for note in report.notes)
