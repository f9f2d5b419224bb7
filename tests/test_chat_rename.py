"""Renaming a chat, and its title shown everywhere (issue 27 part 4)."""

from __future__ import annotations

from sessions_app import chat
from sessions_app.models import Session
from tests.support.web import ESCAPED, HTMX, XSS, text


def test_it_renames_a_chat_and_every_session_of_it(alice, alice_client):
    session = chat.start_chat(alice)
    earlier = session.continue_as()
    assert earlier is not None
    response = alice_client.post(f"/chat/{session.key}/rename/", {"title": "  Trip to Lisbon "})
    assert response.status_code == 302 and response["Location"] == f"/chat/{session.key}/"
    assert set(Session.objects.filter(key=session.key).values_list("title", flat=True)) == {
        "Trip to Lisbon"
    }
    page = text(alice_client.get(f"/chat/{session.key}/"))
    assert '<h1 id="chat-title">Trip to Lisbon</h1>' in page
    assert "<title>Trip to Lisbon · Neotask</title>" in page
    assert '<span class="chat-title">Trip to Lisbon</span>' in page  # the sidebar
    assert "Trip to Lisbon" in text(alice_client.get("/sessions/"))


def test_it_answers_htmx_with_the_header_and_a_sidebar_refresh(alice, alice_client):
    session = chat.start_chat(alice)
    response = alice_client.post(f"/chat/{session.key}/rename/", {"title": "Budget"}, **HTMX)
    assert response.status_code == 200
    assert response["HX-Trigger"] == "neotask:sessions"
    assert '<h1 id="chat-title">Budget</h1>' in text(response)


def test_it_refuses_an_empty_or_too_long_title_and_keeps_the_old_one(alice, alice_client):
    session = chat.start_chat(alice)
    Session.objects.filter(pk=session.pk).update(title="Kept")
    url = f"/chat/{session.key}/rename/"
    for title, message in [
        ("   ", "Give the chat a title."),
        ("x" * 201, "A title can have at most 200 characters (it has 201)."),
    ]:
        page = alice_client.post(url, {"title": title})
        assert page.status_code == 400 and message in text(page)
        partial = alice_client.post(url, {"title": title}, **HTMX)
        assert partial.status_code == 200 and message in text(partial)  # htmx swaps a 200
        assert 'aria-invalid="true"' in text(partial)
    assert alice_client.post(url, {}).status_code == 400
    assert Session.objects.get(pk=session.pk).title == "Kept"


def test_it_escapes_a_hostile_title(alice, alice_client):
    session = chat.start_chat(alice)
    alice_client.post(f"/chat/{session.key}/rename/", {"title": XSS})
    page = text(alice_client.get(f"/chat/{session.key}/"))
    assert XSS not in page and ESCAPED in page


def test_it_gives_404_for_another_users_chat_and_changes_nothing(alice, bob_client):
    session = chat.start_chat(alice)
    url = f"/chat/{session.key}/rename/"
    assert bob_client.get(url).status_code == 404
    assert bob_client.post(url, {"title": "Mine now"}).status_code == 404
    assert bob_client.post("/chat/not-a-key/rename/", {"title": "x"}).status_code == 404
    assert Session.objects.get(pk=session.pk).title == ""


def test_it_shows_the_rename_page_without_javascript(alice, alice_client):
    session = chat.start_chat(alice)
    page = alice_client.get(f"/chat/{session.key}/rename/")
    assert page.status_code == 200
    assert f'action="/chat/{session.key}/rename/"' in text(page)


def test_it_sends_the_chat_page_its_title_once_the_first_message_named_it(alice, alice_client):
    # The header was drawn as "New chat"; the sidebar refresh after the first
    # message carries the title the message gave the chat, for the header too.
    session = chat.start_chat(alice)
    session.note_message("What should I pack for Lisbon?")
    response = alice_client.get(f"/chat/sidebar/?current={session.key}", **HTMX)
    html = text(response)
    assert '<h1 id="chat-title" hx-swap-oob="true">What should I pack for Lisbon?</h1>' in html
    assert "<title>What should I pack for Lisbon? · Neotask</title>" in html
    assert "hx-swap-oob" not in text(alice_client.get("/chat/sidebar/", **HTMX))


def test_it_keeps_a_title_the_user_chose_before_the_first_message(alice, alice_client):
    session = chat.start_chat(alice)  # this instance still thinks the chat is untitled
    alice_client.post(f"/chat/{session.key}/rename/", {"title": "Chosen"})
    session.note_message("hello")
    assert session.title == "Chosen"
    assert Session.objects.get(pk=session.pk).title == "Chosen"
