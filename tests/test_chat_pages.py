from __future__ import annotations

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.utils import timezone

from agent.approvals import create_request
from agent.models import TerminalAllowedPrefix
from agent.runtime import embed_query
from core.markdown import render_markdown
from memory import recording
from sessions_app import broadcast, chat
from sessions_app.keys import SCHEDULED_CHANNEL
from sessions_app.meter import meter, status_text
from sessions_app.models import Agent, Session
from tests.support.records import allow_terminal
from tests.support.web import HTMX, client_for, text


def test_it_opens_the_latest_chat_or_one_not_started_yet(alice, alice_client):
    page = alice_client.get("/")
    assert not Session.objects.exists()  # a GET creates nothing
    # Not a card with a button: the message box, focused, whose first message starts the chat.
    assert page.status_code == 200 and b"No chats yet" not in page.content
    content = page.content.decode()
    composer = content[content.index('<form id="composer"') :]
    composer = composer[: composer.index("</form>")]
    assert 'method="post" action="/chat/new/" data-starts-chat' in composer
    assert '<textarea id="input" name="message" rows="1" autofocus' in composer
    session = Session.objects.get(
        owner=alice, key=alice_client.post("/chat/new/")["Location"][6:-1]
    )
    assert session.key.startswith("agent:main:web:")
    assert alice_client.get("/")["Location"] == f"/chat/{session.key}/"
    assert Session.objects.count() == 1


def test_it_starts_a_new_chat(alice, alice_client):
    first = chat.start_chat(alice)
    response = alice_client.post("/chat/new/")
    second = Session.objects.exclude(pk=first.pk).get()
    assert response["Location"] == f"/chat/{second.key}/"
    assert alice_client.get("/chat/new/").status_code == 405


def test_it_shows_the_conversation_sidebar_meter_and_pending_approvals(alice, alice_client):
    session = chat.start_chat(alice)
    session.title = "Planning the trip"
    session.save()
    other = chat.start_chat(alice)
    recording.record(alice, str(session.pk), "user_message", {"content": "Where to go?"})
    recording.record(alice, str(session.pk), "assistant_response", {"content": "**Lisbon**"})
    create_request(alice, str(session.pk), "ls -la")
    content = alice_client.get(f"/chat/{session.key}/").content.decode()
    assert "Where to go?" in content
    assert "<strong>Lisbon</strong>" in content
    assert "Planning the trip" in content
    assert f"/chat/{other.key}/" in content  # in the sidebar
    assert 'id="meter-data"' in content and '"context_window": 8192' in content
    assert "ls -la" in content and 'value="always"' in content


def test_it_marks_scheduled_tasks_chats_in_the_sidebar(alice, alice_client):
    agent = Agent.objects.default_for(alice)
    Session.start(alice, agent, SCHEDULED_CHANNEL, "1b4e28ba-2fa1-11d2-883f-0016d3cca427")
    sidebar = alice_client.get("/chat/sidebar/").content.decode()
    assert sidebar.count("scheduled ·") == 1
    chat.start_chat(alice)
    assert alice_client.get("/chat/sidebar/").content.decode().count("scheduled ·") == 1


def test_it_shows_the_rule_allow_always_stores_or_why_it_is_not_offered(alice, alice_client):
    session = chat.start_chat(alice)
    git = create_request(alice, str(session.pk), "git status -s")
    python = create_request(alice, str(session.pk), "python3 -c 'print(1)'")
    page = alice_client.get(f"/chat/{session.key}/").content.decode()

    def card(request):
        return page.split(f'id="approval-{request.pk}"')[1].split('<div class="approval"')[0]

    assert '<code class="prefix">git status</code>' in card(git)
    assert "hidden" not in card(git).split('value="always"')[1].split(">")[0]
    assert 'value="always" hidden' in card(python)
    assert "python3 is an interpreter: it runs whatever code it is given" in card(python)


def test_it_answers_an_approval_with_its_button_and_tells_every_tab(alice, alice_client):
    allow_terminal(alice)
    session = chat.start_chat(alice)
    approval = create_request(alice, str(session.pk), "git status -s")
    layer = get_channel_layer()
    tab = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(broadcast.group_name(alice.pk, session.key), tab)
    card = alice_client.get(f"/chat/{session.key}/").content.decode()
    assert 'hx-post="/chat/approval/"' in card and 'name="csrfmiddlewaretoken"' in card

    answer = {"request_id": str(approval.pk), "decision": "always"}
    response = alice_client.post("/chat/approval/", answer, **HTMX)

    assert response.status_code == 200 and text(response) == ""  # the card goes
    approval.refresh_from_db()
    assert (approval.status, approval.decision) == ("approved", "always")
    assert TerminalAllowedPrefix.objects.filter(owner=alice, prefix="git status").exists()
    told = async_to_sync(layer.receive)(tab)["frame"]
    assert told == {"type": "approval_decided", "request_id": answer["request_id"], **answer}


def test_it_shows_on_the_card_why_an_answer_was_refused(alice, alice_client):
    session = chat.start_chat(alice)
    approval = create_request(alice, str(session.pk), "ls -la")
    answer = {"request_id": str(approval.pk), "decision": "once"}
    refused = text(alice_client.post("/chat/approval/", answer, **HTMX))
    assert f'id="approval-{approval.pk}"' in refused
    assert "You do not have permission to approve terminal commands." in refused
    assert 'value="once"' in refused  # still waiting: the buttons stay

    allow_terminal(alice)
    alice_client.post("/chat/approval/", {**answer, "decision": "deny"}, **HTMX)
    late = text(alice_client.post("/chat/approval/", answer, **HTMX))
    assert "already answered or has expired" in late and 'value="once"' not in late
    approval.refresh_from_db()
    assert approval.decision == "deny"


def test_it_answers_an_approval_without_htmx_too(alice, alice_client):
    allow_terminal(alice)
    session = chat.start_chat(alice)
    approval = create_request(alice, str(session.pk), "ls -la")
    answer = {"request_id": str(approval.pk), "decision": "once"}
    response = alice_client.post("/chat/approval/", answer)
    assert response.status_code == 302 and response["Location"] == f"/chat/{session.key}/"
    approval.refresh_from_db()
    assert approval.decision == "once"


def test_it_takes_an_approval_only_from_its_owner_with_a_csrf_token(alice, bob, bob_client):
    allow_terminal(alice)
    allow_terminal(bob)
    approval = create_request(alice, str(chat.start_chat(alice).pk), "ls -la")
    answer = {"request_id": str(approval.pk), "decision": "once"}
    assert bob_client.post("/chat/approval/", answer, **HTMX).status_code == 404
    assert bob_client.post("/chat/approval/", {**answer, "request_id": "nope"}).status_code == 404
    forged = client_for(alice, enforce_csrf_checks=True)
    assert forged.post("/chat/approval/", answer, **HTMX).status_code == 403
    assert forged.get("/chat/approval/").status_code == 405
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_it_sends_the_events_a_reconnecting_page_missed(alice, alice_client):
    session = chat.start_chat(alice)
    first = recording.record(alice, str(session.pk), "user_message", {"content": "one"})
    recording.record(alice, str(session.pk), "user_message", {"content": "two"})
    content = alice_client.get(f"/chat/{session.key}/events/?after={first.pk}").content.decode()
    # (By the bubble: the page's markup holds the word "one" too, in "linejoin".)
    assert '<div class="bubble user">two</div>' in content
    assert '<div class="bubble user">one</div>' not in content
    assert alice_client.get(f"/chat/{session.key}/events/?after=junk").status_code == 200


def test_it_hides_other_users_chats(alice, bob, bob_client):
    session = chat.start_chat(alice)
    session.title = "Alice's secret plans"
    session.save()
    recording.record(alice, str(session.pk), "user_message", {"content": "secret"})
    assert bob_client.get(f"/chat/{session.key}/").status_code == 404
    response = bob_client.get(f"/chat/{session.key}/events/")
    assert response.status_code == 404 and b"secret" not in response.content
    assert b"secret plans" not in bob_client.get("/chat/sidebar/").content
    assert bob_client.get(f"/sessions/{session.pk}/").status_code == 404
    assert b"secret" not in bob_client.get("/sessions/").content


def test_it_lists_archived_sessions_and_opens_their_transcripts(alice, alice_client):
    from sessions_app.turns import rollover

    old = chat.start_chat(alice)
    recording.record(alice, str(old.pk), "user_message", {"content": "from the old session"})
    rollover(old, "/new")
    assert "Archived" in alice_client.get("/sessions/").content.decode()
    assert "from the old session" in alice_client.get(f"/sessions/{old.pk}/").content.decode()


def test_it_pins_and_unpins_a_message(alice, alice_client, bob_client):
    session = chat.start_chat(alice)
    event = recording.record(alice, str(session.pk), "user_message", {"content": "remember this"})
    response = alice_client.post(f"/events/{event.pk}/pin/", HTTP_HX_REQUEST="true")
    event.refresh_from_db()
    assert event.importance == 1.0 and event.is_pinned
    assert b"pin pinned" in response.content and b"remember this" in response.content
    alice_client.post(f"/events/{event.pk}/pin/")
    event.refresh_from_db()
    assert event.importance == 0.5 and not event.is_pinned
    assert bob_client.post(f"/events/{event.pk}/pin/").status_code == 404
    assert alice_client.get(f"/events/{event.pk}/pin/").status_code == 405
    event.refresh_from_db()
    assert event.importance == 0.5


def test_it_searches_memory_in_the_page_and_in_htmx_partials(alice, alice_client, bob_client):
    from memory.tasks import embed_missing

    session = chat.start_chat(alice)
    session.title = "Dog food"
    session.save()
    said = recording.record(
        alice, str(session.pk), "user_message", {"content": "My dog Biscuit loves <b>beef</b>"}
    )
    recording.record(
        alice, "legacy-session-id", "user_message", {"content": "Biscuit from the old days"}
    )
    embed_missing()
    page = alice_client.get("/memory/", {"q": "dog Biscuit"})
    assert page.status_code == 200
    content = page.content.decode()
    assert "<html" in content and "&lt;b&gt;beef&lt;/b&gt;" in content
    # Where each was said, by its chat's title and day, linked to its place in the chat;
    # an imported session's (no chat of Neotask's) unlinked.
    day = f"{timezone.localtime(said.created_at):%-d %b %Y}"
    assert f'<a href="/events/{said.pk}/">from “Dog food”, {day}</a>' in content
    assert f"from a chat, {day}" in content
    partial = alice_client.get("/memory/", {"q": "dog Biscuit"}, HTTP_HX_REQUEST="true")
    assert b"<html" not in partial.content and b"Biscuit" in partial.content
    foreign = bob_client.get("/memory/", {"q": "dog Biscuit"}).content
    assert b"Nothing in your memory matches" in foreign and b"loves" not in foreign
    assert alice_client.get("/sessions/legacy-session-id/").status_code == 404
    assert alice_client.get("/memory/", {"q": "x" * 10_000}).status_code == 200


def test_it_shows_in_status_why_each_memory_was_recalled(alice):
    from memory.tasks import embed_missing

    old = chat.start_chat(alice)
    recording.record(
        alice, str(old.pk), "user_message", {"content": "My dog Biscuit is a golden retriever"}
    )
    recording.record(
        alice,
        str(old.pk),
        "user_message",
        {"content": "Pinned: allergic to peanuts"},
        importance=1.0,
    )
    session = chat.start_chat(alice)
    recording.record(
        alice, str(session.pk), "user_message", {"content": "What kind of dog is Biscuit?"}
    )
    embed_missing()
    vector = embed_query("What kind of dog is Biscuit?")  # as meter.status does, off this thread
    status = status_text(session, meter(session), vector)
    assert "**Recalled memories (why each is in the context):**" in status
    assert "- relevance 1.00: " in status and "allergic to peanuts" in status
    assert "- similarity 0." in status and "golden retriever" in status
    # Laid out: each memory an item of a list, not one run-on line.
    html = render_markdown(status)
    assert "<li>relevance 1.00: " in html and "<li>similarity 0." in html
