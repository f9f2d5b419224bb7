from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.test import Client

from memory.models import Event, Fact
from tests.helpers import OWNED_MODELS, make_rows
from tests.test_ownership import PROJECT_APPS


@pytest.fixture
def root(db) -> User:
    return User.objects.create_superuser("root", password="root-password")


@pytest.fixture
def root_client(root) -> Client:
    client = Client()
    client.force_login(root)
    return client


def changelist(model) -> str:
    return f"/admin/{model._meta.app_label}/{model._meta.model_name}/"


def test_it_lists_every_table_on_the_admin_index(root_client):
    content = root_client.get("/admin/").content.decode()
    project_models = [m for m in admin.site._registry if m._meta.app_label in PROJECT_APPS]
    assert set(project_models) == set(OWNED_MODELS)
    for model in [*project_models, User]:
        assert changelist(model) in content, model


@pytest.mark.parametrize(
    "label",
    [
        "memory.event",
        "memory.fact",
        "memory.macro",
        "sessions_app.agent",
        "sessions_app.session",
        "scheduler.scheduledtask",
        "agent.terminalallowedprefix",
    ],
)
def test_it_registers_each_model_with_search_filters_and_read_only_times(label, root_client, alice):
    model = next(m for m in admin.site._registry if m._meta.label_lower == label)
    model_admin = admin.site._registry[model]
    assert model_admin.search_fields and model_admin.list_filter and model_admin.list_display
    time_fields = {f.name for f in model._meta.fields if f.name.endswith("_at")}
    editable_times = {
        f
        for f in time_fields
        if f in model_admin.readonly_fields or not model._meta.get_field(f).editable
    }
    assert {"created_at"} & time_fields <= editable_times

    row = make_rows(alice, "x")[model]
    response = root_client.get(changelist(model), {"q": "x"})
    assert response.status_code == 200
    response = root_client.get(f"{changelist(model)}{row.pk}/change/")
    assert response.status_code == 200


def test_it_searches_events_by_text_and_session(root_client, alice):
    rows = make_rows(alice, "needle")
    make_rows(alice, "hay")
    content = root_client.get(changelist(Event), {"q": "needle"}).content.decode()
    assert "hello needle" in content and "hello hay" not in content
    event = next(r for m, r in rows.items() if m is Event)
    content = root_client.get(changelist(Event), {"q": event.session_id}).content.decode()
    assert "hello needle" in content and "hello hay" not in content


def test_it_lets_the_admin_edit_a_fact(root_client, alice):
    fact = Fact.objects.create(owner=alice, category="pref", key="color", value="blue")
    response = root_client.post(
        f"{changelist(Fact)}{fact.pk}/change/",
        {"owner": alice.pk, "category": "pref", "key": "color", "value": "green", "source": "user"},
    )
    assert response.status_code == 302
    fact.refresh_from_db()
    assert fact.value == "green"


def test_it_refuses_the_admin_to_non_staff(alice_client):
    response = alice_client.get("/admin/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    assert alice_client.get(changelist(Event)).status_code == 302


def test_it_shows_staff_only_their_own_rows(alice, bob):
    make_rows(alice, "-alice-row")
    make_rows(bob, "-bob-row")
    alice.is_staff = True
    alice.save()
    alice.user_permissions.set(Permission.objects.filter(codename__in=["view_fact"]))
    client = Client()
    client.force_login(alice)
    content = client.get(changelist(Fact)).content.decode()
    assert "color-alice-row" in content and "color-bob-row" not in content
