"""Search in the chat list: by title and by what was said, the user's own chats only."""

from __future__ import annotations

import pytest
from django.urls import reverse

from memory import recording
from memory.models import EventType
from sessions_app import chat
from tests.support.web import HTMX

pytestmark = pytest.mark.django_db


def say(session, text: str, event_type: str = EventType.USER_MESSAGE) -> None:
    recording.record(session.owner, str(session.pk), event_type, {"content": text}, embed=False)


def titled(user, title: str):
    session = chat.start_chat(user)
    session.title = title
    session.save(update_fields=["title"])
    return session


@pytest.fixture
def chats(alice, bob):
    trip = titled(alice, "Trip to Porto")
    dinner = titled(alice, "Dinner ideas")
    say(dinner, "I am allergic to peanuts")
    say(dinner, "Then avoid satay sauce.", EventType.ASSISTANT_RESPONSE)
    other = titled(alice, "Taxes")
    theirs = titled(bob, "Bob's peanuts and Porto")
    say(theirs, "peanuts everywhere, Porto too")
    return {"trip": trip, "dinner": dinner, "other": other, "theirs": theirs}


def listed(client, query: str, **headers) -> str:
    return client.get(reverse("chat-sidebar"), {"q": query}, **headers).content.decode()


def test_it_finds_chats_by_title_and_by_message_words(alice_client, chats):
    found = listed(alice_client, "porto", **HTMX)
    assert "Trip to Porto" in found and "Dinner ideas" not in found and "Taxes" not in found
    # A word of a message (stemmed: "peanut" finds "peanuts"), and of an answer.
    for query in ("peanut", "PEANUTS", "satay"):
        found = listed(alice_client, query, **HTMX)
        assert "Dinner ideas" in found and "Trip to Porto" not in found, query
    # Part of a title, as it is typed.
    assert "Dinner ideas" in listed(alice_client, "dinn")
    assert "No chat matches “zebra”." in listed(alice_client, "zebra")
    # Without a query, every chat.
    everything = listed(alice_client, "")
    assert all(title in everything for title in ("Trip to Porto", "Dinner ideas", "Taxes"))


def test_another_users_chat_never_appears(alice_client, bob_client, chats):
    for query in ("peanuts", "porto", "bob", "everywhere"):
        assert "Bob&#x27;s" not in listed(alice_client, query), query
    found = listed(bob_client, "peanuts")
    assert "Bob&#x27;s peanuts" in found and "Dinner ideas" not in found
    assert "Trip to Porto" not in listed(bob_client, "trip")


@pytest.mark.parametrize("query", ["\x00", "%", "_", "'\"*", "a" * 5000, "NEAR(a b)", "title:x"])
def test_it_takes_any_query(alice_client, chats, query):
    response = alice_client.get(reverse("chat-sidebar"), {"q": query})
    # (NUL is refused before any view: 400, neotask_site's middleware)
    assert response.status_code == (400 if "\x00" in query else 200)


def test_the_chat_page_filters_its_list_without_javascript(alice_client, chats):
    key = chats["trip"].key
    page = alice_client.get(reverse("chat", args=[key]), {"q": "peanuts"}).content.decode()
    assert 'id="chat-search-q" value="peanuts"' in page
    listed_part = page.split('id="chat-list"')[1].split("</nav>")[0]
    assert "Dinner ideas" in listed_part and "Taxes" not in listed_part
    assert 'hx-trigger="input changed delay:250ms' in page
