"""Renaming an agent from its page (issue 27 part 4): its chats' keys, its
events and memory files, and its workspace folder follow in one step, or
nothing changes."""

from __future__ import annotations

from memory import recording
from memory.models import Event, EventType, MemoryChunk, MemoryFile
from memory.workspace import workspace_dir
from sessions_app import chat
from sessions_app.models import Agent, ChatInput, Session
from tests.support.files import file_hashes, write
from tests.support.web import text


def research_agent(alice) -> tuple[Agent, Session]:
    agent = Agent.objects.create(owner=alice, name="research")
    session = chat.start_chat(alice, agent)
    recording.record(
        alice, str(session.pk), EventType.USER_MESSAGE, {"content": "hi"}, agent="research"
    )
    write(workspace_dir(alice.pk, "research"), "memory/notes.md", "# Notes\nkeep me")
    file = MemoryFile.objects.create(owner=alice, agent="research", path="memory/notes.md")
    MemoryChunk.objects.create(
        owner=alice,
        agent="research",
        file=file,
        text="keep me",
        position=0,
        start_line=1,
        end_line=2,
        content_hash="0" * 64,
    )
    return agent, session


def test_a_rename_moves_chats_events_files_and_the_workspace(alice, alice_client):
    agent, session = research_agent(alice)
    before = file_hashes(workspace_dir(alice.pk, "research"))
    response = alice_client.post(f"/agents/{agent.pk}/rename/", {"name": "notes"}, follow=True)
    assert response.redirect_chain == [(f"/agents/{agent.pk}/", 302)]
    assert "Renamed the agent “research” to “notes”." in text(response)
    assert Agent.objects.get(pk=agent.pk).name == "notes"
    moved = Session.objects.get(pk=session.pk)
    assert moved.key == f"agent:notes:web:{session.chat}"
    assert set(Event.objects.filter(owner=alice).values_list("agent", flat=True)) == {"notes"}
    assert MemoryFile.objects.get(owner=alice).agent == "notes"
    assert MemoryChunk.objects.get(owner=alice).agent == "notes"
    assert not workspace_dir(alice.pk, "research", create=False).exists()
    assert file_hashes(workspace_dir(alice.pk, "notes", create=False)) == before
    assert alice_client.get(f"/chat/{moved.key}/").status_code == 200
    assert alice_client.get(f"/chat/{session.key}/").status_code == 404


def test_a_refused_rename_changes_nothing(alice, alice_client):
    agent, session = research_agent(alice)
    Agent.objects.create(owner=alice, name="taken")
    main = Agent.objects.default_for(alice)
    folder = workspace_dir(alice.pk, "research")
    before = file_hashes(folder)
    url = f"/agents/{agent.pk}/rename/"
    for name, message in [
        ("taken", "You already have an agent named &#x27;taken&#x27;."),
        ("../escape", "must be"),
        ("two words", "must be"),
        ("", "This field is required."),
        ("x" * 65, "at most 64 characters"),
    ]:
        response = alice_client.post(url, {"name": name})
        assert response.status_code == 400 and message in text(response), name
    refused = alice_client.post(f"/agents/{main.pk}/rename/", {"name": "other"})
    assert "is the default agent" in text(refused)

    # A chat with a message waiting: renamed once it is done.
    ChatInput.objects.create(owner=alice, key=session.key, text="wait for me")
    busy = alice_client.post(url, {"name": "notes"})
    assert "has messages waiting" in text(busy)

    # A folder in the way of the new name: the database goes back too.
    ChatInput.objects.all().delete()
    write(workspace_dir(alice.pk, "notes"), "stray.txt", "in the way")
    blocked = alice_client.post(url, {"name": "notes"})
    assert "in the way" in text(blocked)

    assert Agent.objects.get(pk=agent.pk).name == "research"
    assert Session.objects.get(pk=session.pk).key == session.key
    assert set(Event.objects.filter(owner=alice).values_list("agent", flat=True)) == {"research"}
    assert MemoryFile.objects.get(owner=alice).agent == "research"
    assert file_hashes(folder) == before and Agent.objects.get(pk=main.pk).name == "main"


def test_another_users_agent_cannot_be_renamed(alice, bob_client):
    agent, _ = research_agent(alice)
    assert bob_client.post(f"/agents/{agent.pk}/rename/", {"name": "bobs"}).status_code == 404
    assert Agent.objects.get(pk=agent.pk).name == "research"
    assert workspace_dir(alice.pk, "research", create=False).is_dir()
