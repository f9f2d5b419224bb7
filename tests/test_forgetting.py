"""Forgetting on demand: a chat, a message, a turn, a fact or a memory file
deleted from the chat page, the API or the admin is gone everywhere at once —
its rows, full-text entries, vectors in every process, working memory, what
was derived from it — and nothing of another user's is touched."""

from __future__ import annotations

import json
import subprocess
from datetime import timedelta
from io import StringIO

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection
from django.urls import reverse
from django.utils import timezone
from django_q.models import Schedule

from agent.models import ApprovalRequest
from core.history import Actor
from memory import forgetting as memory_forgetting
from memory import recording
from memory.files.indexing import index_workspace
from memory.files.paths import write_memory_file
from memory.forgetting import NothingToForget, forget_events, forget_memory_file
from memory.models import Event, EventType, Fact, ForgottenEvent, MemoryChunk, MemoryFile
from memory.search import SearchHit, search_memory
from memory.vector_index import NumpyIndex
from memory.vectors import EMBEDDING_DIM, pack
from memory.working import working_memory
from memory.workspace import workspace_dir
from sessions_app import chat_deletion, cleanup
from sessions_app.chat import start_chat
from sessions_app.models import ApiToken, ChatClaim, ChatInput, Session
from tests.programs import forgetting as program
from tests.support.processes import ROOT, app_env, program_command, run_program
from tests.support.profiles import in_process_vectors


def axis(number: int) -> np.ndarray:
    vector = np.zeros(EMBEDDING_DIM, dtype=np.float32)
    vector[number] = 1.0
    return vector


def say(owner, session, text, kind=EventType.USER_MESSAGE, **data):
    return recording.record(owner, str(session.pk), kind, {"content": text, **data}, embed=False)


def embedded(event, vector) -> None:
    Event.objects.filter(pk=event.pk).update(embedding=pack(vector), embedded_at=timezone.now())


def assert_logged_as_forgotten(event_ids) -> None:
    """Logged for the in-process indexes to drop; in PostgreSQL (pgvector) a vector
    goes with its row, and nothing is logged."""
    expected = set() if connection.vendor == "postgresql" else set(event_ids)
    assert set(ForgottenEvent.objects.values_list("event_id", flat=True)) == expected


def texts(owner) -> list[str]:
    return list(Event.objects.owned_by(owner).order_by("pk").values_list("text", flat=True))


def words(owner, query) -> list[int]:
    hits = search_memory(owner, query, branch="lexical", files=False)
    return [hit.event.pk for hit in hits if isinstance(hit, SearchHit)]


@pytest.fixture
def chat(alice) -> Session:
    return start_chat(alice)


@pytest.fixture
def turns(alice, chat) -> list[Event]:
    """Two turns: a question answered after a tool call, then a second question."""
    return [
        say(alice, chat, "Where did I park the blue bicycle?"),
        say(alice, chat, "", EventType.TOOL_CALL, name="search_memory"),
        say(alice, chat, "bicycle: level 3 of the garage", EventType.TOOL_RESULT),
        say(alice, chat, "On level 3 of the garage.", EventType.ASSISTANT_RESPONSE),
        say(alice, chat, "And what is for dinner?"),
        say(alice, chat, "Lentil soup.", EventType.ASSISTANT_RESPONSE),
    ]


# The service -----------------------------------------------------------------


def test_it_deletes_one_message_and_keeps_the_rest_of_its_session(alice, turns):
    # The answer is found by the question's words too (its search context).
    assert words(alice, "bicycle") == [turns[0].pk, turns[3].pk]
    report = chat_deletion.delete_message(alice, turns[0].pk)
    assert report.events == 1
    assert "Where did I park the blue bicycle?" not in texts(alice)
    assert Event.objects.owned_by(alice).count() == len(turns) - 1
    # Its full-text entry went with it, and the answer is keyed again without it.
    assert words(alice, "bicycle") == []
    assert_logged_as_forgotten([turns[0].pk])


def test_it_deletes_a_turn_the_user_message_and_all_the_agent_did_in_reply(alice, turns):
    # Asked by any event of the turn: here its tool result.
    report = chat_deletion.delete_turn(alice, turns[2].pk)
    assert report.events == 4
    assert texts(alice) == ["And what is for dinner?", "Lentil soup."]


def test_it_deletes_a_chat_with_every_session_it_had(alice, bob, chat, turns):
    later = chat.continue_as()
    say(alice, later, "A message after the reset.")
    ChatInput.objects.create(owner=alice, key=chat.key, text="queued meanwhile")
    other = start_chat(alice)
    say(alice, other, "Another chat of alice's.")
    bobs = start_chat(bob)
    say(bob, bobs, "Where did I park the blue bicycle?")

    ApprovalRequest.objects.create(owner=alice, session_id=str(chat.pk), command="cat bike.txt")
    ApprovalRequest.objects.create(owner=bob, session_id=str(bobs.pk), command="ls")

    report = chat_deletion.delete_chat(alice, chat.key)

    assert report.events == len(turns) + 1
    assert list(ApprovalRequest.objects.values_list("command", flat=True)) == ["ls"]
    assert not Session.objects.filter(key=chat.key).exists()
    assert not ChatInput.objects.filter(key=chat.key).exists()
    assert texts(alice) == ["Another chat of alice's."]
    assert texts(bob) == ["Where did I park the blue bicycle?"]
    with pytest.raises(NothingToForget):
        chat_deletion.delete_chat(alice, chat.key)


def test_it_deletes_nothing_of_a_chat_that_is_answering(alice, alice_api, chat, turns):
    ChatClaim.objects.create(
        owner=alice, key=chat.key, token="t", lease_until=timezone.now() + timedelta(seconds=20)
    )
    with pytest.raises(chat_deletion.ChatBusy):
        chat_deletion.delete_chat(alice, chat.key)
    with pytest.raises(chat_deletion.ChatBusy):
        chat_deletion.delete_turn(alice, turns[0].pk)
    response = alice_api("DELETE", reverse("api-event", args=[turns[0].pk]))
    assert response.status_code == 409
    assert "answering" in response.json()["error"]
    assert Event.objects.count() == len(turns)
    assert not ForgottenEvent.objects.exists()


def test_it_forgets_nothing_of_another_owner_by_id(alice, bob, turns):
    with pytest.raises(NothingToForget):
        forget_events(bob, [turns[0].pk], Actor.user(bob))
    with pytest.raises(NothingToForget):
        chat_deletion.delete_turn(bob, turns[0].pk)
    assert Event.objects.owned_by(alice).count() == len(turns)
    assert not ForgottenEvent.objects.exists()


@in_process_vectors
def test_it_drops_a_forgotten_vector_from_an_index_of_another_process(alice, chat):
    kept, forgotten = say(alice, chat, "kept"), say(alice, chat, "forgotten")
    embedded(kept, axis(1))
    embedded(forgotten, axis(0))
    # Another process's index: it has read both vectors.
    elsewhere = NumpyIndex(alice.pk, "main")
    assert elsewhere.count() == 2
    chat_deletion.delete_message(alice, forgotten.pk)
    # Its next sync drops the vector, before any query could meet it as a hit
    # (its contextual neighbours' scores no longer count it either).
    assert elsewhere.count() == 1
    assert forgotten.pk not in elsewhere.position
    assert [i for i, _ in elsewhere.search(axis(0), 5)] == [kept.pk]


@in_process_vectors
def test_it_prunes_the_deletion_log_and_an_index_still_never_returns_a_deleted_row(alice, chat):
    from memory import tasks

    kept, forgotten = say(alice, chat, "kept"), say(alice, chat, "forgotten")
    embedded(kept, axis(1))
    embedded(forgotten, axis(0))
    stale = NumpyIndex(alice.pk, "main")  # has not synced since before the deletion
    assert stale.count() == 2
    chat_deletion.delete_message(alice, forgotten.pk)
    old = timezone.now() - memory_forgetting.FORGOTTEN_KEPT - timedelta(minutes=1)
    ForgottenEvent.objects.update(forgotten_at=old)
    recent = ForgottenEvent.objects.create(owner=alice, agent="main", event_id=10**9)
    assert memory_forgetting.prune_forgotten() == 1
    assert list(ForgottenEvent.objects.all()) == [recent]
    assert Schedule.objects.filter(name=tasks.PRUNE_SCHEDULE).exists()
    # The log no longer names the row, but the hit is checked against the table.
    assert [i for i, _ in stale.search(axis(0), 5)] == [kept.pk]


def test_it_drops_deleted_messages_from_working_memory(alice, chat, turns):
    assert turns[0] in working_memory.recent(alice, str(chat.pk), 10)
    chat_deletion.delete_message(alice, turns[0].pk)
    assert [e.pk for e in working_memory.recent(alice, str(chat.pk), 10)] == [
        e.pk for e in turns[2:]
    ]


def test_it_deletes_a_summary_of_a_deleted_event_and_releases_the_rest(alice, chat, turns):
    now = timezone.now()
    Event.objects.filter(pk__in=[e.pk for e in turns]).update(consolidated_at=now)
    proposed = {"category": "place", "key": "bicycle", "value": "garage level 3"}
    summary = say(
        alice,
        chat,
        "Alice parks her bicycle on level 3.",
        EventType.SUMMARY,
        first_event_id=turns[0].pk,
        last_event_id=turns[-1].pk,
        facts=[proposed],
    )
    summary.condensed.set(turns)
    # Facts whose value came from the summary, or from the deleted message itself.
    Fact.objects.create(owner=alice, source="agent", origin_event=summary, **proposed)
    Fact.objects.create(owner=alice, category="pet", key="dog", value="Rex", origin_event=turns[0])
    Fact.objects.create(owner=alice, category="food", key="dinner", value="soup")

    report = chat_deletion.delete_message(alice, turns[0].pk)

    assert (report.summaries, report.facts) == (1, 2)
    assert not Event.objects.filter(pk=summary.pk).exists()
    assert_logged_as_forgotten([turns[0].pk, summary.pk])
    # The next consolidation summarises the rest again, without the deleted message.
    assert not Event.objects.filter(consolidated_at__isnull=False).exists()
    assert list(Fact.objects.values_list("key", flat=True)) == ["dinner"]


def test_it_deletes_a_compaction_summary_of_a_deleted_event(alice, chat, turns):
    fresh = chat.continue_as()
    compaction = say(
        alice,
        fresh,
        "Alice asked where her bicycle is: level 3.",
        EventType.COMPACTION,
        first_event_id=turns[0].pk,
        last_event_id=turns[3].pk,
        carried_over=[turns[4].pk, turns[5].pk],
        continues_from=str(chat.pk),
    )
    untouched = say(
        alice,
        fresh,
        "A summary of other messages.",
        EventType.COMPACTION,
        first_event_id=turns[4].pk,
        last_event_id=turns[5].pk,
        continues_from="another-session",
    )
    report = chat_deletion.delete_message(alice, turns[1].pk)
    assert report.compactions == 1
    assert not Event.objects.filter(pk=compaction.pk).exists()
    assert Event.objects.filter(pk=untouched.pk).exists()


def test_it_removes_a_deleted_event_from_what_auto_recall_recorded(alice, chat, turns):
    later = start_chat(alice)
    items = [
        {"event_id": turns[3].pk, "text": "On level 3 of the garage.", "source": "chat"},
        {"event_id": turns[5].pk, "text": "Lentil soup.", "source": "chat"},
        {"source": "memory/notes.md:1-2", "text": "a note", "date": "memory file"},
    ]
    recall = recording.record(
        alice, str(later.pk), EventType.RECALL, {"content": "Recalled 3.", "items": items}
    )
    chat_deletion.delete_message(alice, turns[3].pk)
    recall.refresh_from_db()
    assert [item["text"] for item in recall.data["items"]] == ["Lentil soup.", "a note"]


def test_it_deletes_a_memory_file_on_disk_with_its_chunks(alice):
    workspace = workspace_dir(alice.pk, "main")
    write_memory_file(workspace, "memory/locker.md", "# Locker\nThe code is 4417.\n")
    index_workspace(alice, "main")
    assert MemoryChunk.objects.owned_by(alice).exists()
    report = forget_memory_file(alice, "main", "memory/locker.md", Actor.user(alice))
    assert report.files == 1
    assert not (workspace / "memory" / "locker.md").exists()
    assert not MemoryFile.objects.exists()
    assert not MemoryChunk.objects.exists()


def test_it_removes_deleted_events_and_chats_from_exported_transcripts(
    alice, chat, turns, tmp_path
):
    other = start_chat(alice)
    say(alice, other, "Kept in its transcript.")
    call_command("export_transcripts", str(tmp_path), stdout=StringIO(), stderr=StringIO())
    chat_deletion.delete_message(alice, turns[0].pk)
    chat_deletion.delete_chat(alice, other.key)
    out = StringIO()
    call_command("export_transcripts", str(tmp_path), stdout=out, stderr=StringIO())
    lines = (tmp_path / f"{chat.pk}.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [e.pk for e in turns[1:]]
    assert not (tmp_path / f"{other.pk}.jsonl").exists()
    index = json.loads((tmp_path / "sessions.json").read_text())
    assert list(index) == [chat.key]
    assert "1 transcript rewritten without the deleted events, 1 of deleted sessions" in (
        out.getvalue()
    )


def test_it_forgets_what_session_cleanup_deletes(alice, chat, turns):
    Session.objects.filter(pk=chat.pk).update(last_activity_at=timezone.now() - timedelta(days=90))
    removed = cleanup.remove_candidates(Session.objects.owned_by(alice), 30, False)
    assert [c.session.pk for c in removed] == [chat.pk]
    assert not Event.objects.exists()
    assert_logged_as_forgotten(e.pk for e in turns)


# The chat page ---------------------------------------------------------------


def test_it_asks_before_deleting_a_message_or_its_turn(alice_client, turns):
    page = alice_client.get(reverse("event-delete", args=[turns[0].pk]))
    assert page.status_code == 200
    assert b"Delete this message only" in page.content
    assert b"Delete the whole turn (4 events" in page.content
    assert Event.objects.count() == len(turns)


def test_it_deletes_a_turn_from_the_chat_page(alice_client, chat, turns):
    response = alice_client.post(reverse("event-delete", args=[turns[0].pk]), {"scope": "turn"})
    assert response.status_code == 302
    assert response["Location"] == reverse("chat", args=[chat.key])
    assert Event.objects.count() == 2


def test_it_refuses_a_delete_without_a_scope_and_deletes_nothing(alice_client, turns):
    url = reverse("event-delete", args=[turns[0].pk])
    for data in ({}, {"scope": "everything"}):
        assert alice_client.post(url, data).status_code == 400
    assert Event.objects.count() == len(turns)


def test_it_links_each_message_to_its_delete_page_and_the_chat_to_its(alice_client, chat, turns):
    page = alice_client.get(reverse("chat", args=[chat.key])).content.decode()
    # The trash icon opens the forget dialog, which offers the message-or-turn page too.
    dialog = f"{reverse('forget')}?subject=event:{turns[0].pk}"
    assert dialog in page
    assert reverse("event-delete", args=[turns[0].pk]) in alice_client.get(dialog).content.decode()
    assert reverse("chat-delete", args=[chat.key]) in page


def test_it_asks_before_deleting_a_chat_then_deletes_it(alice_client, chat, turns):
    url = reverse("chat-delete", args=[chat.key])
    assert b"Delete the chat" in alice_client.get(url).content
    assert Event.objects.count() == len(turns)
    assert alice_client.post(url)["Location"] == reverse("home")
    assert not Event.objects.exists()
    assert not Session.objects.filter(key=chat.key).exists()


# The API ---------------------------------------------------------------------


@pytest.fixture
def alice_api(alice, client):
    _, token = ApiToken.issue(alice, "script")

    def call(method: str, url: str):
        return getattr(client, method.lower())(url, HTTP_AUTHORIZATION=f"Bearer {token}")

    return call


def test_it_deletes_a_message_through_the_api(alice_api, turns):
    response = alice_api("DELETE", reverse("api-event", args=[turns[0].pk]))
    assert response.status_code == 200
    assert response.json()["deleted"]["events"] == 1
    # Already deleted, not a number, unknown, or the wrong method: nothing more goes.
    for url in (
        reverse("api-event", args=[turns[0].pk]),
        reverse("api-event", args=["abc"]),
        reverse("api-event", args=["99999999"]),
        reverse("api-event-turn", args=["-1"]),
    ):
        assert alice_api("DELETE", url).status_code == 404, url
    assert alice_api("GET", reverse("api-event", args=[turns[1].pk])).status_code == 405
    assert alice_api("POST", reverse("api-event-turn", args=[turns[1].pk])).status_code == 405
    assert Event.objects.count() == len(turns) - 1


def test_it_deletes_a_turn_a_chat_a_fact_and_a_memory_file_through_the_api(
    alice, alice_api, chat, turns
):
    assert alice_api("DELETE", reverse("api-event-turn", args=[turns[4].pk])).json() == {
        "deleted": {
            "events": 2,
            "summaries": 0,
            "compactions": 0,
            "facts": 0,
            "recalls": 0,
            "files": 0,
        }
    }
    fact = Fact.objects.create(owner=alice, category="place", key="bike", value="garage")
    assert alice_api("DELETE", reverse("api-fact", args=[fact.pk])).status_code == 200
    assert alice_api("DELETE", reverse("api-fact", args=[fact.pk])).status_code == 404
    write_memory_file(workspace_dir(alice.pk, "main"), "memory/bike.md", "Garage.\n")
    files = reverse("api-memory-file")
    assert alice_api("DELETE", f"{files}?path=memory/bike.md").status_code == 200
    assert alice_api("DELETE", f"{files}?path=memory/bike.md").status_code == 404
    assert alice_api("DELETE", f"{files}?path=../etc/passwd").status_code == 400
    assert alice_api("DELETE", files).status_code == 400
    assert alice_api("DELETE", reverse("api-chat", args=[chat.key])).status_code == 200
    assert alice_api("DELETE", reverse("api-chat", args=[chat.key])).status_code == 404
    assert not Event.objects.exists()


def test_it_deletes_nothing_of_bobs_through_alices_token(alice_api, bob):
    bobs = start_chat(bob)
    message = say(bob, bobs, "Bob's own message.")
    fact = Fact.objects.create(owner=bob, category="sport", key="gym", value="late")
    for url in (
        reverse("api-event", args=[message.pk]),
        reverse("api-event-turn", args=[message.pk]),
        reverse("api-fact", args=[fact.pk]),
        reverse("api-chat", args=[bobs.key]),
        reverse("api-session", args=[bobs.pk]),
    ):
        assert alice_api("DELETE", url).status_code == 404, url
    assert texts(bob) == ["Bob's own message."]
    assert Fact.objects.owned_by(bob).count() == 1


# The admin -------------------------------------------------------------------


def test_it_deletes_events_in_the_admin_through_the_same_path(admin_client, alice, turns):
    changelist = reverse("admin:memory_event_changelist")
    response = admin_client.post(
        changelist,
        {
            "action": "delete_selected",
            "_selected_action": [turns[0].pk, turns[5].pk],
            "post": "yes",
        },
    )
    assert response.status_code == 302
    assert_logged_as_forgotten([turns[0].pk, turns[5].pk])
    assert Event.objects.count() == len(turns) - 2


def test_it_deletes_sessions_and_facts_in_the_admin_through_the_same_path(
    admin_client, alice, chat, turns
):
    fact = Fact.objects.create(owner=alice, category="place", key="bike", value="garage")
    admin_client.post(reverse("admin:memory_fact_delete", args=[fact.pk]), {"post": "yes"})
    admin_client.post(reverse("admin:sessions_app_session_delete", args=[chat.pk]), {"post": "yes"})
    assert not Fact.objects.exists()
    assert not Event.objects.exists()
    assert_logged_as_forgotten(e.pk for e in turns)


def test_it_forgets_a_session_deleted_through_the_api(alice_api, chat, turns):
    assert alice_api("DELETE", reverse("api-session", args=[chat.pk])).status_code == 204
    assert alice_api("DELETE", reverse("api-session", args=[chat.pk])).status_code == 404
    assert not Event.objects.exists()
    assert_logged_as_forgotten(e.pk for e in turns)


def test_it_deletes_a_memory_file_in_the_admin_on_disk_too(admin_client, alice):
    workspace = workspace_dir(alice.pk, "main")
    write_memory_file(workspace, "memory/locker.md", "The code is 4417.\n")
    index_workspace(alice, "main")
    file = MemoryFile.objects.get()
    admin_client.post(reverse("admin:memory_memoryfile_delete", args=[file.pk]), {"post": "yes"})
    assert not (workspace / "memory" / "locker.md").exists()
    assert not MemoryChunk.objects.exists()


# Two processes, the real embedding model ---------------------------------------


@pytest.mark.slow
def test_it_forgets_in_another_process_by_words_and_by_meaning(tmp_path):
    """Process 2 has searched (its index holds the vector); process 1 deletes; then
    in process 2 neither memory search, get_context, auto-recall nor the API
    returns the deleted text or its id, by words or by meaning."""
    env = app_env(tmp_path)
    seeded = run_program(env, program.seed, "forgetful")
    asking = {**seeded, "username": "forgetful", "event_id": seeded["secret_id"]}
    del asking["secret_id"]
    by_words = "climbing gym locker combination"
    by_meaning = "the lock code of my cabinet at the bouldering hall"  # no word in common
    second = subprocess.Popen(
        program_command(program.serve),
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )

    def ask(query: str) -> dict:
        assert second.stdin is not None and second.stdout is not None
        second.stdin.write(json.dumps({**asking, "query": query}) + "\n")
        second.stdin.flush()
        return json.loads(second.stdout.readline())

    try:
        before_words, before_meaning = ask(by_words), ask(by_meaning)
        secret = [seeded["secret_id"], program.SECRET]
        assert before_meaning["indexed"]
        assert secret in before_words["found"]["lexical"]
        assert secret not in before_meaning["found"]["lexical"]
        assert secret in before_meaning["found"]["vector"]  # the model matched the paraphrase
        for branch in ("fused", "context", "api"):
            assert secret in before_meaning["found"][branch], branch
        assert any(event_id == secret[0] for event_id, _ in before_meaning["found"]["recall"])

        assert run_program(env, program.forget, "forgetful", seeded["secret_id"])["events"] == 1

        for query in (by_words, by_meaning):
            after = ask(query)
            assert not after["indexed"], query  # dropped at the sync, not met as a hit
            for branch, found in after["found"].items():
                assert all(event_id != secret[0] for event_id, _ in found), (query, branch)
                assert all("4417" not in text for _, text in found), (query, branch)
            assert after["found"]["api"], "the rest of the chat is still there"
    finally:
        assert second.stdin is not None
        second.stdin.close()
        second.wait(timeout=60)
