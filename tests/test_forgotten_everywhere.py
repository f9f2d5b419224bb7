"""Forget means forgotten: what is deleted through the one forgetting path
(a message, a chat, a fact) leaves no copy of its text anywhere — the chat's
title, earlier exports, a crashed turn's partial answer, the tool call that set
a fact, exported transcripts, and on SQLite the raw bytes of the database file,
its WAL and a backup taken afterwards; LanceDB's files hold no deleted vector."""

from __future__ import annotations

import tarfile
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from agent.tools.facts import forget_fact
from agent.tools.registry import ToolContext
from core.history import Actor
from importers.archive import jobs
from importers.models import ExportJob
from memory import recording
from memory.files.indexing import index_all_workspaces
from memory.files.search import forget_chunk_indexes, search_files
from memory.forgetting import forget_facts, forget_memory_file
from memory.models import Event, EventType, Fact
from memory.search import SearchHit, search_memory
from memory.working import working_memory
from memory.workspace import workspace_dir
from sessions_app import chat_deletion
from sessions_app.chat import start_chat
from sessions_app.models import ApiToken, ChatClaim, Session
from tests.support.embeddings import CountingEmbed, fake_vector
from tests.support.files import write
from tests.support.profiles import in_process_vectors
from tests.support.records import fact_saved_in

# A made-up word: found nowhere unless this test put it there.
WORD = "Zorbleflax"
FIRST = f"My parrot is called {WORD}, remember that."


def say(owner, session, text, kind=EventType.USER_MESSAGE, **data):
    event = recording.record(owner, str(session.pk), kind, {"content": text, **data}, embed=False)
    if kind == EventType.USER_MESSAGE:
        session.note_message(text)  # as a turn does: the first message names the chat
    return event


def remembered(owner, session) -> Fact:
    """The agent's remember_fact call, its result, and the fact it set."""
    arguments = {"category": "pets", "key": "parrot", "value": WORD}
    call = say(
        owner, session, "", EventType.TOOL_CALL, id="c1", name="remember_fact", arguments=arguments
    )
    result = f"Remembered pets/parrot: {WORD}"
    say(owner, session, result, EventType.TOOL_RESULT, tool_call_id="c1", name="remember_fact")
    return fact_saved_in(owner, call, "pets", "parrot", WORD)


def crashed(owner, session, partial: str) -> None:
    """A turn whose process died while streaming: its claim expired, the text kept."""
    ChatClaim.objects.create(
        owner=owner,
        key=session.key,
        token="dead",
        lease_until=timezone.now() - timedelta(minutes=1),
        session_id=str(session.pk),
        partial=partial,
    )


def exported(owner) -> ExportJob:
    job = ExportJob.objects.create(owner=owner)
    jobs.run_export(str(job.pk))
    job.refresh_from_db()
    assert job.status == ExportJob.Status.DONE, job.error
    return job


def everything_said(owner) -> dict:
    """Two chats that say WORD (one in its first message and a fact set by the
    agent, one whole chat with a crashed turn), a chat that does not, an export."""
    kept = start_chat(owner)
    parrot = start_chat(owner)
    first = say(owner, parrot, FIRST)
    fact = remembered(owner, parrot)
    say(owner, parrot, "Noted.", EventType.ASSISTANT_RESPONSE)
    say(owner, parrot, "What should I cook tonight?")
    say(owner, parrot, "Lentil soup.", EventType.ASSISTANT_RESPONSE)
    other = start_chat(owner)
    say(owner, other, f"Does {WORD} like seeds?")
    crashed(owner, other, f"{WORD} likes sunflower")
    say(owner, kept, "The weather is mild today.")
    return {"kept": kept, "parrot": parrot, "first": first, "fact": fact, "other": other}


def forget_it_all(owner, said: dict) -> None:
    """Through the public path: delete a message, forget a fact, delete a chat."""
    chat_deletion.delete_message(owner, said["first"].pk)
    forget_facts(owner, Fact.objects.filter(pk=said["fact"].pk), Actor.user(owner))
    chat_deletion.delete_chat(owner, said["other"].key)


def holders(owner, tmp_path: Path) -> dict[str, bytes]:
    """The raw bytes of every place a copy could be: transcripts, a backup taken
    now and, on SQLite, the database file and its WAL."""
    call_command("export_transcripts", str(tmp_path / "transcripts"), stdout=StringIO())
    found = {
        f"transcript {path.name}": path.read_bytes()
        for path in sorted((tmp_path / "transcripts").iterdir())
    }
    backup = tmp_path / f"backup-{len(list(tmp_path.glob('backup-*')))}.tar"
    call_command("backup", "--output", str(backup), stdout=StringIO(), stderr=StringIO())
    if connection.vendor == "sqlite":
        # (On PostgreSQL the backup is a compressed pg_dump, and the raw bytes of
        # the server's files are out of reach: deleted tuples stay there until
        # VACUUM reuses them, docs/data.md. The copies above are checked on both.)
        found["backup"] = backup.read_bytes()
        with tarfile.open(backup) as tar:
            member = tar.extractfile("database/neotask.sqlite3")
            assert member is not None
            found["backed-up database"] = member.read()
        database = Path(connection.settings_dict["NAME"])
        found["database"] = database.read_bytes()
        wal = database.with_name(database.name + "-wal")
        found["WAL"] = wal.read_bytes() if wal.exists() else b""
    return found


def holding(found: dict[str, bytes], text: str) -> list[str]:
    needles = {text.encode(), text.lower().encode()}  # FTS5 stores words lower-cased
    return [name for name, data in found.items() if any(n in data for n in needles)]


def where(found: dict[str, bytes], text: str) -> dict[str, bytes]:
    """Each holder's first copy, with what surrounds it: what a failure shows."""
    spots = {name: data.lower().find(text.lower().encode()) for name, data in found.items()}
    return {name: found[name][max(0, at - 60) : at + 60] for name, at in spots.items() if at >= 0}


def shown_titles(owner) -> list[str]:
    return sorted(Session.objects.owned_by(owner).values_list("title", flat=True))


@pytest.mark.django_db(transaction=True)
def test_every_copy_holds_the_text_before_it_is_forgotten(alice, tmp_path):
    said = everything_said(alice)
    export = exported(alice)

    found = holders(alice, tmp_path)

    assert f"transcript {said['parrot'].pk}.jsonl" in holding(found, WORD)
    assert f"transcript {said['other'].pk}.jsonl" in holding(found, WORD)
    if connection.vendor == "sqlite":
        assert {"backup", "backed-up database"} <= set(holding(found, WORD))
        assert {"database", "WAL"} & set(holding(found, WORD))
    assert Session.title_from(FIRST) in shown_titles(alice)
    assert ChatClaim.objects.get(key=said["other"].key).partial.startswith(WORD)
    assert export.archive_path is not None and export.archive_path.exists()
    # ("Noted." is found by its context, the message before it.)
    assert {hit.event.text for hit in lexical(alice, WORD)} == {
        FIRST,
        "Noted.",
        f"Does {WORD} like seeds?",
    }


@pytest.mark.django_db(transaction=True)
def test_nothing_holds_the_text_once_forgotten(alice, tmp_path):
    said = everything_said(alice)
    export = exported(alice)
    holders(alice, tmp_path)  # transcripts exported (and a backup taken) before

    forget_it_all(alice, said)

    found = holders(alice, tmp_path)
    assert holding(found, WORD) == [], where(found, WORD)
    assert shown_titles(alice) == ["The weather is mild today.", "What should I cook tonight?"]
    assert not ExportJob.objects.filter(pk=export.pk).exists()
    assert export.archive_path is not None and not export.folder.exists()
    assert ChatClaim.objects.get(key=said["other"].key).partial == ""
    assert lexical(alice, WORD) == []


def lexical(owner, query) -> list[SearchHit]:
    hits = search_memory(owner, query, branch="lexical", files=False)
    return [hit for hit in hits if isinstance(hit, SearchHit)]


# Each copy, on both profiles ---------------------------------------------------------


@pytest.fixture
def alice_api(alice, client):
    _, token = ApiToken.issue(alice, "script")
    return lambda url: client.get(url, HTTP_AUTHORIZATION=f"Bearer {token}")


def test_a_chat_is_named_again_when_its_first_message_goes(alice, alice_api, alice_client):
    chat = start_chat(alice)
    first = say(alice, chat, FIRST)
    second = say(alice, chat, "What should I cook tonight?")
    assert WORD in alice_client.get(reverse("chat-sidebar")).content.decode()

    chat_deletion.delete_message(alice, first.pk)
    assert Session.objects.get(pk=chat.pk).title == "What should I cook tonight?"
    listed = alice_api("/api/v1/sessions/").json()
    assert WORD not in str(listed) and "What should I cook tonight?" in str(listed)
    sidebar = alice_client.get(reverse("chat-sidebar")).content.decode()
    assert WORD not in sidebar and "What should I cook tonight?" in sidebar

    chat_deletion.delete_message(alice, second.pk)
    assert Session.objects.get(pk=chat.pk).title == ""  # as a new chat's, until it is used


def test_a_title_the_user_chose_stays(alice):
    chat = start_chat(alice)
    first = say(alice, chat, FIRST)
    Session.objects.filter(pk=chat.pk).update(title="Pets")

    chat_deletion.delete_message(alice, first.pk)

    assert Session.objects.get(pk=chat.pk).title == "Pets"


def test_earlier_exports_go_and_one_running_is_refused(
    alice, bob, django_capture_on_commit_callbacks
):
    chat = start_chat(alice)
    message = say(alice, chat, FIRST)
    done = exported(alice)
    running = ExportJob.objects.create(owner=alice, status=ExportJob.Status.RUNNING)
    their = exported(bob)

    with django_capture_on_commit_callbacks(execute=True):
        chat_deletion.delete_message(alice, message.pk)

    assert not ExportJob.objects.filter(pk=done.pk).exists() and not done.folder.exists()
    running.refresh_from_db()
    assert running.status == ExportJob.Status.FAILED and "deleted" in running.error
    assert their.archive_path is not None and their.archive_path.exists()  # Bob's stays


def test_a_running_export_that_was_refused_leaves_no_archive(alice, monkeypatch):
    job = ExportJob.objects.create(owner=alice)

    def refused_meanwhile(owner, path, progress):
        path.write_bytes(WORD.encode())
        ExportJob.objects.filter(pk=job.pk).update(status=ExportJob.Status.FAILED)
        return {}

    monkeypatch.setattr(jobs, "export_user", refused_meanwhile)
    jobs.run_export(str(job.pk))

    job.refresh_from_db()
    assert job.status == ExportJob.Status.FAILED and not job.folder.exists()


def test_a_crashed_turns_partial_answer_goes_with_its_chat(alice, bob):
    chat = start_chat(alice)
    say(alice, chat, FIRST)
    crashed(alice, chat, f"{WORD} likes")
    their = start_chat(bob)
    crashed(bob, their, f"{WORD} too")

    chat_deletion.delete_chat(alice, chat.key)

    claim = ChatClaim.objects.get(owner=alice, key=chat.key)
    assert (claim.partial, claim.session_id, claim.token) == ("", "", "")
    assert ChatClaim.objects.get(owner=bob).partial == f"{WORD} too"


def test_forgetting_a_fact_redacts_the_call_that_set_it(alice, django_capture_on_commit_callbacks):
    chat = start_chat(alice)
    say(alice, chat, "I have a parrot.")
    fact = remembered(alice, chat)
    say(alice, chat, "Noted.", EventType.ASSISTANT_RESPONSE)
    assert WORD in str([event.data for event in working_memory.recent(alice, str(chat.pk), 10)])

    with django_capture_on_commit_callbacks(execute=True):
        forget_facts(alice, Fact.objects.filter(pk=fact.pk), Actor.user(alice))

    call, result = Event.objects.owned_by(alice).filter(
        event_type__in=[EventType.TOOL_CALL, EventType.TOOL_RESULT]
    )
    assert call.data == {"id": "c1", "name": "remember_fact", "arguments": {}, "redacted": True}
    assert result.data["redacted"] and result.data["tool_call_id"] == "c1"
    assert WORD not in str(result.data) and (call.text, result.text) == ("", "")
    assert (result.search_key, result.embedding) == ("", None)
    assert not Fact.objects.filter(pk=fact.pk).exists()
    assert Event.objects.owned_by(alice).count() == 4  # the turn keeps its shape
    assert WORD not in str([event.data for event in working_memory.recent(alice, str(chat.pk), 10)])


def test_the_agents_forget_fact_takes_the_same_path(alice):
    chat = start_chat(alice)
    remembered(alice, chat)
    context = ToolContext.for_session(alice, str(chat.pk), "main")

    assert forget_fact(context, {"category": "pets", "key": "parrot"}) == "Forgot pets/parrot."

    assert not Event.objects.owned_by(alice).filter(text__icontains=WORD).exists()


def test_a_transcript_exported_before_a_redaction_is_written_again(alice, tmp_path):
    chat = start_chat(alice)
    fact = remembered(alice, chat)
    call_command("export_transcripts", str(tmp_path), stdout=StringIO())
    assert WORD in (tmp_path / f"{chat.pk}.jsonl").read_text()

    forget_facts(alice, Fact.objects.filter(pk=fact.pk), Actor.user(alice))
    call_command("export_transcripts", str(tmp_path), stdout=StringIO())

    assert WORD not in (tmp_path / f"{chat.pk}.jsonl").read_text()


def test_transcripts_index_takes_the_new_title(alice, tmp_path):
    chat = start_chat(alice)
    first = say(alice, chat, FIRST)
    say(alice, chat, "What should I cook tonight?")
    call_command("export_transcripts", str(tmp_path), stdout=StringIO())

    chat_deletion.delete_message(alice, first.pk)
    call_command("export_transcripts", str(tmp_path), stdout=StringIO())

    assert WORD not in (tmp_path / "sessions.json").read_text()


# LanceDB ------------------------------------------------------------------------------


@in_process_vectors
@pytest.mark.django_db(transaction=True)
def test_lancedb_keeps_no_vector_of_a_deleted_memory_file(alice, configure, monkeypatch):
    pytest.importorskip("lancedb", reason='the LanceDB plugin (pip install ".[lancedb]")')
    from memory.files import indexing

    monkeypatch.setattr(indexing, "embed_texts", CountingEmbed())
    configure("memory", vector_backend="lancedb")
    workspace = workspace_dir(alice.pk, "main")
    write(workspace, "memory/parrot.md", f"The parrot is {WORD}.")
    write(workspace, "MEMORY.md", "Prefers tea.")
    index_all_workspaces()
    vector = fake_vector(f"The parrot is {WORD}.").tobytes()
    search_files(alice, "main", fake_vector("Prefers tea."), k=5)  # the table is written
    table = Path(settings.DATA_DIR) / "lancedb"

    def stored() -> bytes:
        return b"".join(p.read_bytes() for p in sorted(table.rglob("*")) if p.is_file())

    assert vector in stored()

    forget_memory_file(alice, "main", "memory/parrot.md", Actor.user(alice))

    assert vector not in stored()
    forget_chunk_indexes()  # a new process: the table still answers
    hits = search_files(alice, "main", fake_vector("Prefers tea."), k=5)
    assert [hit.text for hit in hits] == ["Prefers tea."]
