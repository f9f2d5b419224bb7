"""The macros page: the learned tool sequences, disabled, enabled and deleted."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from agent.macros import hint
from memory.models import Macro
from tests.support.web import ESCAPED, HTMX, XSS, text


def make_macro(owner: User, trigger: str = "search_memory", **fields: Any) -> Macro:
    values = {"next_tool": "remember_fact", "confidence": 0.9, "used_count": 7, **fields}
    return Macro.objects.create(owner=owner, trigger_tool=trigger, **values)


def test_it_lists_macros_with_their_confidence_and_uses(alice_client, alice):
    make_macro(alice, "terminal", trigger_args_pattern="git status", next_tool="read_file")
    page = text(alice_client.get(reverse("macro-list")))
    assert "<html" in page
    for shown in ["terminal", "git status", "read_file", "90%", ">7<", "Active"]:
        assert shown in page
    assert "<html" not in text(alice_client.get(reverse("macro-list"), **HTMX))


def test_it_disables_and_enables_a_macro_and_hint_ignores_it(alice_client, alice, configure):
    configure("macros", hint_confidence=0.5, min_uses=1)
    macro = make_macro(alice)
    assert hint(alice, "search_memory", {}) is not None

    row = text(alice_client.post(reverse("macro-disable", args=[macro.pk]), **HTMX))
    assert "Disabled" in row and "Enable" in row and 'class="disabled"' in row
    macro.refresh_from_db()
    assert macro.is_disabled
    assert hint(alice, "search_memory", {}) is None

    row = text(alice_client.post(reverse("macro-enable", args=[macro.pk]), **HTMX))
    assert "Disable" in row
    assert hint(alice, "search_memory", {}) is not None


def test_it_deletes_a_macro(alice_client, alice):
    macro = make_macro(alice)
    response = alice_client.post(reverse("macro-delete", args=[macro.pk]), **HTMX)
    assert response.status_code == 200 and text(response) == ""
    assert not Macro.objects.exists()
    assert alice_client.post(reverse("macro-delete", args=[macro.pk])).status_code == 404


def test_it_escapes_macro_tool_names(alice_client, alice):
    make_macro(alice, XSS, trigger_args_pattern=XSS, next_tool=XSS)
    page = text(alice_client.get(reverse("macro-list")))
    assert XSS not in page and ESCAPED in page


@pytest.mark.parametrize("action", ["macro-disable", "macro-enable", "macro-delete"])
def test_it_answers_404_for_someone_elses_macro(alice, bob_client, action):
    macro = make_macro(alice, "alice_only_tool", is_disabled=action == "macro-enable")
    response = bob_client.post(reverse(action, args=[macro.pk]), **HTMX)
    assert response.status_code == 404
    assert Macro.objects.get(pk=macro.pk).is_disabled == macro.is_disabled
    assert "alice_only_tool" not in text(bob_client.get(reverse("macro-list")))


def test_it_sends_anonymous_visitors_to_log_in(client, alice):
    response = client.get(reverse("macro-list"))
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]
