"""Agents created, edited and chosen in the UI (issue 27 part 4)."""

from __future__ import annotations

from memory.workspace import AGENT_NAME_RULE
from sessions_app import chat
from sessions_app.models import Agent, Session
from tests.support.web import ESCAPED, XSS, text


def test_it_lists_the_users_agents_with_their_open_chats(alice, alice_client, bob):
    main = Agent.objects.default_for(alice)
    chat.start_chat(alice, main)
    Agent.objects.create(owner=bob, name="bobs-secret-agent")
    page = text(alice_client.get("/agents/"))
    assert f'<tr id="agent-{main.pk}">' in page and "<td>1</td>" in page
    assert "bobs-secret-agent" not in page


def test_it_adds_an_agent_with_its_system_prompt(alice, alice_client):
    response = alice_client.post(
        "/agents/", {"name": "research", "system_prompt": "You cite sources."}
    )
    assert response.status_code == 302 and response["Location"] == "/agents/"
    agent = Agent.objects.get(owner=alice, name="research")
    assert agent.system_prompt == "You cite sources."


def test_it_refuses_a_bad_or_taken_name_and_adds_nothing(alice, alice_client, bob):
    Agent.objects.create(owner=alice, name="research")
    Agent.objects.create(owner=bob, name="shared-name")  # bob's: no reason to refuse it
    for name, message in [
        ("", "This field is required."),
        ("../escape", f"agent '../escape' must be {AGENT_NAME_RULE}"),
        ("a:b", f"agent 'a:b' must be {AGENT_NAME_RULE}"),
        ("x" * 65, "must be"),
        ("research", "You already have an agent named 'research'."),
    ]:
        page = alice_client.post("/agents/", {"name": name, "system_prompt": "p"})
        assert page.status_code == 400, name
        assert message.replace("'", "&#x27;") in text(page), name
    assert list(Agent.objects.filter(owner=alice).values_list("name", flat=True)) == ["research"]
    assert alice_client.post("/agents/", {"name": "shared-name"}).status_code == 302


def test_it_refuses_a_system_prompt_too_long_and_keeps_the_old_one(alice, alice_client):
    agent = Agent.objects.create(owner=alice, name="research", system_prompt="Old.")
    page = alice_client.post(f"/agents/{agent.pk}/", {"system_prompt": "x" * 20_001})
    assert page.status_code == 400
    assert "Ensure this value has at most 20000 characters (it has 20001)." in text(page)
    agent.refresh_from_db()
    assert agent.system_prompt == "Old."


def test_it_edits_the_system_prompt_but_never_the_name(alice, alice_client):
    agent = Agent.objects.create(owner=alice, name="research")
    response = alice_client.post(
        f"/agents/{agent.pk}/", {"system_prompt": "Be brief.", "name": "renamed"}
    )
    assert response.status_code == 302
    agent.refresh_from_db()
    assert (agent.name, agent.system_prompt) == ("research", "Be brief.")


def test_it_escapes_a_hostile_system_prompt(alice, alice_client):
    Agent.objects.create(owner=alice, name="research", system_prompt=XSS)
    page = text(alice_client.get("/agents/"))
    assert XSS not in page and ESCAPED in page


def test_it_starts_a_chat_with_the_chosen_agent(alice, alice_client):
    main = Agent.objects.default_for(alice)
    research = Agent.objects.create(owner=alice, name="research")
    response = alice_client.post("/chat/new/", {"agent": str(research.pk)})
    session = Session.objects.get(owner=alice)
    assert session.agent == research and session.key.startswith("agent:research:web:")
    assert response["Location"] == f"/chat/{session.key}/"
    page = text(alice_client.get(response["Location"]))
    # The sidebar's next "New chat" offers both, this chat's agent first choice.
    assert f'<option value="{research.pk}" selected>research</option>' in page
    assert f'<option value="{main.pk}">main</option>' in page


def test_it_refuses_another_users_or_a_malformed_agent_for_a_new_chat(alice, bob, bob_client):
    alices = Agent.objects.create(owner=alice, name="research")
    assert bob_client.post("/chat/new/", {"agent": str(alices.pk)}).status_code == 404
    assert bob_client.post("/chat/new/", {"agent": "research"}).status_code == 404
    assert not Session.objects.exists()


def test_it_gives_404_for_another_users_agent_and_changes_nothing(alice, bob_client):
    agent = Agent.objects.create(owner=alice, name="research", system_prompt="Hers.")
    assert bob_client.get(f"/agents/{agent.pk}/").status_code == 404
    assert bob_client.post(f"/agents/{agent.pk}/", {"system_prompt": "x"}).status_code == 404
    agent.refresh_from_db()
    assert agent.system_prompt == "Hers."
