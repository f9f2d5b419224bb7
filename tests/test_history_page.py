"""The History page: the owner's changes, newest first, filtered by what changed,
who changed it and text; htmx gets the results only. The API lists it the same way."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from core.history import Actor, record_change
from core.models import Change
from neotask_site.views import HISTORY_PER_PAGE
from sessions_app.models import ApiToken
from tests.support.web import HTMX, text


def change(owner: User, label: str, actor: Actor, kind: str = Change.Subject.FACT) -> Change:
    made = record_change(
        owner, actor, kind, label, label, Change.Action.CHANGED, {"value": "a"}, {"value": "b"}
    )
    assert made is not None
    return made


def labels(content: str, *candidates: str) -> list[str]:
    """The candidates found in `content`, in the order they appear."""
    found = [label for label in candidates if label in content]
    return sorted(found, key=content.index)


def test_it_lists_the_owners_changes_newest_first_with_old_and_new(alice, alice_client):
    change(alice, "pref/tea", Actor.user(alice))
    change(alice, "pref/milk", Actor.agent("main"))
    content = text(alice_client.get("/history/"))
    assert labels(content, "pref/tea", "pref/milk") == ["pref/milk", "pref/tea"]
    assert "Agent (main)" in content and "You (alice)" in content
    assert "<b>value</b>: a" in content and "<b>value</b>: b" in content
    assert 'href="/history/"' in content  # the nav link


def test_it_filters_by_subject_actor_and_text(alice, alice_client):
    change(alice, "pref/tea", Actor.user(alice))
    change(alice, "pref/milk", Actor.agent("main"))
    change(alice, "Morning brief", Actor.task("Morning brief"), Change.Subject.TASK)
    every = ("pref/tea", "pref/milk", "Morning brief")
    by_subject = text(alice_client.get("/history/", {"subject": "task"}))
    assert labels(by_subject, *every) == ["Morning brief"]
    by_actor = text(alice_client.get("/history/", {"actor": "agent"}))
    assert labels(by_actor, *every) == ["pref/milk"]
    by_text = text(alice_client.get("/history/", {"q": "TEA"}))
    assert labels(by_text, *every) == ["pref/tea"]
    nothing = text(alice_client.get("/history/", {"q": "coffee"}))
    assert "No changes match these filters." in nothing


def test_it_answers_htmx_with_the_results_only(alice, alice_client):
    change(alice, "pref/tea", Actor.user(alice))
    content = text(alice_client.get("/history/", {"subject": "fact"}, **HTMX))
    assert "pref/tea" in content
    assert "<html" not in content and "<form" not in content


def test_it_pages_through_a_long_history_keeping_the_filters(alice, alice_client):
    for number in range(HISTORY_PER_PAGE + 1):
        change(alice, f"fact-{number:03}", Actor.user(alice))
    first = text(alice_client.get("/history/", {"subject": "fact"}))
    assert "fact-050" in first and "fact-000" not in first
    assert 'href="?subject=fact&amp;page=2"' in first
    second = text(alice_client.get("/history/", {"subject": "fact", "page": "2"}))
    assert "fact-000" in second and "fact-050" not in second


def test_it_says_what_is_wrong_with_a_bad_filter_and_lists_nothing(alice, alice_client):
    change(alice, "pref/tea", Actor.user(alice))
    response = alice_client.get("/history/", {"subject": "password", "q": "x" * 201})
    assert response.status_code == 400
    content = text(response)
    assert "What: Select a valid choice." in content
    assert "Search: Ensure this value has at most 200 characters" in content
    assert "pref/tea" not in content


def test_it_shows_nobody_elses_changes(alice, bob, bob_client):
    change(alice, "alice-secret-fact", Actor.user(alice))
    change(bob, "bobs-fact", Actor.user(bob))
    for query in ({}, {"q": "alice-secret"}, {"actor": "user"}, {"q": "alice"}):
        content = text(bob_client.get("/history/", query))
        assert "alice-secret-fact" not in content and "You (alice)" not in content
    assert "bobs-fact" in text(bob_client.get("/history/"))


def test_it_sends_a_visitor_to_log_in(alice, client):
    response = client.get("/history/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_it_lists_the_history_in_the_api_with_the_pages_filters(alice, bob):
    token, secret = ApiToken.issue(alice, "script")  # recorded too
    api = Client(headers={"Authorization": f"Bearer {secret}"})
    change(alice, "pref/drink", Actor.agent("main"))
    change(alice, "home/city", Actor.user(alice))
    change(bob, "pref/bobs", Actor.agent("main"))

    everything = api.get(reverse("api-history")).json()
    by_agent = api.get(reverse("api-history"), {"actor": "agent"}).json()

    labels = [c["subject"]["label"] for c in everything["changes"]]
    assert labels == ["home/city", "pref/drink", str(token)]
    assert [c["subject"]["label"] for c in by_agent["changes"]] == ["pref/drink"]
    assert by_agent["changes"][0]["actor"] == {"kind": "agent", "label": "main"}
    refused = api.get(reverse("api-history"), {"subject": "passwords"})
    assert refused.status_code == 400 and "subject" in refused.json()["error"]
