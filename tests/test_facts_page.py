"""The facts page: searching, adding, editing and deleting what the agent knows."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from memory.models import Fact
from tests.support.records import make_fact
from tests.support.web import ESCAPED, HTMX, XSS, text


def test_it_lists_facts_on_a_full_page_linked_from_memory_search(alice_client, alice):
    make_fact(alice, value="dark green")
    page = text(alice_client.get(reverse("fact-list")))
    assert "<html" in page and "dark green" in page and "Agent" in page
    search_page = text(alice_client.get(reverse("memory-search")))
    assert reverse("fact-list") in search_page and reverse("macro-list") in search_page


def test_it_searches_facts_for_htmx(alice_client, alice):
    make_fact(alice, "person", "dentist", value="Dr. Molar, Tuesdays")
    make_fact(alice, "preference", "color", value="green")
    page = text(alice_client.get(reverse("fact-list"), {"q": "molar"}, **HTMX))
    assert "<html" not in page and "Add a fact" not in page
    assert "Dr. Molar" in page and "green" not in page
    assert "No facts match “nothing-like-this”" in text(
        alice_client.get(reverse("fact-list"), {"q": "nothing-like-this"}, **HTMX)
    )


def test_it_adds_a_fact_as_the_users(alice_client, alice):
    data = {"category": " Person ", "key": "Dentist", "value": "Dr. Molar"}
    page = text(alice_client.post(reverse("fact-list"), data, **HTMX))
    assert "<html" not in page
    assert "Added person/dentist." in page
    fact = Fact.objects.get(owner=alice)
    assert (fact.category, fact.key, fact.value, fact.source) == (
        "person",
        "dentist",
        "Dr. Molar",
        Fact.Source.USER,
    )
    assert f'id="fact-{fact.pk}"' in page


def test_it_offers_to_edit_the_existing_fact_instead_of_a_duplicate(alice_client, alice):
    existing = make_fact(alice, value="green")
    data = {"category": "preference", "key": "color", "value": "blue"}
    page = text(alice_client.post(reverse("fact-list"), data, **HTMX))
    assert "You already have a fact preference/color." in page
    assert "Edit the existing one" in page
    assert f'hx-get="{reverse("fact-edit", args=[existing.pk])}"' in page
    assert f'hx-target="#fact-{existing.pk}"' in page
    assert list(Fact.objects.values_list("value", flat=True)) == ["green"]


def test_it_reports_a_fact_another_tab_added_after_the_check(alice_client, alice, monkeypatch):
    from memory.forms import FactForm

    checked = FactForm.clean

    def clean_then_race(form: FactForm) -> dict[str, Any]:
        cleaned = checked(form)  # no duplicate yet; the agent adds one before the save
        make_fact(alice, value="green")
        return cleaned

    monkeypatch.setattr(FactForm, "clean", clean_then_race)
    data = {"category": "preference", "key": "color", "value": "blue"}
    response = alice_client.post(reverse("fact-list"), data, **HTMX)
    assert response.status_code == 200
    assert "You already have a fact preference/color." in text(response)
    assert list(Fact.objects.values_list("value", flat=True)) == ["green"]


def test_it_refuses_an_empty_or_too_long_fact(alice_client, alice):
    page = text(alice_client.post(reverse("fact-list"), {"category": "a", "key": "b"}, **HTMX))
    assert "Value: This field is required." in page
    data = {"category": "a", "key": "b", "value": "x" * 4001}
    page = text(alice_client.post(reverse("fact-list"), data, **HTMX))
    assert "A fact can be at most 4,000 characters" in page
    assert not Fact.objects.exists()


def test_it_edits_a_fact_inline(alice_client, alice):
    fact = make_fact(alice)
    form = text(alice_client.get(reverse("fact-edit", args=[fact.pk]), **HTMX))
    assert form.lstrip().startswith(f'<tr id="fact-{fact.pk}" class="editing">')
    assert 'name="value"' in form and "green" in form

    data = {"category": "preference", "key": "color", "value": "teal"}
    row = text(alice_client.post(reverse("fact-edit", args=[fact.pk]), data, **HTMX))
    assert row.lstrip().startswith(f'<tr id="fact-{fact.pk}">')
    assert "teal" in row and "Edit" in row
    fact.refresh_from_db()
    assert (fact.value, fact.source) == ("teal", Fact.Source.USER)

    cancelled = text(alice_client.get(reverse("fact-row", args=[fact.pk]), **HTMX))
    assert "teal" in cancelled and "editing" not in cancelled


def test_it_keeps_an_edit_that_would_duplicate_another_fact_unsaved(alice_client, alice):
    make_fact(alice, key="color")
    fact = make_fact(alice, key="food", value="pasta")
    data = {"category": "preference", "key": "color", "value": "pasta"}
    page = text(alice_client.post(reverse("fact-edit", args=[fact.pk]), data, **HTMX))
    assert "You already have a fact preference/color." in page
    fact.refresh_from_db()
    assert fact.key == "food"


def test_it_edits_a_fact_on_its_own_page_without_htmx(alice_client, alice):
    fact = make_fact(alice)
    assert "Edit a fact" in text(alice_client.get(reverse("fact-edit", args=[fact.pk])))
    data = {"category": "preference", "key": "color", "value": "red"}
    assert alice_client.post(reverse("fact-edit", args=[fact.pk]), data).status_code == 302
    fact.refresh_from_db()
    assert fact.value == "red"


def test_it_deletes_a_fact_after_confirmation(alice_client, alice):
    fact = make_fact(alice)
    # Delete opens the forget dialog (tests/test_forget_dialog.py); the row's
    # endpoint stays for htmx callers.
    page = text(alice_client.get(reverse("fact-list")))
    assert f"{reverse('forget')}?subject=fact:{fact.pk}" in page
    response = alice_client.post(reverse("fact-delete", args=[fact.pk]), **HTMX)
    assert response.status_code == 200 and text(response) == ""
    assert not Fact.objects.exists()


def test_it_escapes_fact_values(alice_client, alice):
    make_fact(alice, value=XSS)
    page = text(alice_client.get(reverse("fact-list")))
    assert XSS not in page and ESCAPED in page


def test_it_shows_nobody_elses_facts(alice, bob_client):
    make_fact(alice, value="alice-only secret")
    for page in [
        text(bob_client.get(reverse("fact-list"))),
        text(bob_client.get(reverse("fact-list"), {"q": "secret"}, **HTMX)),
    ]:
        assert "alice-only" not in page


def test_it_lets_two_users_have_the_same_fact_key(alice, bob, bob_client):
    make_fact(alice)
    data = {"category": "preference", "key": "color", "value": "blue"}
    page = text(bob_client.post(reverse("fact-list"), data, **HTMX))
    assert "Added preference/color." in page
    assert "green" not in page  # neither alice's value nor an offer to edit it


@pytest.mark.parametrize(
    ("method", "action"),
    [("get", "fact-row"), ("get", "fact-edit"), ("post", "fact-edit"), ("post", "fact-delete")],
)
def test_it_answers_404_for_someone_elses_fact(alice, bob_client, method, action):
    fact = make_fact(alice, value="alice-only")
    data = {"category": "preference", "key": "color", "value": "bob was here"}
    response = getattr(bob_client, method)(reverse(action, args=[fact.pk]), data, **HTMX)
    assert response.status_code == 404
    assert "alice-only" not in text(response)
    assert Fact.objects.get(pk=fact.pk).value == "alice-only"


def test_it_sends_anonymous_visitors_to_log_in(client, alice):
    response = client.get(reverse("fact-list"))
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]
